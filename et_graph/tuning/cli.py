"""``et-graph tune TASK``: the same Optuna budget for every model, on validation data only.

    et-graph tune anomaly --config configs/anomaly/tolokers.toml --trials 20 \\
        --timeout-minutes 30 --storage sqlite:///runs/tolokers.db --models et,gbt --out runs/tune

``--models`` names the models to tune; the task's other flags (``--epochs 50``,
``--dataset reddit``) override ``--config``. Per model, the best trial is written as a preset
(``OUT/best_<model>.toml``) that ``et-graph TASK --config`` runs; ``OUT/study_report.md`` and
``OUT/optimization_history.png`` summarise the studies.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, Optional

from ..config import add_config_arguments, resolve
from .anomaly import TUNE_METRICS, AnomalyObjective
from .study import TuneBudget, run_study, save_best_preset, study_summary, write_report

TASKS = ("anomaly",)


def build_parser() -> argparse.ArgumentParser:
    from ..protocols.anomaly_config import AnomalyConfig

    parser = argparse.ArgumentParser(prog="et-graph tune", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", choices=TASKS)
    tune = parser.add_argument_group("tuning")
    tune.add_argument("--trials", type=int, default=TuneBudget.trials,
                      help="finished trials per model, counting earlier runs of the study")
    tune.add_argument("--timeout-minutes", type=float, default=TuneBudget.timeout_minutes,
                      help="wall-clock limit per model for this invocation")
    tune.add_argument("--storage", default="sqlite:///runs/tune.db",
                      help="Optuna storage URL; the record that a restarted run continues")
    tune.add_argument("--metric", choices=TUNE_METRICS, default="auroc",
                      help="validation metric to maximise")
    tune.add_argument("--sampler-seed", type=int, default=0)
    tune.add_argument("--study-prefix", default="", help="prefix of the study names")
    add_config_arguments(parser, AnomalyConfig)
    return parser


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    from ..protocols.anomaly_config import AnomalyConfig

    args = build_parser().parse_args(argv)
    config = resolve(AnomalyConfig, args)
    budget = TuneBudget(args.trials, args.timeout_minutes, args.sampler_seed)
    models = config.protocol.model_names()  # --models: the models to tune, same budget each
    return tune_anomaly(config, models, budget, args.storage, args.metric,
                        Path(config.run.out or "runs/tune"), args.study_prefix)


def tune_anomaly(config: Any, models: list[str], budget: TuneBudget, storage: str,
                 metric: str = "auroc", out: Path = Path("runs/tune"), prefix: str = "",
                 data: Any = None) -> dict[str, Any]:
    """Tune every model in ``models`` with the same budget; write presets and the report."""
    config.run.apply_threads()
    _ensure_sqlite_folder(storage)
    summaries, presets = {}, {}
    dataset = None
    for model in models:
        objective = AnomalyObjective(config, model, metric, data=data)
        dataset = str(getattr(objective.data, "name", None) or config.data.dataset)
        start = time.perf_counter()
        study = run_study(f"{prefix}anomaly-{dataset}-{model}", objective, budget, storage,
                          progress=config.run.progress)
        summary = study_summary(study, time.perf_counter() - start)
        summaries[model] = summary
        if summary["best_trial"] is not None:
            best_config = objective.trial_config(study.best_trial)
            presets[model] = save_best_preset(out / f"best_{model}.toml", best_config, {
                "source": f"et-graph tune anomaly, study {study.study_name}",
                "best_trial": summary["best_trial"],
                "best_validation": summary["best_value"],
                "metric": f"validation {metric}",
            })
    write_report(out, "anomaly", dataset or "", metric, budget, summaries, presets, config)
    print((out / "study_report.md").read_text())
    return {"models": summaries, "presets": {k: str(v) for k, v in presets.items()}}


def _ensure_sqlite_folder(storage: str) -> None:
    prefix = "sqlite:///"
    if storage.startswith(prefix):
        Path(storage[len(prefix):]).expanduser().parent.mkdir(parents=True, exist_ok=True)
