"""The CUDA paths: the fused kernels, the layers, the detectors and every runner on a GPU, checked
against the CPU in float64.

Skipped where torch sees no CUDA device (CI is CPU-only). ``ET_GRAPH_TEST_DEVICE=cpu`` runs the
same module on the CPU, which checks only that the tests themselves run (each compares the
device with the CPU, so on the CPU the comparisons are trivially equal); the figures of a real
GPU run are in ``docs/measured/cuda/`` (see docs/scale.md, "GPU").
"""
from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import (
    ExplainedModel,
    awkward_graph,
    node_explainer,
    planted_graph_with_masks,
    relative_error,
)
from torch_geometric.data import Batch, Data
from torch_geometric.utils import coalesce, to_torch_csr_tensor, to_undirected

from et_graph import energy as E
from et_graph.fused import fused_attention_grad, fused_relu_hopfield_grad
from et_graph.nn import ETConv, RelationalETConv

DEVICE = os.environ.get("ET_GRAPH_TEST_DEVICE") or ("cuda" if torch.cuda.is_available() else "")
pytestmark = pytest.mark.skipif(not DEVICE, reason="no CUDA device (ET_GRAPH_TEST_DEVICE=cpu "
                                                   "runs these tests on the CPU)")
REPO = Path(__file__).resolve().parents[1]
#: float64 on the GPU against float64 on the CPU: only the order of the sums differs.
EXACT = 1e-10


def graph_with_hub(num_nodes: int = 400, num_edges: int = 3000, seed: int = 0):
    """A float64 random graph with a hub (node 0 receives from a third of the nodes), duplicate
    edges, self-loops and isolated nodes (the last five)."""
    gen = torch.Generator().manual_seed(seed)
    edges = torch.randint(0, num_nodes - 5, (2, num_edges), generator=gen)
    hub = torch.stack([torch.arange(1, num_nodes // 3), torch.zeros(num_nodes // 3 - 1,
                                                                    dtype=torch.long)])
    edge_index = torch.cat([edges, hub, edges[:, :50]], dim=1)
    x = torch.randn(num_nodes, 16, generator=gen, dtype=torch.float64)
    return x, edge_index


def make_conv(hopfield: str = "relu", **kwargs) -> ETConv:
    torch.manual_seed(0)
    conv = ETConv(16, heads=4, head_dim=8, hopfield=hopfield, steps=3, alpha=0.2, **kwargs)
    with torch.no_grad():  # off the initial values, so that every parameter matters
        conv.norm.log_gamma.fill_(0.3)
        conv.norm.delta.normal_(0, 0.1)
    return conv.double()


def forward_backward(conv: torch.nn.Module, x: torch.Tensor, *inputs, device: str):
    """Output and every gradient (input, parameters) of ``sum(out * projection)`` on
    ``device``, returned on the CPU."""
    conv = copy.deepcopy(conv).to(device)
    x_in = x.detach().clone().to(device).requires_grad_(True)  # a leaf of its own each call
    moved = [t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs]
    out = conv(x_in, *moved)
    projection = torch.randn(out.shape, generator=torch.Generator().manual_seed(7),
                             dtype=out.dtype).to(device)
    (out * projection).sum().backward()
    result = {"out": out.detach().cpu(), "x": x_in.grad.cpu()}
    result.update({name: p.grad.cpu() for name, p in conv.named_parameters()
                   if p.grad is not None})
    return result


def assert_close_to_cpu(on_device: dict, on_cpu: dict, tolerance: float) -> None:
    assert set(on_device) == set(on_cpu)
    for key, want in on_cpu.items():
        assert want.abs().sum() > 0, key  # the comparison is not vacuous
        assert relative_error(on_device[key], want) < tolerance, key


# --------------------------------------------------------------------------------------------
# 1. The fused kernels and the closed form
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["none", "flat", "per_head"])
def test_fused_attention_grad_on_device_equals_the_reference_on_the_cpu(kind):
    gen = torch.Generator().manual_seed(1)
    num_nodes, heads, head_dim = 60, 3, 5
    src = torch.randint(0, 50, (400,), generator=gen)
    dst = torch.randint(0, 50, (400,), generator=gen)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    k = torch.randn(num_nodes, heads, head_dim, generator=gen, dtype=torch.float64)
    q = torch.randn(num_nodes, heads, head_dim, generator=gen, dtype=torch.float64)
    beta = torch.rand(heads, generator=gen, dtype=torch.float64) + 0.5
    weight = {"none": None, "flat": torch.randn(src.numel(), generator=gen, dtype=torch.float64),
              "per_head": torch.randn(src.numel(), heads, generator=gen, dtype=torch.float64)}[kind]
    ref_k, ref_q = E.attention_grad(k, q, src, dst, beta,
                                    weight.unsqueeze(-1) if kind == "flat" else weight, num_nodes)
    moved = [t.to(DEVICE) if t is not None else None for t in (k, q, src, dst, beta, weight)]
    grad_k, grad_q = fused_attention_grad(*moved)
    assert grad_k.device.type == torch.device(DEVICE).type
    assert relative_error(grad_k.cpu(), ref_k) < EXACT
    assert relative_error(grad_q.cpu(), ref_q) < EXACT
    # The hand-written backward on the device, against finite differences.
    inputs = [t.to(DEVICE).requires_grad_(True) for t in (k[:20], q[:20], beta)]
    small = (src < 20) & (dst < 20)
    s, d = src[small].to(DEVICE), dst[small].to(DEVICE)
    w = None if weight is None else weight[small].to(DEVICE).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda kk, qq, bb, *ww: fused_attention_grad(kk, qq, s, d, bb, ww[0] if ww else None),
        (*inputs, *([w] if w is not None else [])), atol=1e-8, rtol=1e-6)


@pytest.mark.parametrize("rows", [None, 7])
def test_fused_hopfield_term_on_device_equals_the_reference_on_the_cpu(rows):
    gen = torch.Generator().manual_seed(2)
    g = torch.randn(50, 6, generator=gen, dtype=torch.float64)
    xi = torch.randn(24, 6, generator=gen, dtype=torch.float64)
    up = torch.randn(50, 6, generator=gen, dtype=torch.float64)
    leaves = [t.clone().requires_grad_(True) for t in (g, xi)]
    want = E.hopfield_grad(*leaves, "relu")
    want_grads = torch.autograd.grad(want, leaves, up)
    on_device = [t.to(DEVICE).requires_grad_(True) for t in (g, xi)]
    got = fused_relu_hopfield_grad(*on_device, rows=rows)
    got_grads = torch.autograd.grad(got, on_device, up.to(DEVICE))
    assert got.device.type == torch.device(DEVICE).type
    assert relative_error(got.detach().cpu(), want.detach()) < EXACT
    for a, b in zip(got_grads, want_grads):
        assert relative_error(a.cpu(), b) < EXACT


@pytest.mark.parametrize("hopfield", ["relu", "softmax"])
def test_closed_form_equals_autograd_of_the_energy_on_device(hopfield):
    conv = make_conv(hopfield).to(DEVICE)
    x, edge_index = (t.to(DEVICE) for t in awkward_graph())
    x = torch.nn.functional.pad(x, (0, 8))  # awkward_graph has 8 features, the conv 16
    energy = conv.energy_fn
    g = energy.norm(x).detach().requires_grad_(True)
    total = energy.node_energy_of_g(g, energy.edges(x, edge_index, None)).sum()
    reference = torch.autograd.grad(total, g)[0]
    assert relative_error(conv.energy_grad(x, edge_index), reference) < 1e-8


@pytest.mark.parametrize("hopfield", ["relu", "softmax"])
@pytest.mark.parametrize("weight_kind", ["none", "per_edge", "per_head"])
def test_etconv_forward_and_backward_on_device_equal_the_cpu(hopfield, weight_kind):
    x, edge_index = graph_with_hub()
    gen = torch.Generator().manual_seed(3)
    weight = {"none": None,
              "per_edge": torch.rand(edge_index.size(1), generator=gen, dtype=torch.float64),
              "per_head": torch.randn(edge_index.size(1), 4, generator=gen, dtype=torch.float64),
              }[weight_kind]
    conv = make_conv(hopfield)
    on_cpu = forward_backward(conv, x, edge_index, weight, device="cpu")
    assert_close_to_cpu(forward_backward(conv, x, edge_index, weight, device=DEVICE), on_cpu,
                        EXACT)


def test_float32_and_bfloat16_on_device_stay_close_to_float64():
    x, edge_index = graph_with_hub()
    conv = make_conv()
    want = conv(x, edge_index).detach()
    single = forward_backward(conv.float(), x.float(), edge_index, device=DEVICE)["out"]
    assert relative_error(single.double(), want) < 1e-4
    with torch.autocast(torch.device(DEVICE).type, dtype=torch.bfloat16):
        low = copy.deepcopy(conv).float().to(DEVICE)(x.float().to(DEVICE), edge_index.to(DEVICE))
    assert torch.isfinite(low).all()
    assert relative_error(low.double().cpu(), want) < 0.05


def test_sparse_adjacency_on_device_equals_edge_index():
    x, edge_index = graph_with_hub()
    # One entry per edge: a duplicate edge would become one matrix entry of value 2.
    edge_index = coalesce(edge_index[:, edge_index[0] != edge_index[1]])
    conv = make_conv().to(DEVICE)
    x, edge_index = x.to(DEVICE), edge_index.to(DEVICE)
    # PyG's convention: the transposed adjacency, row = destination.
    adj_t = to_torch_csr_tensor(edge_index.flip(0), size=(x.size(0), x.size(0)))
    assert relative_error(conv(x, adj_t), conv(x, edge_index)) < EXACT


@pytest.mark.parametrize("chunks", [dict(chunk_size=37), dict(chunk_size=10_000, chunk_edges=90),
                                    dict(chunk_size=64, chunk_edges=1)])
def test_chunked_inference_on_device_equals_the_full_pass(chunks):
    x, edge_index = (t.to(DEVICE) for t in graph_with_hub())
    conv = make_conv().to(DEVICE).eval()
    with torch.no_grad():
        full = conv(x, edge_index)
    chunked = conv.forward_chunked(x, edge_index, **chunks)
    assert chunked.device == full.device
    assert relative_error(chunked, full) < EXACT


def test_relational_conv_on_device_equals_the_cpu():
    x, edge_index = graph_with_hub()
    edge_type = torch.randint(0, 3, (edge_index.size(1),),
                              generator=torch.Generator().manual_seed(4))
    torch.manual_seed(0)
    conv = RelationalETConv(16, 3, heads=2, head_dim=8, steps=2, alpha=0.2).double()
    on_cpu = forward_backward(conv, x, edge_index, edge_type, device="cpu")
    assert_close_to_cpu(forward_backward(conv, x, edge_index, edge_type, device=DEVICE),
                        on_cpu, EXACT)


def test_graph_model_on_device_equals_the_cpu():
    from et_graph.nn.models.graph_model import ETGraphModel
    from et_graph.transforms import CLSLaplacianPE

    def ring(n: int, label: int) -> Data:
        src = torch.arange(n)
        edge_index = to_undirected(torch.stack([src, (src + (1 if label else 2)) % n]))
        data = Data(x=torch.randn(n, 3, dtype=torch.float64), edge_index=edge_index,
                    y=torch.tensor([label]))
        return CLSLaplacianPE(4)(data)

    torch.manual_seed(0)
    batch = Batch.from_data_list([ring(n, n % 2) for n in range(5, 15)])
    for key in ("x", "lap_pe", "cls_lap_pe"):
        batch[key] = batch[key].double()
    for readout in ("cls", "cls_sum_mean"):
        torch.manual_seed(0)
        model = ETGraphModel(3, 2, hidden_channels=16, blocks=2, steps=2, heads=2, head_dim=8,
                             pe_dim=4, readout=readout).double()
        model.eval()  # no training noise: the two runs would draw different noise
        results = {}
        for run, device in (("reference", "cpu"), ("device", DEVICE)):
            moved = copy.deepcopy(model).to(device)
            on_device = batch.clone().to(device)
            logits = moved.forward_data(on_device)
            torch.nn.functional.cross_entropy(logits, on_device.y).backward()
            results[run] = {"out": logits.detach().cpu(),
                               **{n: p.grad.cpu() for n, p in moved.named_parameters()
                                  if p.grad is not None}}
        assert_close_to_cpu(results["device"], results["reference"], 1e-8)


def test_the_graph_model_trains_under_autocast_on_device():
    """(A device audit: CUDA autocast was untested for ETGraphModel.) A float32 model under
    bfloat16 autocast stays near its float32 logits and gives finite gradients."""
    from et_graph.nn.models.graph_model import ETGraphModel

    graphs = []
    for n in range(5, 13):
        src = torch.arange(n)
        graphs.append(Data(x=torch.randn(n, 3), y=torch.tensor([n % 2]),
                           edge_index=to_undirected(torch.stack([src, (src + 1) % n]))))
    batch = Batch.from_data_list(graphs).to(DEVICE)
    torch.manual_seed(0)
    model = ETGraphModel(3, 2, hidden_channels=16, blocks=2, steps=2, heads=2, head_dim=8,
                         pe_dim=0, readout="cls_sum_mean").to(DEVICE).eval()
    reference = model.forward_data(batch)
    with torch.autocast(torch.device(DEVICE).type, dtype=torch.bfloat16):
        low = model.forward_data(batch)
        torch.nn.functional.cross_entropy(low.float(), batch.y).backward()
    assert (low.float() - reference).abs().max() < 0.1
    assert all(bool(torch.isfinite(p.grad).all()) for p in model.parameters()
               if p.grad is not None)


# --------------------------------------------------------------------------------------------
# 2. Detectors and runners with device="cuda"
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def planted():
    return planted_graph_with_masks(300, seed=3)


@pytest.mark.parametrize("name", ["et", "gcn", "gat", "mlp"])
def test_detectors_train_and_score_on_device_like_on_the_cpu(planted, name, tmp_path):
    from scipy.stats import spearmanr

    from et_graph.detectors import DETECTORS

    make = lambda device: DETECTORS[name](epochs=5, hidden=16, device=device)  # noqa: E731
    on_device = make(DEVICE).fit(planted)
    assert all(p.device.type == torch.device(DEVICE).type
               for p in on_device.model_.parameters())
    score = on_device.decision_function(planted)
    assert score.device.type == "cpu" and torch.isfinite(score).all()
    reference = make("cpu").fit(planted).decision_function(planted)
    # Five epochs of float32 training: the GPU sums in another order, so the scores are close
    # but not bit-identical.
    assert spearmanr(score.numpy(), reference.numpy()).statistic > 0.99
    on_device.save(tmp_path / "det.pt")
    loaded = type(on_device).load(tmp_path / "det.pt", map_location="cpu")
    assert torch.allclose(loaded.decision_function(planted), score, rtol=1e-4, atol=1e-5)


def test_gbt_label_trick_on_a_device_graph_equals_the_cpu(planted):
    """From an audit: the trees fit on the CPU, but their label-trick columns were built from
    the caller's edge_index, wherever it lay."""
    from et_graph.detectors import GBTDetector

    make = lambda: GBTDetector(label_trick=True, max_iter=20, seed=0)  # noqa: E731
    on_device = planted.clone().to(DEVICE)
    score = make().fit(on_device).decision_function(on_device)
    assert torch.equal(score.cpu(), make().fit(planted).decision_function(planted))


def test_et_detector_chunked_scoring_on_device_equals_the_full_pass(planted):
    from et_graph.detectors import ETDetector

    det = ETDetector(epochs=2, hidden=16, device=DEVICE).fit(planted)
    full = det.decision_function(planted)
    det.chunk_size, det.chunk_edges = 17, 40
    assert torch.allclose(det.decision_function(planted), full, rtol=1e-4, atol=1e-5)


def test_unsupervised_detector_on_device(planted):
    from et_graph.detectors import UnsupervisedETDetector

    det = UnsupervisedETDetector(seed=0, epochs=3, score_rounds=2, hidden=16,
                                 device=DEVICE).fit(planted)
    score = det.decision_function(planted)
    assert score.shape == (300,) and torch.isfinite(score).all()
    # Label-free on the device too: the scores are the same without labels (same device, same
    # seed; CUDA's scatter-adds may sum in another order, hence a tolerance).
    unlabelled = Data(x=planted.x, edge_index=planted.edge_index)
    again = UnsupervisedETDetector(seed=0, epochs=3, score_rounds=2, hidden=16,
                                   device=DEVICE).fit(unlabelled).decision_function(planted)
    assert torch.allclose(again, score, rtol=1e-3, atol=1e-5)


def test_anomaly_runner_on_device(tmp_path):
    from et_graph.cli import main as cli_main
    from et_graph.datasets.synthetic import planted_anomaly_graph

    graph = tmp_path / "planted.pt"
    torch.save(planted_anomaly_graph(300, seed=2), graph)
    out = tmp_path / "run"
    assert cli_main(["anomaly", "--data", str(graph), "--epochs", "3", "--seeds", "1",
                     "--hidden", "16", "--out", str(out), "--no-progress",
                     "--device", DEVICE]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["meta"]["config"]["run"]["device"] == DEVICE
    for stats in results["models"].values():
        assert np.isfinite(stats["auroc"]["mean"])


def test_tudataset_runner_on_device(tmp_path):
    from et_graph.experiments import tudataset

    root = tmp_path / "root"
    shutil.copytree(REPO / "datasets" / "TUDataset" / "MUTAG" / "raw", root / "MUTAG" / "raw")
    out = tmp_path / "out"
    tudataset.main(["--dataset", "MUTAG", "--root", str(root), "--cache", str(tmp_path / "c"),
                    "--quick", "--max-folds", "1", "--out", str(out), "--no-progress",
                    "--device", DEVICE])
    results = json.loads((out / "MUTAG" / "results.json").read_text(encoding="utf-8"))
    assert results["meta"]["config"]["run"]["device"] == DEVICE
    for stats in results["models"].values():
        assert 0.0 <= stats["accuracy"]["mean"] <= 1.0


def test_gnnbenchmark_runner_on_device(tmp_path):
    from et_graph.experiments import gnnbenchmark

    out = tmp_path / "zinc"
    gnnbenchmark.main(["--dataset", "ZINC", "--root", str(REPO / "datasets"), "--out", str(out),
                       "--quick", "--no-progress", "--device", DEVICE])
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["meta"]["config"]["run"]["device"] == DEVICE
    for stats in results["models"].values():
        assert np.isfinite(stats["mae"]["mean"])


def test_neighbour_sampled_label_trick_and_balanced_training_on_device(planted):
    from et_graph.detectors import ETDetector

    det = ETDetector(epochs=3, hidden=16, batch_size=64, num_neighbors=[5, 5],
                     neighbor_sampler="builtin", label_trick=True, class_balance="sample",
                     device=DEVICE).fit(planted)
    score = det.decision_function(planted)
    assert score.shape == (300,) and torch.isfinite(score).all()


def test_resuming_a_device_checkpoint_ends_like_the_uninterrupted_run(tmp_path):
    """Checkpoints hold device tensors and the device's random state: a run resumed from them
    (here: from the finished trainings) reports what the uninterrupted run reported."""
    from et_graph.config import parse
    from et_graph.datasets.synthetic import planted_anomaly_graph
    from et_graph.experiments import anomaly

    data = planted_anomaly_graph(300, seed=11)
    common = ["--models", "et,mlp", "--seeds", "1", "--epochs", "4", "--hidden", "16",
              "--no-progress", "--no-energy-row", "--device", DEVICE,
              "--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-every", "2"]
    first = anomaly.run(parse(anomaly.CONFIG, common), data=data)
    again = anomaly.run(parse(anomaly.CONFIG, [*common, "--resume"]), data=data)
    assert again["models"] == first["models"]
    assert again["per_seed"][0]["et"]["resumed_from_epoch"] == 4


def test_explainer_on_device():
    x, edge_index = awkward_graph()
    explainer = node_explainer(ExplainedModel().to(DEVICE))
    explanation = explainer(x.float().to(DEVICE), edge_index.to(DEVICE), index=0)
    assert explanation.edge_mask.shape == (edge_index.size(1),)
    assert explanation.edge_mask.abs().sum() > 0


@pytest.mark.parametrize("argv", [
    ["image", "--quick", "--seeds", "1", "--epochs", "1"],
    ["unsupervised", "--quick", "--models", "et,iforest", "--score-rounds", "1", "--epochs", "2"],
])
def test_image_and_unsupervised_runners_on_device(argv, tmp_path, planted):
    from et_graph.cli import main as cli_main

    if argv[0] == "unsupervised":
        torch.save(Data(x=planted.x, edge_index=planted.edge_index, y=planted.y),
                   tmp_path / "g.pt")
        argv = [*argv, "--data", str(tmp_path / "g.pt")]
    out = tmp_path / "out"
    assert cli_main([*argv, "--device", DEVICE, "--no-progress", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["meta"]["config"]["run"]["device"] == DEVICE


def test_the_image_runner_scores_on_the_device_it_trained_on(tmp_path, monkeypatch):
    """The held-out scoring and the dynamics trace ran on the CPU after a GPU training (an
    audit of the image path)."""
    from et_graph.experiments import image_completion as experiment

    seen = []
    for name in ("evaluate_image_completion", "trace_dynamics"):
        real = getattr(experiment, name)

        def recording(model, *args, _real=real, **kwargs):
            seen.append(model.position.device.type)
            return _real(model, *args, **kwargs)

        monkeypatch.setattr(experiment, name, recording)
    experiment.main(["--quick", "--seeds", "1", "--epochs", "1", "--device", DEVICE,
                     "--no-progress", "--out", str(tmp_path / "out")])
    assert seen == [torch.device(DEVICE).type] * 2


def test_a_gpu_fit_gives_the_caller_back_its_cuda_random_state_and_resumes_exactly(tmp_path):
    """private_rng forked no CUDA generator before CUDA was up, so a detector's fit overwrote the
    caller's CUDA seed; checkpoints kept no CUDA state, so a resumed GPU run drew other dropout
    masks than an uninterrupted one."""
    from et_graph.training import CheckpointConfig, TrainConfig, Trainer, private_rng

    torch.manual_seed(1234)
    expected = torch.rand(4, device=DEVICE)
    torch.manual_seed(1234)
    with private_rng(0, DEVICE):
        torch.rand(9, device=DEVICE)
    assert torch.equal(torch.rand(4, device=DEVICE), expected)

    class DropoutTask:
        def batches(self, epoch):
            yield torch.ones(8, 4, device=DEVICE)

        def loss(self, model, batch):
            return model(batch).pow(2).mean()

        def validate(self, model):
            from et_graph.training import Validation
            return Validation(-float(model[0].weight.sum()))

    def fit(folder, resume, on_epoch=None):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).to(DEVICE)
        trainer = Trainer(TrainConfig(epochs=4, lr=0.1), CheckpointConfig(str(folder), 1, resume),
                          progress=False, on_epoch=on_epoch)
        trainer.fit(model, DropoutTask())
        return model

    def kill_after_epoch_1(epoch, *args, **kwargs):
        if epoch == 1:
            raise KeyboardInterrupt

    whole = fit(tmp_path / "whole", False)
    with pytest.raises(KeyboardInterrupt):
        fit(tmp_path / "cut", False, kill_after_epoch_1)
    torch.rand(100, device=DEVICE)  # the CUDA stream moves on before the resume
    resumed = fit(tmp_path / "cut", True)
    assert torch.equal(whole[0].weight, resumed[0].weight)


def test_transductive_and_unsupervised_detectors_loaded_onto_the_device_score(planted, tmp_path):
    """From a code-reading audit: load(map_location=device) moved the fitted graph's edges and
    scores to the GPU, where the label trick's graph check and predict's ranks met CPU tensors."""
    from et_graph.detectors import ETDetector, UnsupervisedETDetector

    trick = ETDetector(epochs=3, hidden=16, label_trick=True).fit(planted)
    trick.save(tmp_path / "trick.pt")
    loaded = ETDetector.load(tmp_path / "trick.pt", map_location=DEVICE)
    assert torch.allclose(loaded.decision_function(planted), trick.decision_function(planted),
                          rtol=1e-4, atol=1e-5)
    free = UnsupervisedETDetector(epochs=3, hidden=16).fit(planted)
    free.save(tmp_path / "free.pt")
    moved = UnsupervisedETDetector.load(tmp_path / "free.pt", map_location=DEVICE)
    _, prob = moved.predict(planted, return_prob=True)
    assert torch.equal(prob, free.predict(planted, return_prob=True)[1])


def test_device_graphs_in_the_transforms_baselines_and_image_masks():
    from et_graph.baselines.unsupervised import baseline_features, degree_scores
    from et_graph.nn.models import ETImageCompletion
    from et_graph.transforms import CLSLaplacianPE

    x, edge_index = awkward_graph()
    graph = Data(x=x.float(), edge_index=edge_index)
    on_device = graph.to(DEVICE)
    encoded = CLSLaplacianPE(k=3)(on_device.clone())
    assert encoded.lap_pe.device.type == torch.device(DEVICE).type
    assert torch.equal(encoded.lap_pe.cpu(), CLSLaplacianPE(k=3)(graph.clone()).lap_pe)
    assert np.array_equal(baseline_features(on_device, "mean"), baseline_features(graph, "mean"))
    assert np.array_equal(degree_scores(on_device), degree_scores(graph))
    model = ETImageCompletion(image_size=8, patch_size=4, channels=1, dim=16, steps=2).to(DEVICE)
    images = torch.rand(2, 1, 8, 8, device=DEVICE)
    mask = torch.tensor([[True, False, False, True], [False, True, True, False]])  # on the CPU
    assert torch.isfinite(model.loss(images, mask)) and model.complete(images, mask).shape == (
        2, 1, 8, 8)


@pytest.mark.skipif(DEVICE == "cpu", reason="needs a second device")
@pytest.mark.parametrize("relational", [False, True])
def test_a_cached_layer_moved_off_the_device_names_its_edges_device(relational):
    """From a device audit: a cache hit skipped the only device check, so a cached layer moved
    back to the CPU after a GPU call mixed its CPU tokens with the GPU edges (torch's error from
    deep inside, or the compiled kernels reading GPU memory)."""
    x, edge_index = awkward_graph()
    x = x.float()
    edge_type = torch.arange(edge_index.size(1)) % 2
    conv = (RelationalETConv(8, 2, heads=2, head_dim=4, cached=True) if relational
            else ETConv(8, heads=2, head_dim=4, cached=True)).to(DEVICE)
    args = (edge_index.to(DEVICE),) + ((edge_type.to(DEVICE),) if relational else ())
    conv(x.to(DEVICE), *args)
    with pytest.raises(ValueError, match="edge_index is on cuda"):
        conv.cpu()(x, *args)


@pytest.mark.parametrize("readout", ["first_last", "ego_neighbour", "ego_two_hop"])
def test_the_anomaly_network_runs_under_autocast_on_device(readout):
    """(A device audit: CUDA autocast was untested for the anomaly network; on the CPU every
    readout but first_last failed under autocast until session 67.)"""
    from et_graph.datasets.synthetic import planted_anomaly_graph
    from et_graph.nn.models import ETAnomalyNet

    data = planted_anomaly_graph(120, num_features=6, seed=3)
    torch.manual_seed(0)
    model = ETAnomalyNet(6, 16, heads=2, head_dim=4, steps=2, readout=readout).to(DEVICE)
    x, edge_index = data.x.to(DEVICE), data.edge_index.to(DEVICE)
    reference = model.eval()(x, edge_index)
    dtype = torch.bfloat16
    with torch.autocast(torch.device(DEVICE).type, dtype=dtype):
        low = model(x, edge_index)
    assert (low.float() - reference).abs().max() < 0.05
    model.train()
    inputs = x.clone().requires_grad_()
    with torch.autocast(torch.device(DEVICE).type, dtype=dtype):
        model(inputs, edge_index).float().sum().backward()
    assert bool(torch.isfinite(inputs.grad).all())


def test_edge_features_on_device_equal_the_cpu():
    """ETConv(edge_dim=...): the fused kernel with key offsets (SDDMMs and products over
    edge-indexed CSR patterns) on the device against the CPU, the output and every gradient,
    the edge features' included."""
    x, edge_index = graph_with_hub()
    attr = torch.randn(edge_index.size(1), 5, generator=torch.Generator().manual_seed(3),
                       dtype=torch.float64)
    conv = make_conv(edge_dim=5)
    results = []
    for device in (DEVICE, "cpu"):
        layer = copy.deepcopy(conv).to(device)
        x_in = x.clone().to(device).requires_grad_(True)
        features = attr.clone().to(device).requires_grad_(True)
        out = layer(x_in, edge_index.to(device), edge_attr=features)
        out.pow(2).sum().backward()
        results.append({"out": out.detach().cpu(), "x": x_in.grad.cpu(),
                        "edge_attr": features.grad.cpu(),
                        **{name: p.grad.cpu() for name, p in layer.named_parameters()}})
    assert_close_to_cpu(results[0], results[1], EXACT)
