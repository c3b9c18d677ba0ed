"""The protocol line of an ``et-graph anomaly`` run: what was split, fitted, selected and
scored, and what each row reads (results.md, the printout and results.json's ``protocol``)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

import numpy as np

from ..reporting import counted
from .anomaly import ENERGY_ROW, Split
from .anomaly_config import ET_MODELS, MODEL_NAMES, AnomalyConfig

__all__ = ["describe_protocol"]

#: Built-in loaders whose files hold several relations (CARE-GNN's YelpChi and Amazon).
MULTI_RELATION_DATASETS = ("yelpchi", "amazon")


def describe_protocol(config: AnomalyConfig, splits: list[Split], names: list[str],
                      y: Optional[np.ndarray] = None,
                      own: Optional[Mapping[str, str]] = None,
                      registered: Optional[Mapping[str, str]] = None) -> str:
    """The run's protocol in one paragraph; ``own`` and ``registered`` map the rows of the
    caller's own detectors (passed to ``run``) and of the registered ones to their class
    names."""
    p, t = config.protocol, config.train
    train, val, test = splits[0].sizes()
    # A validation-only run counts no test label either.
    parts = (splits[0].train, splits[0].val, *(() if p.validation_only else (splits[0].test,)))
    anomalous = ("" if y is None else " (" + "/".join(
        str(int(y[part.numpy()].sum())) for part in parts) + " anomalous)")
    if p.protocol == "gadbench":
        head = ("GADBench: the dataset's own train/val/test masks (seed i uses mask column i, or "
                "the one column)")
    else:
        head = (f"paper/BWGNN: stratified split, train ratio {p.train_ratio}, rest 1:2 val:test, "
                f"split seed {p.split_seed}" + (" + seed" if p.vary_split else " (fixed)"))
    d = config.data
    features = f"{d.feature_norm} transform of x" + (
        f" ‖ its in-neighbours' {d.neighbour_stats}" if d.neighbour_stats != "none" else "") + (
        " ‖ log(1 + degree)" if d.degree_feature else "")
    # a trees-only run trains no epoch (the caller's detectors say their own epochs below)
    neural = any(name in MODEL_NAMES and name != "gbt" for name in names)
    text = (f"{head}; {train}/{val}/{test} train/val/test nodes{anomalous}; "
            f"{counted(p.seeds, 'seed')}; every model's input features: {features}; "
            + (f"neural models: up to {counted(t.epochs, 'epoch')}, checkpoint = best validation "
               f"{t.select_metric}; " if neural else "")
            + "threshold from 0.05..0.95 (19) maximising validation macro-F1; "
            + ("VALIDATION ONLY: the tables score the validation nodes, no test node is scored"
               if p.validation_only else "test nodes scored once"))
    if d.relation == "homo" and (d.dataset in MULTI_RELATION_DATASETS
                                 or str(d.data or "").lower().endswith(".mat")):
        # A fraud file's default merges its relations; the line said nothing of it (an audit).
        text += ("; relations: homo (the file's merged adjacency: a linked pair once, whatever "
                 "relations link it; every model sees it)")
    elif d.relation != "homo":
        # Which models tell the relations apart (a fraud-data audit: only the config said it;
        # a later one found et_stacked, which attends per relation too, called merged).
        text += f"; relations: {d.relation}"
        if d.relation == "multi":
            merged = "every relation's edges together, a pair linked in two relations twice"
            attending = ([name for name in ET_MODELS if name in names]
                         if config.et.multi_relation else [])
            if not attending:
                text += f" (every model sees {merged})"
            else:
                others = [name for name in names if name not in attending]
                who = " and ".join(f"{name} (its ET)" if name == "et_stacked" else name
                                   for name in attending)
                verb = "attends" if len(attending) == 1 else "attend"
                text += (f" ({who} {verb} per relation"
                         + (f"; the other models see {merged})" if others else ")"))
    # What each model reads, where it differs (the tables' rows are not all the same input).
    gbt_inputs = {"x": "x only", "x_mean": "x ‖ its neighbours' mean",
                  "x_mean_mean2": "x ‖ the mean of its neighbours' x ‖ the mean of their means"}
    gbt_trick = "gbt" in names and config.gbt.label_trick
    if "gbt" in names:
        text += f"; GBT reads {gbt_inputs[config.gbt.features]}"
        if gbt_trick:
            text += (" ‖ its neighbours' training labels (label trick, one hop: a node never "
                     "its own)")
    if "et_stacked" in names:
        text += (f"; et_stacked = ET reading one more column, the log-odds of GBT (the gbt "
                 f"settings, on GBT's input) cross-fitted over {config.stack.stack_folds} "
                 "stratified folds of the training nodes (a training node's from the trees "
                 "that did not see its label, every other node's the folds' mean)")
    if set(ET_MODELS) & set(names) and config.et.label_trick:
        text += ("; ET also reads its neighbours' training labels (label trick: a node never "
                 "its own, validation and test labels never), an input "
                 + ("GBT gets too" if gbt_trick else "no baseline gets"))
    if p.seed_ensemble:
        text += ("; NAME_ensemble = one detector: the mean of the model's scores over the seeds "
                 "(same split), its threshold chosen on validation")
    if "et" in names and p.reports_energy:
        text += (f"; {ENERGY_ROW} = node energy of the label-trained ET at its final state, sign "
                 "and threshold chosen on validation (not an unsupervised detector)")
    for head, rows in (("own detectors (passed from Python", own),
                       ("registered detectors (by register_detector", registered)):
        if rows:
            text += (f"; {head}, fitted on the same splits with the settings their factories "
                     "give them, which may differ from the built-in models' above): "
                     + ", ".join(f"{name} = {kind}" for name, kind in rows.items()))
    if p.ddp:
        # the process count changes a mini-batch result (fewer steps per rank and epoch) and was
        # recorded nowhere (a DDP audit)
        from ..training.engine import rank_world

        text += (f"; data-parallel over {rank_world()[1]} processes (--ddp: gradients averaged "
                 "over the ranks' shards)")
    return text
