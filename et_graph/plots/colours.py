"""One colour per model in every figure, from the Okabe-Ito palette (colour-blind safe).

Colours picked by position in each figure's own list gave a model one colour in the ROC curves
and another in the training curves of the same run. A model keeps its colour everywhere; its
seed ensemble (``NAME_ensemble``) shares it, told apart by the line style.
"""
from __future__ import annotations

from collections.abc import Collection
from typing import Optional

__all__ = ["MODEL_COLOURS", "model_colour"]

BLUE, SKY, ORANGE, GREEN = "#0072B2", "#56B4E9", "#E69F00", "#009E73"
VERMILLION, PURPLE, YELLOW, BLACK = "#D55E00", "#CC79A7", "#F0E442", "#000000"

#: The fixed colours: ET and its own rows in blues, the baselines in the palette's others.
MODEL_COLOURS = {
    "et": BLUE, "et_energy_trained": SKY, "et_energy": SKY, "et_reconstruction": "#004C7A",
    "et_combined": "#3A7CA5", "et_stacked": "#1F3A93",
    "gbt": ORANGE, "mlp": GREEN, "structure_agnostic": GREEN, "gcn": VERMILLION,
    "gin": VERMILLION, "gine": VERMILLION, "gat": PURPLE, "gatedgcn": PURPLE,
    "iforest": ORANGE, "iforest_defaults": ORANGE, "lof": GREEN, "lof_defaults": GREEN,
    "degree": "#7F7F7F", "dominant": VERMILLION, "anomalydae": PURPLE, "cola": "#8C6D31",
    "conad": "#7F3C8D", "mean_patch": ORANGE, "nearest_open": GREEN,
}
# Any other name: the first of these not yet given to a model in the figure, by name order.
_SPARE = ("#8C564B", "#17BECF", "#BCBD22", "#1B9E77", "#393B79", "#AD494A", "#637939",
          "#843C39", "#7B4173", "#3182BD")


def _key(name: str) -> str:
    return name.lower().replace("-", "_").replace(" ", "_")


def _base(name: str) -> str:
    return name[: -len("_ensemble")] if name.endswith("_ensemble") else name


def model_colour(name: str, others: tuple[str, ...] = (),
                 builtin: Optional[Collection[str]] = None) -> str:
    """The colour of model ``name`` (its ``_ensemble`` row: the model's). A name without a
    fixed colour gets a spare one chosen by its rank among ``others`` (the figure's other
    unknown names), so that two unknown models in one figure never share it. ``builtin``
    (the task's own model names), when given, is what may hold a fixed colour: a registered
    model named ``mlp`` beside the graph runner's ``structure_agnostic`` took the same green."""
    def fixed(model: str) -> bool:
        return _key(model) in MODEL_COLOURS and (builtin is None or _key(model) in builtin)

    base = _base(name)
    if fixed(base):
        return MODEL_COLOURS[_key(base)]
    unknown = sorted({b for b in (*map(_base, others), base) if not fixed(b)})
    return _SPARE[unknown.index(base) % len(_SPARE)]
