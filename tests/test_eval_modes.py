"""Scoring functions give the caller's model its mode back: left in eval mode, a model scored
in the middle of its caller's training loop trained on without dropout or descent noise (an
audit of the image path found the protocol functions leaving it so)."""
from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader

from et_graph.training import evaluates_model, evaluation_mode


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Dropout(0.5)
        self.frozen = torch.nn.BatchNorm1d(2)


def test_evaluation_mode_gives_every_module_its_own_mode_back():
    net = _Net().train()
    net.frozen.eval()  # a submodule the caller keeps in eval mode inside a training model
    seen = []
    with evaluation_mode(net):
        seen = [module.training for module in net.modules()]
    assert seen == [False, False, False]
    assert net.training and net.inner.training and not net.frozen.training


def test_evaluation_mode_gives_the_mode_back_after_an_error():
    net = _Net().train()
    with pytest.raises(RuntimeError), evaluation_mode(net):
        raise RuntimeError("inside")
    assert net.training and net.inner.training


def test_evaluates_model_runs_in_eval_mode_and_keeps_the_signature():
    @evaluates_model
    def mode_inside(model, offset: int = 0) -> tuple[bool, int]:
        """Doc."""
        return model.training, offset

    net = _Net().train()
    assert mode_inside(net, offset=3) == (False, 3)
    assert net.training and mode_inside.__doc__ == "Doc."


def _graphs(count: int = 4) -> list[Data]:
    generator = torch.Generator().manual_seed(0)
    return [Data(x=torch.randn(5, 3, generator=generator),
                 edge_index=torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]]),
                 y=torch.tensor([index % 2])) for index in range(count)]


def test_image_protocol_functions_give_the_mode_back():
    from et_graph.datasets.images import load_digits_images
    from et_graph.nn.models.image_completion import ETImageCompletion
    from et_graph.protocols.image_completion import (
        evaluate_image_completion,
        predict_patches,
        trace_dynamics,
    )

    torch.manual_seed(0)
    images = load_digits_images()[:12]
    model = ETImageCompletion(dim=8, heads=1, head_dim=4, steps=2).train()
    mask = model.random_mask(12, generator=torch.Generator().manual_seed(0))
    predict_patches(model, images, mask)
    assert model.training
    trace_dynamics(model, images, mask)
    assert model.training
    evaluate_image_completion(model, images, images, mask)
    assert model.training


def test_graph_scoring_functions_give_the_mode_back():
    from et_graph.protocols.graph_cv import evaluate, predict_logits

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(3, 2)

        def forward(self, x, edge_index, batch):
            return self.linear(x).new_zeros(int(batch.max()) + 1, 2) + self.linear(x).mean()

    model = Pooled().train()
    loader = DataLoader(_graphs(), batch_size=2)
    evaluate(model, loader)
    assert model.training
    predict_logits(model, loader)
    assert model.training


def test_gnnbenchmark_scoring_gives_the_mode_back():
    from et_graph.protocols.gnnbenchmark import outputs_and_targets

    class Pooled(torch.nn.Module):
        def forward(self, x, edge_index, batch, **unused):
            return x.new_zeros(int(batch.max()) + 1)

    model = Pooled().train()
    outputs_and_targets(model, DataLoader(_graphs(), batch_size=2), "cpu")
    assert model.training


def test_unsupervised_masked_scores_give_the_mode_back():
    from et_graph.detectors.unsupervised import masked_scores

    class Stub(torch.nn.Module):
        def scores(self, x, edge_index, mask, structure_reduce):
            return {"reconstruction": mask.double(), "energy": mask.double()}

    model = Stub().train()
    masked_scores(model, torch.zeros(10, 2), torch.zeros(2, 0, dtype=torch.long), 0.5, 1,
                  torch.Generator().manual_seed(0))
    assert model.training


@pytest.mark.parametrize("other", ["model", "submodule"])
def test_two_threads_scoring_one_model_take_turns(other):
    """From a long-run audit: two threads scoring one model in train mode interleaved their
    mode switches, so one scored with dropout and noise and the model could end in eval mode;
    and from a review: with the model's lock alone, another thread's block on a submodule
    switched it back to training mid-score. A block holds the locks of every module of its
    model: another thread's block on the model or on a submodule of it waits."""
    import threading

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5))
    model.train()
    target = model if other == "model" else model[1]
    inside, release = threading.Event(), threading.Event()
    seen = []

    def first():
        with evaluation_mode(model):
            inside.set()
            release.wait(10)
            seen.append(("first", model[1].training))

    def second():
        inside.wait(10)
        with evaluation_mode(target):
            seen.append(("second", target.training))

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    inside.wait(10)
    threads[1].join(0.3)
    assert threads[1].is_alive() and not seen  # waiting for the first block
    release.set()
    for thread in threads:
        thread.join(10)
    assert seen == [("first", False), ("second", False)]
    assert model.training and model[1].training
    with evaluation_mode(model), evaluation_mode(target):  # re-entrant in one thread
        assert not model.training
    assert model.training


def test_a_block_on_a_model_opened_inside_a_block_on_its_submodule_never_deadlocks():
    """From a review: the locks, taken one by one in id order, deadlocked when a thread inside
    a block on a submodule opened a block on the model while another thread waited for the
    model's block (it held a lower-id lock outside the submodule, and waited on the submodule's).
    The locks are taken all at once or not at all. The ids are arranged to the bad order."""
    import threading
    import time

    keep = []
    while True:  # a module outside sub with a lower id than every module of sub
        sub = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5))
        model = torch.nn.Sequential(torch.nn.Linear(2, 2), sub)
        outside = [m for m in model.modules() if all(m is not s for s in sub.modules())]
        if min(map(id, outside)) < min(id(m) for m in sub.modules()):
            break
        keep.append(model)
    in_sub, waiting = threading.Event(), threading.Event()

    def first():
        with evaluation_mode(sub):
            in_sub.set()
            waiting.wait(5)
            time.sleep(0.3)  # the other thread now waits for the model's block
            with evaluation_mode(model):
                pass

    def second():
        in_sub.wait(5)
        waiting.set()
        with evaluation_mode(model):
            pass

    threads = [threading.Thread(target=first, daemon=True),
               threading.Thread(target=second, daemon=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert not any(thread.is_alive() for thread in threads)
