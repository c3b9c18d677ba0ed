"""The one training engine: best-epoch selection and its tie rule, patience, schedules, atomic
checkpoints, kill/resume equivalence and clear errors."""
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from et_graph.exceptions import ConfigWarning, ETGraphWarning
from et_graph.training import (
    CheckpointConfig,
    CheckpointError,
    TrainConfig,
    Trainer,
    Validation,
    load_checkpoint,
    save_checkpoint,
)

pytestmark = pytest.mark.usefixtures("one_thread")


class ScriptedTask:
    """Validation scores and losses follow a script; training does a tiny real step."""

    def __init__(self, scores, losses=None):
        self.scores, self.losses = scores, losses or [float("nan")] * len(scores)
        self.epoch = -1

    def batches(self, epoch):
        self.epoch = epoch
        yield torch.ones(1, 1)

    def loss(self, model, batch):
        return model(batch).pow(2).sum()

    def validate(self, model):
        return Validation(self.scores[self.epoch], self.losses[self.epoch],
                          extra={"epoch_seen": self.epoch})


def test_best_epoch_and_tie_rule():
    model = nn.Linear(1, 1)
    # Scores: the best (0.9) first reached at epoch 1, tied at 3 (lower loss wins) and 4 (higher
    # loss loses).
    task = ScriptedTask([0.5, 0.9, 0.7, 0.9, 0.9], [1.0, 0.5, 0.1, 0.4, 0.6])
    result = Trainer(TrainConfig(epochs=5, lr=0.1), progress=False).fit(model, task)
    assert result.best_epoch == 3 and result.best.extra == {"epoch_seen": 3}
    # Without losses, among equal scores the earliest epoch stays.
    task = ScriptedTask([0.5, 0.9, 0.7, 0.9, 0.9])
    assert Trainer(TrainConfig(epochs=5), progress=False).fit(model, task).best_epoch == 1


def test_best_weights_are_restored():
    model = nn.Linear(1, 1, bias=False)
    snapshots = []

    class Task(ScriptedTask):
        def validate(self, model):
            snapshots.append(model.weight.detach().clone())
            return super().validate(model)

    Trainer(TrainConfig(epochs=4, lr=0.1), progress=False).fit(
        model, Task([0.1, 0.8, 0.3, 0.2]))
    assert torch.equal(model.weight, snapshots[1])
    assert not torch.equal(model.weight, snapshots[-1])


def test_a_validation_pass_that_overflows_scores_nan_and_never_wins():
    """ET layers raise FloatingPointError where a descent overflows; in a validation pass that
    is a NaN score (never the best epoch), as a NaN output was before, not the end of the run."""

    class Task(ScriptedTask):
        def validate(self, model):
            if self.epoch == 2:
                raise FloatingPointError("ETConv produced NaN or inf tokens")
            return super().validate(model)

    result = Trainer(TrainConfig(epochs=4), progress=False).fit(
        nn.Linear(1, 1), Task([0.5, 0.6, 0.9, 0.7]))
    assert result.best_epoch == 3 and math.isnan(result.history[2]["val_score"])


def test_patience_stops_early():
    task = ScriptedTask([0.5, 0.9, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1])
    result = Trainer(TrainConfig(epochs=8, patience=2), progress=False).fit(nn.Linear(1, 1), task)
    assert result.stopped_early and result.epochs_run == 4 and result.best_epoch == 1


@pytest.mark.parametrize("schedule", ["cosine", "plateau"])
def test_lr_schedules_lower_the_rate(schedule):
    config = TrainConfig(epochs=6, lr=0.1, lr_schedule=schedule, lr_patience=0)
    result = Trainer(config, progress=False).fit(nn.Linear(1, 1), ScriptedTask([0.5] * 6))
    rates = [row["lr"] for row in result.history]
    assert rates[0] == 0.1 and rates[-1] < 0.1


def test_plateau_patience_counts_as_documented():
    """``lr_patience=1`` tolerates one epoch without a gain and halves the LR after the second
    (PyTorch's rule, which the help once described one epoch early); the count restarts."""
    config = TrainConfig(epochs=7, lr=0.1, lr_schedule="plateau", lr_patience=1)
    result = Trainer(config, progress=False).fit(nn.Linear(1, 1), ScriptedTask([0.5] * 7))
    assert [row["lr"] for row in result.history] == [0.1, 0.1, 0.1, 0.05, 0.05, 0.025, 0.025]


@pytest.mark.parametrize("task", ["anomaly", "tudataset", "gnnbenchmark", "image_completion",
                                  "unsupervised_anomaly"])
def test_a_schedule_flag_beside_another_schedule_is_named(task):
    """``--lr-patience 3`` with the cosine schedule (or ``--lr-floor`` with the plateau one)
    changed nothing without a word; a flag the chosen schedule reads stays silent."""
    import importlib
    import warnings

    from et_graph.config import parse

    config = importlib.import_module(f"et_graph.experiments.{task}").CONFIG
    with pytest.warns(ConfigWarning, match=r"train\.lr_patience \(read by lr_schedule='plateau', "
                      r"this run's is 'cosine'\)"):
        parse(config, ["--lr-schedule", "cosine", "--lr-patience", "3"])
    with pytest.warns(ConfigWarning, match=r"train\.lr_floor \(read by lr_schedule='cosine'"):
        parse(config, ["--lr-schedule", "plateau", "--lr-floor", "0.1"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("error", ETGraphWarning)
        parse(config, ["--lr-schedule", "plateau", "--lr-patience", "3"])
        parse(config, ["--lr-schedule", "cosine", "--lr-floor", "0.1"])


@pytest.mark.parametrize("bad", [dict(epochs=0), dict(lr=0.0), dict(lr=float("nan")),
                                 dict(lr_schedule="step"), dict(patience=-1),
                                 dict(optimizer="sgd"), dict(ema_decay=1.0),
                                 dict(ema_decay=-0.1), dict(epochs=2.5), dict(epochs=True),
                                 dict(patience=1.5), dict(lr="0.1"),
                                 # from an audit: each was accepted
                                 dict(lr_floor=-1.0), dict(lr_floor=5.0), dict(lr_patience=-1),
                                 dict(grad_clip=float("nan")), dict(weight_decay=float("inf"))])
def test_bad_config_raises(bad):
    with pytest.raises(ValueError):
        TrainConfig(**bad)


def test_a_task_without_training_batches_is_an_error():
    class EmptyTask(ScriptedTask):
        def batches(self, epoch):
            self.epoch = epoch
            return iter(())

    with pytest.raises(ValueError, match="no training batch"):
        Trainer(TrainConfig(epochs=2), progress=False).fit(nn.Linear(1, 1), EmptyTask([0.5] * 2))


def test_an_epoch_without_an_optimiser_step_is_never_selected():
    """From a large-graph audit: with a tiny subgraph_ratio no batch of epoch 0 held a training
    node, and that epoch (the initial weights) was selected as the best."""
    class SkippingTask(ScriptedTask):
        def loss(self, model, batch):
            return None if self.epoch == 0 else super().loss(model, batch)

    with pytest.warns(RuntimeWarning, match="epoch 0 took no optimiser step"):
        result = Trainer(TrainConfig(epochs=3), progress=False).fit(
            nn.Linear(1, 1), SkippingTask([0.9, 0.5, 0.6]))
    assert result.best_epoch == 2  # 0.9 on untouched weights does not count

    class NeverTask(ScriptedTask):
        def loss(self, model, batch):
            return None

    with pytest.raises(ValueError, match="no epoch took an optimiser step"), pytest.warns(
            RuntimeWarning):
        Trainer(TrainConfig(epochs=2), progress=False).fit(nn.Linear(1, 1), NeverTask([0.5] * 2))

    # with validate_every 2 a pass sees every epoch since the last one: epoch 1 took no step
    # but carries epoch 0's, so it may be kept (a review: it was barred, and the run failed)
    class OddTask(ScriptedTask):
        def loss(self, model, batch):
            return None if self.epoch % 2 else super().loss(model, batch)

    with pytest.warns(RuntimeWarning, match=r"epoch 1 took no optimiser step \(no batch held "
                                            r"a training node\)$"):
        result = Trainer(TrainConfig(epochs=4, validate_every=2), progress=False).fit(
            nn.Linear(1, 1), OddTask([0.1, 0.9, 0.1, 0.5]))
    assert result.best_epoch == 1


def test_a_validate_that_returns_a_number_is_named():
    """A custom task returning a float failed with "'float' object has no attribute 'beats'"."""
    class FloatTask(ScriptedTask):
        def validate(self, model):
            return 0.5

    with pytest.raises(TypeError, match=r"FloatTask.validate must return a .*Validation"):
        Trainer(TrainConfig(epochs=2), progress=False).fit(nn.Linear(1, 1), FloatTask([0.5] * 2))


def test_non_finite_loss_and_oom_are_explained():
    class NanTask(ScriptedTask):
        def loss(self, model, batch):
            return model(batch).sum() * float("nan")

    with pytest.raises(FloatingPointError, match="non-finite"):
        Trainer(TrainConfig(epochs=1), progress=False).fit(nn.Linear(1, 1), NanTask([0.1]))

    class OOMTask(ScriptedTask):
        def loss(self, model, batch):
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried 9 GB")

    with pytest.raises(MemoryError, match="--batch-size"):
        Trainer(TrainConfig(epochs=1), progress=False, oom_hint="pass --batch-size").fit(
            nn.Linear(1, 1), OOMTask([0.1]))

    class ValidationOOMTask(ScriptedTask):  # the validation pass ran out: a raw RuntimeError
        def validate(self, model):
            raise RuntimeError("DefaultCPUAllocator: not enough memory")

    with pytest.raises(MemoryError, match="chunk"):
        Trainer(TrainConfig(epochs=1), progress=False, oom_hint="score in chunks").fit(
            nn.Linear(1, 1), ValidationOOMTask([0.1]))
    # The phase and its own advice (a large-graph audit: GCN's full-graph validation ran out
    # and the message said "out of memory during training: pass a smaller batch_size").
    with pytest.raises(MemoryError, match="during the validation pass: one pass, any batch"):
        Trainer(TrainConfig(epochs=1), progress=False, oom_hint="pass --batch-size",
                validation_oom_hint="one pass, any batch").fit(
            nn.Linear(1, 1), ValidationOOMTask([0.1]))

    class BrokenTask(ScriptedTask):  # any other error passes unchanged, not as its own cause
        def validate(self, model):
            raise NotImplementedError("not yet")

    with pytest.raises(NotImplementedError) as caught:
        Trainer(TrainConfig(epochs=1), progress=False).fit(nn.Linear(1, 1), BrokenTask([0.1]))
    assert caught.value.__cause__ is not caught.value


# ----------------------------------------------------------------------------------------------
# Checkpoints
# ----------------------------------------------------------------------------------------------
class RegressionTask:
    """A real little training problem with shuffled mini-batches and dropout (randomness from
    the task's generator and torch's global RNG), so that resuming must restore both."""

    def __init__(self, seed=0):
        gen = torch.Generator().manual_seed(123)
        self.x = torch.randn(64, 4, generator=gen)
        self.y = self.x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1 * torch.randn(64, generator=gen)
        self.generator = torch.Generator().manual_seed(seed)

    def batches(self, epoch):
        order = torch.randperm(64, generator=self.generator)
        for i in range(0, 64, 16):
            yield order[i:i + 16]

    def loss(self, model, index):
        return (model(self.x[index]).squeeze(-1) - self.y[index]).pow(2).mean()

    def validate(self, model):
        error = float((model(self.x).squeeze(-1) - self.y).pow(2).mean())
        return Validation(-error, error)


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.Linear(8, 1))


def _fit(tmp_path, epochs, on_epoch=None, resume=False, task=None, ema_decay=0.0):
    task = task or RegressionTask()
    model = _model()
    config = TrainConfig(epochs=epochs, lr=0.05, lr_schedule="cosine", grad_clip=1.0,
                         ema_decay=ema_decay)
    trainer = Trainer(config, CheckpointConfig(str(tmp_path), 1, resume), progress=False,
                      generators=[task.generator], on_epoch=on_epoch, fingerprint="regression")
    return model, trainer.fit(model, task)


@pytest.mark.parametrize("ema_decay", [0.0, 0.8])
def test_killed_and_resumed_run_ends_like_an_uninterrupted_one(tmp_path, ema_decay):
    full_model, full = _fit(tmp_path / "full", 8, ema_decay=ema_decay)

    class Killed(Exception):
        pass

    def kill_after_third(epoch, validation):
        if epoch == 2:
            raise Killed

    with pytest.raises(Killed):
        _fit(tmp_path / "cut", 8, on_epoch=kill_after_third, ema_decay=ema_decay)
    assert load_checkpoint(tmp_path / "cut" / "last.pt")["epoch"] == 2
    torch.manual_seed(999)  # whatever the new process's RNG holds, resuming restores it
    resumed_model, resumed = _fit(tmp_path / "cut", 8, resume=True, ema_decay=ema_decay,
                                  task=RegressionTask(seed=7))  # even another shuffle seed
    assert resumed.resumed_from_epoch == 3
    assert resumed.best_epoch == full.best_epoch
    assert resumed.best.score == full.best.score
    assert [r["train_loss"] for r in resumed.history] == [r["train_loss"] for r in full.history]
    for a, b in zip(full_model.state_dict().values(), resumed_model.state_dict().values()):
        assert torch.equal(a, b)


def test_resume_refuses_a_checkpoint_of_another_configuration(tmp_path):
    _fit(tmp_path, 2)
    # same fingerprint, other training settings: named, whatever fingerprint the caller gave
    with pytest.raises(ValueError, match=r"ema_decay, epochs differ"):
        _fit(tmp_path, 3, resume=True, ema_decay=0.5)
    plain = Trainer(TrainConfig(epochs=2, lr=0.5), CheckpointConfig(str(tmp_path / "p"), 1),
                    progress=False)  # no fingerprint at all
    plain.fit(_model(), RegressionTask())
    plain.config = TrainConfig(epochs=2, lr=0.01)
    plain.checkpoint = CheckpointConfig(str(tmp_path / "p"), 1, True)
    with pytest.raises(ValueError, match=r"\(lr differ\)"):
        plain.fit(_model(), RegressionTask())
    model, task = _model(), RegressionTask()
    same_training = TrainConfig(epochs=2, lr=0.05, lr_schedule="cosine", grad_clip=1.0)
    trainer = Trainer(same_training, CheckpointConfig(str(tmp_path), resume=True),
                      progress=False, fingerprint="something else")
    with pytest.raises(ValueError, match="another configuration"):
        trainer.fit(model, task)
    # other training settings are named even when the fingerprint differs too (the detectors
    # and the CLI fingerprint their whole config, training settings included)
    trainer = Trainer(TrainConfig(epochs=3), CheckpointConfig(str(tmp_path), resume=True),
                      progress=False, fingerprint="something else")
    with pytest.raises(ValueError, match="other training settings"):
        trainer.fit(model, task)
    # the same fingerprint but another model shape: a CheckpointError, not a raw state_dict error
    wider = nn.Sequential(nn.Linear(4, 16), nn.Dropout(0.2), nn.Linear(16, 1))
    trainer = Trainer(TrainConfig(epochs=2, lr=0.05, lr_schedule="cosine", grad_clip=1.0),
                      CheckpointConfig(str(tmp_path), resume=True), progress=False,
                      generators=[task.generator], fingerprint="regression")
    with pytest.raises(CheckpointError, match="does not fit this model.*size mismatch for 0"):
        trainer.fit(wider, task)


def test_truncated_or_foreign_checkpoints_give_clear_errors(tmp_path):
    good = save_checkpoint(tmp_path / "good.pt", {"epoch": 1, "w": torch.ones(3)})
    assert load_checkpoint(good)["epoch"] == 1
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:50])
    with pytest.raises(CheckpointError, match="truncated or foreign"):
        load_checkpoint(truncated)
    foreign = tmp_path / "foreign.pt"
    torch.save({"state": torch.zeros(2)}, foreign)
    with pytest.raises(CheckpointError, match="not an et-graph checkpoint"):
        load_checkpoint(foreign)
    pickled = tmp_path / "pickled.pt"
    torch.save({"et_graph_checkpoint": 1, "obj": ScriptedTask([1.0])}, pickled)
    with pytest.raises(CheckpointError) as refused:  # weights_only refuses arbitrary objects
        load_checkpoint(pickled)
    # ... and the message does not pass on torch's advice to load it with weights_only=False
    assert "weights_only" not in str(refused.value) and "not an et-graph" in str(refused.value)
    text = tmp_path / "text.pt"
    text.write_text("garbage", encoding="utf-8")
    with pytest.raises(CheckpointError, match="not an et-graph checkpoint"):
        load_checkpoint(text)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_checkpoint(tmp_path / "missing.pt")


def test_a_failed_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path / "last.pt", {"epoch": 1})

    def broken_save(obj, stream):
        stream.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError):
        save_checkpoint(path, {"epoch": 2})
    monkeypatch.undo()
    assert load_checkpoint(path)["epoch"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]  # no temporary file left


def test_validation_beats():
    assert Validation(0.5).beats(None)
    assert not Validation(float("nan")).beats(None)
    assert Validation(0.6, 9.0).beats(Validation(0.5, 0.0))
    assert Validation(0.5, 0.1).beats(Validation(0.5, 0.2))
    assert not Validation(0.5, 0.2).beats(Validation(0.5, 0.1))
    assert not Validation(0.5).beats(Validation(0.5, 0.1))
    assert Validation(0.5, 0.1).beats(Validation(0.5))
    assert math.isnan(Validation(0.1).loss)


# ----------------------------------------------------------------------------------------------
# Weight averaging (TrainConfig.ema_decay)
# ----------------------------------------------------------------------------------------------
class FullBatchRegression(RegressionTask):
    """One optimiser step per epoch, and the weights each validation saw."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def batches(self, epoch):
        yield torch.arange(64)

    def validate(self, model):
        self.seen.append([p.detach().clone() for p in model.parameters()])
        return super().validate(model)


def _fit_full_batch(ema_decay, tmp_path=None):
    task, model = FullBatchRegression(), _model()
    checkpoint = CheckpointConfig(str(tmp_path)) if tmp_path is not None else None
    config = TrainConfig(epochs=12, lr=0.05, ema_decay=ema_decay)
    result = Trainer(config, checkpoint, progress=False).fit(model, task)
    return model, task, result


def test_weight_average_is_validated_kept_and_checkpointed_beside_the_raw_weights(tmp_path):
    decay = 0.7
    # Averaging does not change the raw trajectory: a run without it shows the raw weights
    # after every step (one step per epoch), from which the average is computed by hand.
    _, raw_task, _ = _fit_full_batch(0.0)
    average = [p.detach().clone() for p in _model().parameters()]
    expected = []
    for n, raw in enumerate(raw_task.seen):
        rate = min(decay, (1 + n) / (10 + n))
        average = [rate * a + (1 - rate) * w for a, w in zip(average, raw)]
        expected.append(average)
    model, task, result = _fit_full_batch(decay, tmp_path)
    for seen, want in zip(task.seen, expected):
        for a, b in zip(seen, want):
            torch.testing.assert_close(a, b)
    assert any(not torch.allclose(a, b) for a, b in zip(task.seen[-1], raw_task.seen[-1]))
    # The returned model holds the best epoch's averaged weights ...
    for a, b in zip(model.parameters(), expected[result.best_epoch]):
        torch.testing.assert_close(a.detach(), b)
    # ... while the checkpoint keeps training from the raw ones, with the average beside them.
    state = load_checkpoint(tmp_path / "last.pt")
    for a, b in zip(state["model"].values(), raw_task.seen[-1]):
        torch.testing.assert_close(a, b)
    assert state["average"]["updates"] == 12


def test_bad_checkpoint_every_and_malformed_task_outputs_are_named(tmp_path):
    """From an audit: checkpoint_every=1.5 saved at epochs 3, 6, ...; a non-scalar, a float or
    a detached loss gave torch's own messages; a NumPy score saved a checkpoint that the safe
    loader then refused as foreign; a model without parameters, torch's empty-list error."""
    import numpy as np

    for every in (1.5, True):
        with pytest.raises(ValueError, match="checkpoint_every must be an integer"):
            CheckpointConfig(str(tmp_path), every)

    def fit(task, model=None):
        return Trainer(TrainConfig(epochs=2), progress=False).fit(model or nn.Linear(1, 1), task)

    class Unreduced(ScriptedTask):
        def loss(self, model, batch):
            return model(torch.ones(3, 1)).pow(2)

    class Plain(ScriptedTask):
        def loss(self, model, batch):
            return 0.5

    class Detached(ScriptedTask):
        def loss(self, model, batch):
            return model(batch).pow(2).sum().detach()

    with pytest.raises(ValueError, match=r"Unreduced.loss must return a scalar .*\(3, 1\)"):
        fit(Unreduced([0.5] * 2))
    with pytest.raises(TypeError, match="Plain.loss must return a scalar tensor, got float"):
        fit(Plain([0.5] * 2))
    with pytest.raises(ValueError, match="Detached.loss returned a tensor without a graph"):
        fit(Detached([0.5] * 2))
    frozen = nn.Linear(1, 1).requires_grad_(False)
    with pytest.raises(ValueError, match="Linear has no trainable parameter"):
        fit(ScriptedTask([0.5] * 2), frozen)
    with pytest.raises(ValueError, match=r"Validation.metrics\['auc'\] must be a number"):
        Validation(0.5, metrics={"auc": "high"})
    with pytest.raises(ValueError, match="Validation.score must be a number, got None"):
        Validation(None)
    numpy_valued = Validation(np.float64(0.5), np.float32(0.25), {"auc": np.float64(0.7)},
                              {"threshold": np.float32(0.3), "count": np.int64(3), "note": "x"})
    assert type(numpy_valued.score) is float and type(numpy_valued.metrics["auc"]) is float
    assert type(numpy_valued.extra["threshold"]) is float
    assert numpy_valued.extra["count"] == 3 and type(numpy_valued.extra["count"]) is int

    class NumpyScores(RegressionTask):
        def validate(self, model):
            error = float((model(self.x).squeeze(-1) - self.y).pow(2).mean())
            return Validation(np.float64(-error), np.float64(error), extra={"t": np.float32(1)})

    def stop(epoch, validation):
        if epoch == 0:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _fit(tmp_path / "np", 3, on_epoch=stop, task=NumpyScores())
    model, resumed = _fit(tmp_path / "np", 3, resume=True, task=NumpyScores())
    assert resumed.resumed_from_epoch == 1  # the checkpoint loads: it holds plain numbers


def test_resume_refuses_another_number_of_generators(tmp_path):
    """zip() dropped the extra generators' states, so a resumed run drew other batches."""
    _fit(tmp_path, 2)
    task = RegressionTask()
    trainer = Trainer(TrainConfig(epochs=2, lr=0.05, lr_schedule="cosine", grad_clip=1.0),
                      CheckpointConfig(str(tmp_path), 1, True), progress=False,
                      generators=[task.generator, torch.Generator()], fingerprint="regression")
    with pytest.raises(ValueError, match="holds 1 generator states and this run has 2"):
        trainer.fit(_model(), task)


def test_checkpoint_folder_problems_are_found_before_the_first_epoch(tmp_path):
    """They surfaced as raw OS errors at the first save, after an epoch of training; a last.pt
    that is a folder made resume start from scratch silently first."""
    trained = []

    def fit(folder, resume=False):
        trainer = Trainer(TrainConfig(epochs=1), CheckpointConfig(str(folder), 1, resume),
                          progress=False, on_epoch=lambda epoch, v: trained.append(epoch))
        return trainer.fit(nn.Linear(1, 1), ScriptedTask([0.5]))

    (tmp_path / "file").write_text("not a folder", encoding="utf-8")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        fit(tmp_path / "file")
    (tmp_path / "odd" / "last.pt").mkdir(parents=True)
    with pytest.raises(ValueError, match="last.pt is not a file"):
        fit(tmp_path / "odd", resume=True)
    assert trained == []  # refused before any epoch


def test_a_batch_without_a_training_target_takes_no_step():
    """From an audit: a random part of a large graph with no training node returned a zero
    loss, and Adam's momentum and weight decay still moved the weights, while the zero was
    averaged into the epoch's loss. A task now returns None for it."""
    class SomeEmpty(ScriptedTask):
        def batches(self, epoch):
            self.epoch = epoch
            yield None  # no training target here
            yield torch.ones(1, 1)
            yield None

        def loss(self, model, batch):
            return None if batch is None else model(batch).pow(2).sum()

    def run(task):
        torch.manual_seed(0)
        model = nn.Linear(1, 1)
        result = Trainer(TrainConfig(epochs=3, weight_decay=0.1), progress=False).fit(model, task)
        return model, result

    empty_model, empty = run(SomeEmpty([0.5] * 3))
    plain_model, plain = run(ScriptedTask([0.5] * 3))
    assert torch.equal(empty_model.weight, plain_model.weight)  # the same three steps
    assert [r["train_loss"] for r in empty.history] == [r["train_loss"] for r in plain.history]

    class AllEmpty(SomeEmpty):
        def batches(self, epoch):
            self.epoch = epoch
            yield None

    # No step in any epoch: the untouched initial weights are no trained model (since an
    # audit: they were returned as the best epoch's).
    with pytest.raises(ValueError, match="no epoch took an optimiser step"), pytest.warns(
            RuntimeWarning, match="took no optimiser step"):
        run(AllEmpty([0.5] * 3))


def test_the_detector_skips_parts_without_training_nodes(monkeypatch):
    from et_graph.datasets.synthetic import planted_anomaly_graph
    from et_graph.detectors import ETDetector

    graph = planted_anomaly_graph(200, seed=3)
    train = torch.zeros(200, dtype=torch.bool)
    train[torch.randperm(200, generator=torch.Generator().manual_seed(1))[:10]] = True
    graph.y[train.nonzero()[:3]] = 1
    val = ~train
    steps = []
    real = torch.optim.Adam.step

    def counted(self, *args, **kwargs):
        steps.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", counted)
    ETDetector(epochs=1, hidden=8, batch_size=16).fit(graph, train_mask=train, val_mask=val)
    assert 1 <= len(steps) <= 10  # one step per part holding a training node, of 13 parts


def test_a_resumed_run_that_had_stopped_early_reports_it(tmp_path):
    task = ScriptedTask([0.5, 0.9, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1])
    config = TrainConfig(epochs=8, patience=2)
    first = Trainer(config, CheckpointConfig(str(tmp_path), 1, False), progress=False).fit(
        nn.Linear(1, 1), task)
    again = Trainer(config, CheckpointConfig(str(tmp_path), 1, True), progress=False).fit(
        nn.Linear(1, 1), ScriptedTask([0.5, 0.9, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]))
    assert first.stopped_early and again.stopped_early  # the resume said False
    assert again.best_epoch == first.best_epoch


def test_validation_metrics_may_not_take_the_historys_score_and_loss_names():
    with pytest.raises(ValueError, match="val_score"):
        Validation(0.5, 0.1, metrics={"score": 0.9})
    assert Validation(0.5, 0.1, metrics={"loss": 0.1}).metrics == {"loss": 0.1}  # the same
    assert Validation(0.5, extra={"converged": True}).extra == {"converged": True}


def test_an_overflowing_validation_keeps_its_error_as_the_cause():
    class Task(ScriptedTask):
        def validate(self, model):
            raise FloatingPointError("division by zero in my metric")

    with pytest.raises(FloatingPointError, match="no epoch gave a finite") as caught:
        Trainer(TrainConfig(epochs=2), progress=False).fit(nn.Linear(1, 1), Task([0.1, 0.2]))
    assert "my metric" in str(caught.value.__cause__)


def test_private_rng_seeds_the_cpu_alone_without_cuda_and_restores_the_caller():
    import random

    import numpy as np

    from et_graph.training import private_rng

    torch.manual_seed(1234)
    np.random.seed(5)
    random.seed(6)
    expected = (torch.rand(3), np.random.rand(), random.random())
    torch.manual_seed(1234)
    np.random.seed(5)
    random.seed(6)
    with private_rng(0, "cpu"):
        inside = torch.rand(3)
    torch.manual_seed(0)
    assert torch.equal(inside, torch.rand(3))  # the same stream as a plain seed
    torch.manual_seed(1234)
    np.random.seed(5)
    random.seed(6)
    with private_rng(0, "cpu"):
        torch.rand(5)
    assert torch.equal(torch.rand(3), expected[0])
    assert np.random.rand() == expected[1] and random.random() == expected[2]


def test_a_task_missing_a_method_or_a_foreign_generator_is_named_before_training():
    class NoValidate:
        def batches(self, epoch):
            yield torch.ones(1, 1)

        def loss(self, model, batch):
            return model(batch).sum()

    with pytest.raises(TypeError, match="NoValidate lacks validate"):
        Trainer(TrainConfig(epochs=1), progress=False).fit(nn.Linear(1, 1), NoValidate())
    import numpy as np

    with pytest.raises(TypeError, match="torch.Generator"):
        Trainer(TrainConfig(epochs=1), generators=[np.random.default_rng(0)])


DDP_UNUSED_SCRIPT = '''
import os, sys
import torch
import torch.distributed as dist
from torch import nn
from et_graph.training import TrainConfig, Trainer, Validation


class HalfUsed(nn.Module):
    def __init__(self):
        super().__init__()
        self.used, self.unused = nn.Linear(2, 2), nn.Linear(2, 2)

    def forward(self, x):
        return self.used(x)  # self.unused never takes part


class Task:
    def batches(self, epoch):
        yield torch.ones(4, 2)

    def loss(self, model, batch):
        return model(batch).pow(2).mean()

    def validate(self, model):
        return Validation(-float(model.used.weight.abs().sum()))


def run(rank, find):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[1])
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = HalfUsed()
    Trainer(TrainConfig(epochs=2), progress=False, find_unused_parameters=find).fit(model, Task())
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.multiprocessing.spawn(run, args=(sys.argv[2] == "1",), nprocs=2)
'''


def run_ddp_script(tmp_path, text: str, *args: str) -> subprocess.CompletedProcess:
    """``text`` as a script run with ``(a free port, *args)``: two gloo ranks on one thread."""
    import random

    script = tmp_path / "ddp_script.py"
    script.write_text(text, encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    port = str(random.randint(20000, 40000))
    return subprocess.run([sys.executable, str(script), port, *args], env=env,
                          capture_output=True, text=True, timeout=300)


DDP_AGREE_SCRIPT = '''
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

from et_graph.training import TrainConfig, Trainer, Validation


class Task:
    def __init__(self, rank):
        self.rank, self.calls = rank, 0

    def batches(self, epoch):
        return [torch.ones(4, 2)]

    def loss(self, model, batch):
        return model(batch).pow(2).mean()

    def validate(self, model):
        # a score that differs across the ranks: alone, rank 0 would stop at epoch 4 and
        # rank 1 go on to epoch 7
        self.calls += 1
        return Validation(score=float(self.calls * (3 + self.rank) % 7), loss=0.0)


def run(rank, port, folder):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = nn.Linear(2, 1)
    fit = Trainer(TrainConfig(epochs=12, patience=3), progress=False).fit(model, Task(rank))
    torch.save({"best": fit.best_epoch, "epochs": len(fit.history),
                "weight": model.weight.detach().clone()}, os.path.join(folder, f"{rank}.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.multiprocessing.spawn(run, args=tuple(sys.argv[1:3]), nprocs=2)
'''


def test_ddp_ranks_keep_the_same_epoch_and_stop_together(tmp_path):
    """Each rank decided its best epoch and early stop from its own validation: with a
    validation that differs across ranks they returned different weights, or one stopped alone
    and the other failed in a collective (a DDP audit). They follow rank 0's now."""
    done = run_ddp_script(tmp_path, DDP_AGREE_SCRIPT, str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    ranks = [torch.load(tmp_path / f"{rank}.pt") for rank in (0, 1)]
    assert ranks[0]["best"] == ranks[1]["best"] == 1 and ranks[0]["epochs"] == ranks[1]["epochs"]
    assert torch.equal(ranks[0]["weight"], ranks[1]["weight"])


def test_ddp_trains_a_model_with_unused_parameters_when_asked(tmp_path):
    ok = run_ddp_script(tmp_path, DDP_UNUSED_SCRIPT, "1")
    assert ok.returncode == 0, ok.stderr[-2000:]
    failed = run_ddp_script(tmp_path, DDP_UNUSED_SCRIPT, "0")
    assert failed.returncode != 0 and "find_unused_parameters" in failed.stderr


def test_a_run_without_resume_warns_before_replacing_another_configurations_checkpoint(
        tmp_path):
    # (from an audit) two --data files with the same name share one checkpoint folder: the
    # second run replaced the first's checkpoint without a word
    import warnings

    _fit(tmp_path, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _fit(tmp_path, 2)  # the same configuration again: replaced quietly
    other = Trainer(TrainConfig(epochs=2, lr=0.05, lr_schedule="cosine", grad_clip=1.0),
                    CheckpointConfig(str(tmp_path), 1), progress=False,
                    fingerprint="another graph")
    with pytest.warns(UserWarning, match="checkpoint of a run with another configuration"):
        other.fit(_model(), RegressionTask())


def test_a_checkpoint_written_by_older_code_says_so(tmp_path):
    # (from an audit) a checkpoint from before a training setting existed was refused as
    # written "under other training settings", though the user had changed nothing; at the
    # setting's default it now resumes (what the older code ran), at another value the refusal
    # says where the checkpoint came from
    _fit(tmp_path, 2, ema_decay=0.8)
    state = load_checkpoint(tmp_path / "last.pt")
    assert set(state["written_by"]) == {"et_graph_version", "git_commit"}
    del state["written_by"], state["config"]["ema_decay"]
    torch.save(state, tmp_path / "last.pt")
    with pytest.raises(ValueError, match=r"ema_decay differ\) \(written by an older et-graph, "
                                         r"which recorded no version, this is et-graph .*; it "
                                         r"has no ema_decay, added since\)"):
        _fit(tmp_path, 2, resume=True, ema_decay=0.8)
    _fit(tmp_path / "plain", 2)
    state = load_checkpoint(tmp_path / "plain" / "last.pt")
    del state["written_by"], state["config"]["ema_decay"]
    torch.save(state, tmp_path / "plain" / "last.pt")
    assert _fit(tmp_path / "plain", 2, resume=True)[1].resumed_from_epoch == 2


DDP_RESUME_SCRIPT = '''
import os, sys
import torch
import torch.distributed as dist
from torch import nn
from et_graph.training import CheckpointConfig, TrainConfig, Trainer, Validation


class Task:
    def batches(self, epoch):
        yield torch.ones(4, 2)

    def loss(self, model, batch):
        return (model(batch) * torch.rand(4, 2)).pow(2).mean()  # draws from the global RNG

    def validate(self, model):
        return Validation(-float(model.weight.abs().sum()))


class Killed(Exception):
    pass


def kill(epoch, validation):
    if epoch == 1:
        raise Killed


def run(rank, port, folder):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    draws = {}
    for mode in ("full", "cut", "resume"):
        # each rank its own stream, as DDP jobs seed them; the resumed run starts from
        # another state, which resuming must replace with the checkpoint's
        torch.manual_seed(999 if mode == "resume" else 100 + rank)
        model = nn.Linear(2, 2)
        checkpoint = CheckpointConfig(os.path.join(folder, "full" if mode == "full" else "cut"),
                                      resume=mode == "resume")
        try:
            Trainer(TrainConfig(epochs=4), checkpoint, progress=False,
                    on_epoch=kill if mode == "cut" else None).fit(model, Task())
        except Killed:
            pass
        draws[mode] = torch.rand(3)
    torch.save(draws, os.path.join(folder, f"draws_{rank}.pt"))
    dist.destroy_process_group()


if __name__ == "__main__":
    torch.multiprocessing.spawn(run, args=tuple(sys.argv[1:3]), nprocs=2)
'''


def test_ddp_ranks_resume_from_their_own_random_states(tmp_path):
    # (s57's open item) every rank restored rank 0's random states on resume: after it, the
    # ranks drew the same dropout and sampling streams, unlike an uninterrupted run
    done = run_ddp_script(tmp_path, DDP_RESUME_SCRIPT, str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    draws = [torch.load(tmp_path / f"draws_{rank}.pt") for rank in (0, 1)]
    for rank in (0, 1):
        assert torch.equal(draws[rank]["resume"], draws[rank]["full"])
    assert not torch.equal(draws[0]["full"], draws[1]["full"])


def test_equal_validations_do_not_beat_each_other():
    # the tie rule is "strictly lower loss": an equal later epoch keeps the earlier one
    assert not Validation(1.0, 0.5).beats(Validation(1.0, 0.5))
    assert Validation(1.0, 0.4).beats(Validation(1.0, 0.5))


def test_a_resumed_run_keeps_counting_its_patience(tmp_path):
    # (from a mutation audit) resuming with the stale count reset went unnoticed: a run with
    # patience trained longer after a resume than without one
    config = TrainConfig(epochs=8, lr=0.05, patience=3)
    SCORES = [1.0, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0, -0.1]  # best at epoch 0, then worse

    def fit(folder, resume=False, on_epoch=None):
        return Trainer(config, CheckpointConfig(str(folder), 1, resume), progress=False,
                       on_epoch=on_epoch).fit(nn.Linear(1, 1), ScriptedTask(SCORES))

    full = fit(tmp_path / "full")

    class Killed(Exception):
        pass

    def kill(epoch, validation):
        if epoch == 2:  # two epochs without improvement counted
            raise Killed

    with pytest.raises(Killed):
        fit(tmp_path / "cut", on_epoch=kill)
    resumed = fit(tmp_path / "cut", resume=True)
    assert full.epochs_run == 4 and full.stopped_early
    assert (resumed.epochs_run, resumed.best_epoch) == (full.epochs_run, full.best_epoch)


def test_a_checkpoint_without_its_writer_is_named_as_older_code(tmp_path):
    # (from a review) with no setting added since, an older checkpoint's refusal (another
    # fingerprint) did not say it came from older code
    _fit(tmp_path, 2)
    state = load_checkpoint(tmp_path / "last.pt")
    del state["written_by"]
    torch.save(state, tmp_path / "last.pt")
    trainer = Trainer(TrainConfig(epochs=2, lr=0.05, lr_schedule="cosine", grad_clip=1.0),
                      CheckpointConfig(str(tmp_path), resume=True), progress=False,
                      fingerprint="something else")
    with pytest.raises(ValueError, match="written by an older et-graph"):
        trainer.fit(_model(), RegressionTask())


def test_progress_in_a_log_is_plain_lines(capsys, monkeypatch):
    """A redirected run's log holds whole lines, not tqdm's carriage-return redraws."""
    import et_graph.progress as progress

    monkeypatch.setattr(progress, "LOG_INTERVAL_S", 0.0)
    task = ScriptedTask([0.1, 0.2, 0.3])
    Trainer(TrainConfig(epochs=3), description="probe", progress=True).fit(nn.Linear(1, 1),
                                                                              task)
    err = capsys.readouterr().err
    assert "probe" in err and "\r" not in err and "\x1b" not in err


def test_short_work_writes_nothing_into_a_log(capsys):
    """Each epoch's set_postfix redrew the bar at once, past its delay and minimum interval:
    a line per epoch in a log, where the progress bars promise none for short work."""
    task = ScriptedTask([0.1, 0.2, 0.3, 0.4, 0.5])
    Trainer(TrainConfig(epochs=5), description="probe", progress=True).fit(nn.Linear(1, 1),
                                                                              task)
    assert capsys.readouterr().err == ""


def test_cpu_parameters_get_the_fused_adam_only_where_torch_has_it(monkeypatch):
    """torch 2.3 has no fused Adam on the CPU: fused=True failed every CPU training there."""
    import torch.utils._foreach_utils as foreach_utils

    from et_graph.training.engine import _fused_step

    params = list(nn.Linear(2, 2).parameters())
    assert _fused_step(params) == {"fused": True}  # this torch has it
    monkeypatch.setattr(foreach_utils, "_get_fused_kernels_supported_devices",
                        lambda: ["cuda", "xpu"])  # torch 2.3's list
    assert _fused_step(params) == {}
    Trainer(TrainConfig(epochs=1), progress=False).fit(nn.Linear(1, 1), ScriptedTask([0.5]))


def test_a_refused_resume_names_each_new_piece_once():
    """(a user audit) a model's repr repeats a layer's width per layer: the message named
    out_features=16 four times."""
    from et_graph.training.engine import _new_settings

    stored = "Net(Linear(in_features=4, out_features=8), Linear(out_features=8), steps=2)"
    current = "Net(Linear(in_features=4, out_features=16), Linear(out_features=16), steps=3)"
    assert _new_settings(stored, current) == ["out_features=16", "steps=3"]


def test_the_data_digest_reads_the_tensors_in_place():
    # tobytes() copied every tensor: a [2, 50M] edge index doubled its memory at a run's
    # setup with checkpoints on (a scale audit); the digest itself is unchanged
    import subprocess
    import sys

    code = (
        "import resource, torch\n"
        "from et_graph.training.checkpoint import data_digest\n"
        "edges = torch.randint(0, 1000, (2, 12_000_000))\n"
        "edges.add_(0)\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "digest = data_digest(edges, None)\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024, digest)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    grown, _ = done.stdout.split()
    assert int(grown) < 50, done.stdout  # MiB; the edge index is 183 MiB
    import hashlib

    small = torch.arange(6).view(2, 3)
    expected = hashlib.sha256()
    expected.update(b"torch.int64(2, 3);")
    expected.update(small.numpy().tobytes())
    from et_graph.training.checkpoint import data_digest

    assert data_digest(small) == expected.hexdigest()[:16]


class CountedTask(ScriptedTask):
    """ScriptedTask that records the epochs whose validation pass ran."""

    def __init__(self, scores, losses=None):
        super().__init__(scores, losses)
        self.validated = []

    def validate(self, model):
        self.validated.append(self.epoch)
        return Validation(self.scores[self.epoch], self.losses[self.epoch],
                          metrics={"auroc": self.scores[self.epoch]})


def test_validate_every_validates_at_its_epochs_and_the_last_and_selects_among_them():
    # epoch 1 scores best but runs no validation pass: it can never be the kept epoch
    task = CountedTask([0.1, 0.99, 0.5, 0.2, 0.3, 0.6, 0.1, 0.4])
    seen = []
    result = Trainer(TrainConfig(epochs=8, validate_every=3), progress=False,
                     on_epoch=lambda epoch, validation: seen.append(epoch)).fit(
        nn.Linear(1, 1), task)
    assert task.validated == [2, 5, 7] and seen == [2, 5, 7]
    assert result.best_epoch == 5 and result.epochs_run == 8
    scores = [row["val_score"] for row in result.history]
    assert [e for e, s in enumerate(scores) if not math.isnan(s)] == [2, 5, 7]
    assert "val_auroc" not in result.history[0] and result.history[2]["val_auroc"] == 0.5
    # every epoch by default, as before
    task = CountedTask([0.1, 0.99, 0.5])
    assert Trainer(TrainConfig(epochs=3), progress=False).fit(
        nn.Linear(1, 1), task).best_epoch == 1 and task.validated == [0, 1, 2]


def test_validate_every_decides_patience_and_the_plateau_schedule_at_validated_epochs():
    # patience 3 counts epochs; the stop waits for the pass after the third stale epoch
    task = CountedTask([0.5, 0.9, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1])
    result = Trainer(TrainConfig(epochs=10, patience=3, validate_every=2), progress=False).fit(
        nn.Linear(1, 1), task)
    assert task.validated == [1, 3, 5] and result.stopped_early and result.epochs_run == 6
    assert result.best_epoch == 1
    # the plateau schedule steps at validated epochs only: lr_patience counts passes
    config = TrainConfig(epochs=8, lr=0.1, lr_schedule="plateau", lr_patience=1,
                         validate_every=2)
    result = Trainer(config, progress=False).fit(nn.Linear(1, 1), ScriptedTask([0.5] * 8))
    assert [row["lr"] for row in result.history] == [0.1] * 6 + [0.05] * 2


@pytest.mark.parametrize("bad", [0, -2, 1.5, True])
def test_validate_every_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="validate_every"):
        TrainConfig(validate_every=bad)


def test_a_run_killed_between_validation_passes_resumes_like_an_uninterrupted_one(tmp_path):
    class Killed(Exception):
        pass

    class Killing(RegressionTask):
        def batches(self, epoch):
            if epoch == 4:  # after the checkpoint of epoch 3, which ran no validation pass
                raise Killed
            return super().batches(epoch)

    def fit(folder, task, resume=False):
        model = _model()
        config = TrainConfig(epochs=9, lr=0.05, patience=4, validate_every=3)
        trainer = Trainer(config, CheckpointConfig(str(folder), 1, resume), progress=False,
                          generators=[task.generator], fingerprint="regression")
        return model, trainer.fit(model, task)

    full_model, full = fit(tmp_path / "full", RegressionTask())
    with pytest.raises(Killed):
        fit(tmp_path / "cut", Killing())
    resumed_model, resumed = fit(tmp_path / "cut", RegressionTask(seed=5), resume=True)
    assert resumed.resumed_from_epoch == 4 and resumed.best_epoch == full.best_epoch
    assert [r["train_loss"] for r in resumed.history] == [r["train_loss"] for r in full.history]
    for a, b in zip(full_model.state_dict().values(), resumed_model.state_dict().values()):
        assert torch.equal(a, b)


def test_an_epochs_batches_get_a_bar_of_their_own_in_a_log(capsys, monkeypatch):
    """A large graph in mini-batches had one bar per epoch and nothing within one."""
    import et_graph.progress as progress

    monkeypatch.setattr(progress, "LOG_INTERVAL_S", 0.0)
    Trainer(TrainConfig(epochs=2), description="probe", progress=True).fit(
        _model(), RegressionTask())
    err = capsys.readouterr().err
    assert "probe, epoch 1: 4batch" in err  # (a generator of batches: no total to show)
    Trainer(TrainConfig(epochs=2), description="probe", progress=False).fit(
        _model(), RegressionTask())
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("style", ["repr", "json"])
def test_a_checkpoint_from_before_a_setting_existed_resumes_at_its_default(tmp_path, style):
    """(from a review) adding validate_every refused every earlier checkpoint: its settings
    and fingerprint lacked the field, though its default is what the older code ran."""
    import json

    def fingerprint(config):  # as the detectors (repr) and the graph tasks (JSON) write it
        return repr(config) if style == "repr" else json.dumps([asdict(config), 0])

    def trainer(config, resume):
        return Trainer(config, CheckpointConfig(str(tmp_path), 1, resume), progress=False,
                       fingerprint=fingerprint(config))

    from dataclasses import asdict

    config = TrainConfig(epochs=3, lr=0.05)
    trainer(config, False).fit(_model(), RegressionTask())
    state = load_checkpoint(tmp_path / "last.pt")
    stored = {k: v for k, v in state["config"].items() if k != "validate_every"}
    old_fingerprint = fingerprint(config).replace(
        ", validate_every=1" if style == "repr" else ', "validate_every": 1', "")
    assert old_fingerprint != fingerprint(config)
    state.update(config=stored, fingerprint=old_fingerprint, epoch=0, stopped=False,
                 history=state["history"][:1])
    save_checkpoint(tmp_path / "last.pt", state)
    assert trainer(config, True).fit(_model(), RegressionTask()).resumed_from_epoch == 1
    # the older checkpoint is a run without validate_every's other values
    save_checkpoint(tmp_path / "last.pt", state)
    with pytest.raises(ValueError, match=r"other training settings \(validate_every differ"):
        trainer(TrainConfig(epochs=3, lr=0.05, validate_every=2), True).fit(
            _model(), RegressionTask())


def test_a_resumed_runs_epoch_time_is_its_own_epochs(tmp_path):
    # (a scale audit: the median mixed the killed run's epochs, perhaps another machine's)
    _fit(tmp_path, 3)
    state = load_checkpoint(tmp_path / "last.pt")
    for row in state["history"]:
        row["seconds"] = 1000.0  # the killed run's, on a slow machine
    state.update(epoch=1, stopped=False, history=state["history"][:2])  # two of three
    save_checkpoint(tmp_path / "last.pt", state)
    _, resumed = _fit(tmp_path, 3, resume=True)
    assert resumed.history[0]["seconds"] == 1000.0 and resumed.epoch_seconds < 1000.0


@pytest.mark.parametrize("style", ["repr", "json"])
def test_a_checkpoint_from_before_a_model_setting_existed_resumes_at_its_default(tmp_path, style):
    """(a compat audit) label_trick_share, layers and noise_std refused the anomaly and image
    checkpoints written before them, though their defaults are what the older code ran; the
    refusal of another value names the setting, not validate_every."""
    import json
    from dataclasses import dataclass

    from et_graph.training import dataclass_defaults

    @dataclass
    class Model:
        hidden: int = 8
        share: float = 0.5  # the setting added since

    @dataclass
    class Settings:
        model: Model
        seed: int = 0

    def fingerprint(settings):
        return repr(settings) if style == "repr" else json.dumps(
            {"hidden": settings.model.hidden, "share": settings.model.share})

    def trainer(settings, resume):
        return Trainer(TrainConfig(epochs=3, lr=0.05), CheckpointConfig(str(tmp_path), 1, resume),
                       progress=False, fingerprint=fingerprint(settings),
                       setting_defaults=dataclass_defaults(settings))

    current = Settings(Model())
    trainer(current, False).fit(_model(), RegressionTask())
    state = load_checkpoint(tmp_path / "last.pt")
    older = fingerprint(current).replace(
        ", share=0.5" if style == "repr" else ', "share": 0.5', "")
    assert older != fingerprint(current)
    state.update(fingerprint=older, epoch=0, stopped=False, history=state["history"][:1])
    save_checkpoint(tmp_path / "last.pt", state)
    assert trainer(current, True).fit(_model(), RegressionTask()).resumed_from_epoch == 1
    save_checkpoint(tmp_path / "last.pt", state)
    with pytest.raises(ValueError, match=r"another configuration \(now: .*share"):
        trainer(Settings(Model(share=0.25)), True).fit(_model(), RegressionTask())
    save_checkpoint(tmp_path / "last.pt", state)
    with pytest.raises(ValueError, match=r"another configuration \(now: .*hidden"):
        trainer(Settings(Model(hidden=16)), True).fit(_model(), RegressionTask())


def test_older_spellings_strip_whole_settings_only():
    """(a review) a plain replace cut "noise_std=0.0" out of "noise_std=0.05" (a refusal then
    named hopfield='relu'5) and "patience=0" out of "lr_patience=0"; two sections' settings of
    one name cannot be told apart in a fingerprint, and a section its parent builds has that
    build's defaults."""
    from dataclasses import dataclass, field

    from et_graph.training import dataclass_defaults
    from et_graph.training.engine import _without_settings

    assert _without_settings("G(noise_std=0.05, hopfield='relu')", {"noise_std": 0.0}) == (
        "G(noise_std=0.05, hopfield='relu')")
    assert _without_settings("G(lr_patience=0, k=1)", {"patience": 0}) == "G(lr_patience=0, k=1)"
    assert _without_settings("G(gat_heads=4, layers=20)", {"layers": 2}) == (
        "G(gat_heads=4, layers=20)")
    assert _without_settings("G(a=1, layers=2, b=3)", {"layers": 2}) == "G(a=1, b=3)"
    assert _without_settings('[{"x": 1, "noise_std": 0.0}, 0]', {"noise_std": 0.0}) == (
        '[{"x": 1}, 0]')

    @dataclass
    class Section:
        lr: float = 0.02
        x: int = 1

    @dataclass
    class Other:
        x: int = 2

    @dataclass
    class Whole:
        train: Section = field(default_factory=lambda: Section(lr=0.01))
        other: Other = field(default_factory=Other)

    assert dict(dataclass_defaults(Whole())) == {"lr": 0.01}  # x: two defaults, left out


def test_the_mps_generator_is_seeded_kept_and_given_back(monkeypatch):
    """From a portability audit: on a Mac the mps device's own generator (dropout and noise on
    the device) was neither seeded by a detector's fit nor kept in checkpoints. A stand-in
    for torch.mps records what the library does with it."""
    import types

    from et_graph.training import checkpoint, engine

    calls = []
    state = torch.tensor([7], dtype=torch.uint8)
    fake = types.SimpleNamespace(get_rng_state=lambda: state,
                                 set_rng_state=lambda s: calls.append(("set", s)),
                                 manual_seed=lambda seed: calls.append(("seed", seed)))
    monkeypatch.setattr(torch, "mps", fake)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    saved = checkpoint.rng_state()
    assert torch.equal(saved["mps"], state)
    checkpoint.set_rng_state(saved)
    engine.seed_everything(3, cuda=False)
    assert calls == [("set", state), ("seed", 3)]


def test_a_fit_under_torchrun_without_a_process_group_says_it_trains_alone(tmp_path,
                                                                           monkeypatch):
    """(a DDP audit) each process trained the whole model alone, without a word."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.warns(ConfigWarning, match="WORLD_SIZE is 2 but no process group"):
        _fit(tmp_path, 1)
