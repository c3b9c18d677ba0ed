"""ETAnomalyNet: shapes, readout, energy score, input checks, learning planted anomalies."""
import pytest
import torch

from et_graph.datasets.synthetic import planted_anomaly_graph
from et_graph.detectors import ETDetector, MLPDetector, neighbourhood_features
from et_graph.nn.models import ETAnomalyNet, weighted_bce_loss
from et_graph.protocols.anomaly import evaluate, make_splits

pytestmark = pytest.mark.usefixtures("one_thread")



def small_graph():
    data = planted_anomaly_graph(120, num_features=6, seed=3)
    return data.x, data.edge_index


def test_forward_shapes_and_energy_outputs():
    x, edge_index = small_graph()
    model = ETAnomalyNet(6, 16, heads=2, head_dim=4, steps=2).eval()
    logits, energies = model(x, edge_index, return_energy=True)
    assert logits.shape == (120,) and energies.shape == (3,)
    assert torch.allclose(logits, model(x, edge_index))
    score = model.energy_score(x, edge_index)
    assert score.shape == (120,)
    assert score.sum().item() == pytest.approx(energies[-1].item(), rel=1e-4, abs=1e-3)


def test_readout_uses_first_and_last_normalised_tokens():
    x, edge_index = small_graph()
    model = ETAnomalyNet(6, 8, steps=1).eval()
    first = model.embed(x)
    last = model.conv(first, edge_index)
    expected = model.readout(torch.cat([model.conv.norm(first), model.conv.norm(last)], -1))
    assert torch.allclose(model(x, edge_index), expected.squeeze(-1), atol=1e-6)


def test_positional_embedding_full_graph_and_subgraph():
    x, edge_index = small_graph()
    model = ETAnomalyNet(6, 8, positional=True, num_nodes=120)
    with torch.no_grad():
        model.positional.weight.normal_()
    ids = torch.arange(10, 30)
    sub = model.embed(x[ids], ids)
    assert torch.allclose(sub, model.embed(x)[ids])
    with pytest.raises(ValueError, match="node_ids"):
        model.embed(x[:20])
    with pytest.raises(ValueError, match="num_nodes"):
        ETAnomalyNet(6, 8, positional=True)


def test_bad_inputs_raise():
    x, edge_index = small_graph()
    model = ETAnomalyNet(6, 8)
    bad = x.clone()
    bad[3, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        model(bad, edge_index)
    with pytest.raises(ValueError, match="width"):
        model(x[:, :5], edge_index)
    with pytest.raises(ValueError, match="node ids"):
        model(x, edge_index + 200)
    with pytest.raises(ValueError, match="dropout"):
        ETAnomalyNet(6, 8, dropout=1.0)


def test_weighted_loss_weights_anomalies():
    logits = torch.zeros(4)
    target = torch.tensor([0, 0, 0, 1])
    plain = weighted_bce_loss(logits, target, 1.0)
    weighted = weighted_bce_loss(logits, target, 3.0)
    assert weighted.item() == pytest.approx(plain.item() * 6 / 4)


def test_tree_features_are_x_mean_and_mean_of_mean():
    x = torch.tensor([[1.0], [2.0], [4.0]])
    edge_index = torch.tensor([[1, 2, 0], [0, 0, 1]])
    feats = neighbourhood_features(x, edge_index)
    assert feats[:, 1].tolist() == [3.0, 1.0, 0.0]
    assert feats[:, 2].tolist() == [0.5, 3.0, 0.0]


def test_et_learns_planted_anomalies_well_above_chance():
    """Planted anomalies carry another community's features: invisible to an MLP, visible to a
    model that compares a node with its neighbours."""
    data = planted_anomaly_graph(600, seed=0)
    split = make_splits(data, "paper", 1, 0.4, split_seed=0)[0]
    train, val, _ = split.masks(600)
    test, y = split.test.numpy(), data.y.numpy()
    auroc = {}
    for name, det in (("et", ETDetector(epochs=40, lr=0.01, hidden=32, heads=2, head_dim=8)),
                      ("mlp", MLPDetector(epochs=40, lr=0.01, hidden=32))):
        score = det.fit(data, train, val).decision_score_.numpy()
        auroc[name] = evaluate(y[test], score[test], det.threshold_)["auroc"]
    assert auroc["et"] > 0.8
    assert auroc["mlp"] < 0.65


def test_ego_neighbour_readout_spmm_matches_scatter_with_gradients():
    from torch_geometric.utils import scatter

    data = planted_anomaly_graph(100, seed=1)
    edge_index = torch.cat([data.edge_index, torch.tensor([[3, 3], [3, 7]])], dim=1)  # loop
    model = ETAnomalyNet(8, 16, readout="ego_neighbour").double()
    x = data.x.double().requires_grad_()
    first = model.embed(x)
    last = model.conv(first, edge_index)
    features = model.readout_features(first, last, edge_index)
    tokens = model.conv.norm(last)
    src, dst = edge_index
    keep = src != dst
    reference = scatter(tokens[src[keep]], dst[keep], 0, dim_size=100, reduce="mean")
    torch.testing.assert_close(features[:, 32:], reference)
    grad = torch.autograd.grad(features[:, 32:].sum(), x, retain_graph=True)[0]
    torch.testing.assert_close(grad, torch.autograd.grad(reference.sum(), x)[0])


def test_neighbour_operator_is_kept_by_identity_not_by_address():
    torch.manual_seed(0)
    model = ETAnomalyNet(6, 8, steps=1, readout="ego_two_hop").eval()
    tokens = torch.randn(20, 8)
    edge_index = torch.randint(0, 20, (2, 60))
    first = model.neighbour_mean_operator(edge_index, tokens)
    assert model.neighbour_mean_operator(edge_index, tokens) is first
    # Same shape and version, other edges: an address-keyed cache could mistake the two.
    other = torch.randint(0, 20, (2, 60))
    expected = torch.zeros(20, 8).index_add_(0, other[1][other[0] != other[1]],
                                             tokens[other[0][other[0] != other[1]]])
    degree = torch.bincount(other[1][other[0] != other[1]], minlength=20).clamp(min=1)
    assert torch.allclose(model.neighbour_means(other, tokens), expected / degree[:, None],
                          atol=1e-6)
    edge_index[0, 0] = (edge_index[0, 0] + 1) % 20  # in place: rebuilt
    assert model.neighbour_mean_operator(edge_index, tokens) is not first
    # The model's convs keep the descent's edges the same way (full-batch training).
    assert all(conv.cached for conv in model.convs)


def test_neighbour_means_gradient_equals_autograds_bit_for_bit():
    torch.manual_seed(1)
    model = ETAnomalyNet(6, 8, steps=1, readout="ego_two_hop").double()
    edge_index = torch.randint(0, 30, (2, 120))
    tokens = torch.randn(30, 8, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(30, 8, dtype=torch.float64)
    (ours,) = torch.autograd.grad(model.neighbour_means(edge_index, tokens), tokens, upstream)
    operator = model.neighbour_mean_operator(edge_index, tokens)
    (reference,) = torch.autograd.grad(torch.sparse.mm(operator, tokens), tokens, upstream)
    assert torch.equal(ours, reference)
    assert model._neighbour_entry(edge_index, tokens)["transposed"] is not None
    # two hops, and derivatives of any order (the backward is the same product, transposed)
    assert torch.autograd.gradcheck(
        lambda t: model.neighbour_means(edge_index, model.neighbour_means(edge_index, t)),
        (tokens,))
    assert torch.autograd.gradgradcheck(lambda t: model.neighbour_means(edge_index, t) ** 2,
                                        (tokens,))


def test_models_read_float64_features_and_errors_name_what_was_passed():
    """ETAnomalyNet and the masked-reconstruction model failed with a raw 'mat1 and mat2 must
    have the same dtype' on float64 features (ETGraphModel cast them); a list x was called a
    bipartite pair; a 1-D edge_weight of the wrong length was reported as (E', 1)."""
    from et_graph.nn import ETConv
    from et_graph.nn.models import ETAnomalyNet
    from et_graph.nn.models.masked_reconstruction import ETMaskedNodeReconstruction

    torch.manual_seed(0)
    x = torch.randn(30, 6)
    edge_index = torch.randint(0, 30, (2, 90))
    net = ETAnomalyNet(6, 8).eval()
    torch.testing.assert_close(net(x.double(), edge_index), net(x, edge_index))
    model = ETMaskedNodeReconstruction(6, 8).eval()
    mask = torch.zeros(30, dtype=torch.bool)
    mask[:5] = True
    torch.testing.assert_close(model.reconstruction_error(x.double(), edge_index, mask).double(),
                               model.reconstruction_error(x, edge_index, mask).double(),
                               rtol=1e-5, atol=1e-6)
    conv = ETConv(6, heads=2, head_dim=3)
    with pytest.raises(ValueError, match="must be a torch.Tensor, got list"):
        conv(x.tolist(), edge_index)
    with pytest.raises(ValueError, match="bipartite"):
        conv((x, x), edge_index)
    with pytest.raises(ValueError, match=r"got \(89,\)"):
        conv(x, edge_index, edge_weight=torch.rand(89))


def test_neighbour_means_raise_no_csr_notice_as_the_first_sparse_code_of_a_process():
    """PyTorch warns once per process when a CSR tensor is built. The readout's neighbour
    operator used to rely on the fused attention kernel having built one first (inside its
    silencing wrapper); with the compiled kernel on, the readout came first and a caller that
    turns warnings into errors failed. A fresh process calls the readout alone."""
    import subprocess
    import sys

    code = (
        "import torch\n"
        "from et_graph.nn.models import ETAnomalyNet\n"
        "net = ETAnomalyNet(3, hidden_channels=8, readout='ego_two_hop')\n"
        "x = torch.randn(6, 8, requires_grad=True)\n"
        "edge_index = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])\n"
        "net.neighbour_means(edge_index, x).sum().backward()\n"
    )
    done = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", code],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-1500:]


@pytest.mark.parametrize("readout,layers,relations", [
    ("ego_neighbour", 0, None), ("ego_two_hop", 1, None), ("ego_neighbour", 0, 3),
    ("first_last", 0, None)])
def test_an_edge_mask_covers_every_path_the_edges_take_into_the_score(readout, layers, relations):
    """An explainer's edge mask gated ET's attention but not the readout's neighbour mean (one
    sparse product) nor the message-passing layers: with every edge masked the score still
    moved with the edges (an audit: 2.76 logits)."""
    from torch_geometric.explain.algorithm.utils import clear_masks, set_masks

    torch.manual_seed(0)
    data = planted_anomaly_graph(80, seed=3)
    net = ETAnomalyNet(data.num_features, 16, heads=2, head_dim=4, readout=readout,
                       message_passing_layers=layers, num_relations=relations).double().eval()
    x, edge_index = data.x.double(), data.edge_index
    edge_index = torch.cat([edge_index, torch.tensor([[5], [5]])], dim=1)  # and a self-loop
    kwargs = {}
    if relations:
        kwargs["edge_type"] = torch.arange(edge_index.size(1)) % relations
    plain = net(x, edge_index, **kwargs)
    set_masks(net, torch.ones(edge_index.size(1), dtype=torch.float64), edge_index,
              apply_sigmoid=False)
    torch.testing.assert_close(net(x, edge_index, **kwargs), plain, rtol=0, atol=1e-10)
    set_masks(net, torch.zeros(edge_index.size(1), dtype=torch.float64), edge_index,
              apply_sigmoid=False)
    masked = net(x, edge_index, **kwargs)
    clear_masks(net)
    none = edge_index[:, :0]
    edgeless = net(x, none, **({"edge_type": kwargs["edge_type"][:0]} if relations else {}))
    torch.testing.assert_close(masked, edgeless, rtol=0, atol=1e-10)
    assert not torch.allclose(plain, edgeless)
    torch.testing.assert_close(net(x, edge_index, **kwargs), plain, rtol=0, atol=0)


def test_a_non_tensor_input_gets_the_input_check_not_an_attribute_error():
    """(a review) the width hint read x.dim() before the input check: a NumPy array failed
    with AttributeError instead of the clear ValueError."""
    import numpy as np

    net = ETAnomalyNet(6, 16, heads=2, head_dim=4)
    with pytest.raises(ValueError, match="torch.Tensor"):
        net(np.random.randn(3, 6), torch.tensor([[0, 1], [1, 2]]))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("settings", [{"readout": "ego_neighbour"}, {"readout": "ego_two_hop"},
                                      {"message_passing_layers": 1}],
                         ids=["ego_neighbour", "ego_two_hop", "message_passing"])
def test_every_readout_runs_under_autocast(settings, dtype):
    """From a numerics audit: the neighbour means' sparse product has no 16-bit CPU kernel, so
    under autocast every readout but first_last failed ("addmm_out_sparse_csr_impl_mkl not
    implemented for 'BFloat16'"). The mean runs in float32; training and scoring work."""
    x, edge_index = small_graph()
    torch.manual_seed(0)
    model = ETAnomalyNet(6, 16, heads=2, head_dim=4, steps=2, **settings).eval()
    reference = model(x, edge_index)
    with torch.autocast("cpu", dtype=dtype):
        low = model(x, edge_index)
    assert (low.float() - reference).abs().max() < 0.05
    model.train()
    inputs = x.clone().requires_grad_()
    with torch.autocast("cpu", dtype=dtype):
        model(inputs, edge_index).float().sum().backward()
    assert bool(torch.isfinite(inputs.grad).all())
