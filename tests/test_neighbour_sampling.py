"""Neighbour sampling (et_graph.loaders) and neighbour-sampled detector training."""
from __future__ import annotations

import collections

import pytest
import torch

from et_graph.datasets.synthetic import planted_anomaly_graph
from et_graph.detectors import ETDetector
from et_graph.detectors.config import NodeTrainConfig
from et_graph.detectors.neural import NodeAnomalyTask
from et_graph.exceptions import ConfigWarning, ETGraphWarning
from et_graph.loaders import (
    NeighbourSampler,
    PygNeighbourSampler,
    make_sampler,
    parse_fanouts,
    pyg_sampler_available,
)
from et_graph.protocols.anomaly import make_splits


def random_graph(num_nodes=300, num_edges=3000, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, num_nodes, (2, num_edges), generator=generator)


def in_neighbours(edge_index):
    table = collections.defaultdict(list)
    for src, dst in edge_index.t().tolist():
        table[dst].append(src)
    return table


def check_batch(batch, edge_index, seeds, fanouts):
    """Seeds first and distinct nodes; every sampled edge is a real edge (with multiplicity);
    at most ``fanout`` edges per destination; each hop samples for the nodes the hop before
    added."""
    nodes = batch.nodes
    assert batch.num_seeds == seeds.numel()
    assert torch.equal(nodes[:seeds.numel()], seeds)
    assert nodes.unique().numel() == nodes.numel()
    real = collections.Counter(map(tuple, edge_index.t().tolist()))
    sampled = collections.Counter(map(tuple, nodes[batch.edge_index].t().tolist()))
    assert all(real[edge] >= count for edge, count in sampled.items())
    per_dst = collections.Counter(batch.edge_index[1].tolist())
    assert max(per_dst.values(), default=0) <= max(fanouts)
    # Destinations are the seeds or nodes added before the last hop; never a last-hop node.
    assert set(per_dst) <= set(range(nodes.numel()))


def test_parse_fanouts():
    assert parse_fanouts("10, 5") == (10, 5)
    assert parse_fanouts([3]) == (3,)
    assert parse_fanouts("") == () and parse_fanouts(None) == ()
    assert parse_fanouts("-1,2") == (-1, 2)
    for bad in ("0", "x", "3,-2", 5):
        with pytest.raises(ValueError):
            parse_fanouts(bad)


def test_builtin_sampler_batches_are_real_bounded_and_reproducible():
    edge_index = random_graph()
    sampler = NeighbourSampler(edge_index, 300, [4, 2])
    seeds = torch.tensor([5, 17, 99, 0])
    first = sampler.sample(seeds, torch.Generator().manual_seed(1))
    check_batch(first, edge_index, seeds, (4, 2))
    again = sampler.sample(seeds, torch.Generator().manual_seed(1))
    assert torch.equal(first.nodes, again.nodes) and torch.equal(first.edge_index,
                                                                 again.edge_index)
    other = sampler.sample(seeds, torch.Generator().manual_seed(2))
    assert not torch.equal(first.edge_index, other.edge_index)
    # The id map is reset after every batch: a later batch is unaffected by earlier ones.
    assert bool((sampler._local == -1).all())


def test_builtin_sampler_takes_every_in_neighbour_when_the_fanout_allows():
    edge_index = random_graph(num_nodes=50, num_edges=400)
    seeds = torch.tensor([3, 7])
    batch = NeighbourSampler(edge_index, 50, [-1]).sample(seeds)
    table = in_neighbours(edge_index)
    for position, seed in enumerate(seeds.tolist()):
        got = sorted(batch.nodes[batch.edge_index[0, batch.edge_index[1] == position]].tolist())
        assert got == sorted(table[seed])


def test_builtin_sampler_is_uniform_without_replacement():
    # Nodes 10..309 each have in-neighbours 0..9; fanout 3 must pick 3 distinct ones per node,
    # each with probability 3/10.
    dst = torch.arange(10, 310).repeat_interleave(10)
    edge_index = torch.stack([torch.arange(10).repeat(300), dst])
    sampler = NeighbourSampler(edge_index, 310, [3])
    generator = torch.Generator().manual_seed(0)
    counts = torch.zeros(10)
    draws = 10
    for _ in range(draws):
        batch = sampler.sample(torch.arange(10, 310), generator)
        picked = batch.nodes[batch.edge_index[0]]
        owner = batch.edge_index[1]
        assert torch.equal(torch.bincount(owner, minlength=300), torch.full((300,), 3))
        assert (owner * 10 + picked).unique().numel() == 900  # distinct per node
        counts += torch.bincount(picked, minlength=10).float()
    share = counts / (draws * 300)
    assert torch.allclose(share, torch.full((10,), 0.3), atol=0.03), share


def test_builtin_sampler_rejects_bad_input():
    edge_index = random_graph()
    with pytest.raises(ValueError, match="at least one hop"):
        NeighbourSampler(edge_index, 300, [])
    with pytest.raises(ValueError, match="outside"):
        NeighbourSampler(edge_index, 10, [2])
    sampler = NeighbourSampler(edge_index, 300, [2])
    with pytest.raises(ValueError, match="distinct"):
        sampler.sample(torch.tensor([1, 1]))
    assert bool((sampler._local == -1).all())
    with pytest.raises(ValueError, match="out of range"):
        sampler.sample(torch.tensor([300]))
    with pytest.raises(ValueError, match="needs pyg-lib"):
        if pyg_sampler_available():
            raise ValueError("needs pyg-lib (skipped: it is installed)")
        make_sampler("pyg", edge_index, 300, [2])
    with pytest.raises(ValueError, match="one of"):
        make_sampler("fast", edge_index, 300, [2])


@pytest.mark.skipif(not pyg_sampler_available(), reason="needs pyg-lib or torch-sparse")
def test_pyg_sampler_gives_batches_of_the_same_form():
    edge_index = random_graph()
    seeds = torch.tensor([5, 17, 99, 0])
    batch = PygNeighbourSampler(edge_index, 300, [4, 2]).sample(seeds)
    check_batch(batch, edge_index, seeds, (4, 2))
    full = PygNeighbourSampler(edge_index, 300, [-1]).sample(seeds)
    table = in_neighbours(edge_index)
    for position, seed in enumerate(seeds.tolist()):
        got = sorted(full.nodes[full.edge_index[0, full.edge_index[1] == position]].tolist())
        assert got == sorted(table[seed])


@pytest.fixture
def graph():
    data = planted_anomaly_graph(400, seed=4)
    split = make_splits(data, "paper", 1, 0.4, split_seed=0)[0]
    data.train_mask, data.val_mask, data.test_mask = split.masks(400)
    return data


def test_neighbour_batches_cover_every_training_node_once_per_epoch(graph):
    config = NodeTrainConfig(batch_size=32, num_neighbors="3,3", neighbor_sampler="builtin")
    task = NodeAnomalyTask(graph, graph.y, graph.train_mask, graph.val_mask, config,
                           torch.Generator().manual_seed(0), True, torch.device("cpu"))
    for epoch in range(2):
        seeds = []
        for x, edge_index, nodes, local in task.batches(epoch):
            assert x.size(0) == nodes.numel() and int(edge_index.max()) < nodes.numel()
            assert torch.equal(local, torch.arange(local.numel()))
            assert local.numel() <= 32
            seeds.append(nodes[local])
        seeds = torch.cat(seeds)
        assert torch.equal(seeds.sort().values, graph.train_mask.nonzero().view(-1))


def test_neighbour_sampled_detector_learns_and_scores_the_full_graph(graph):
    from sklearn.metrics import roc_auc_score

    test = graph.test_mask.numpy()

    def test_auroc(det):
        return roc_auc_score(graph.y.numpy()[test], det.decision_score_.numpy()[test])

    # The built-in sampler, so that the run is the same with or without torch-sparse/pyg-lib:
    # PyG's sampler draws other batches (its form is checked above), and after 20 epochs its
    # checkpoint scored 0.846 here, under this bound.
    sampled = ETDetector(epochs=20, hidden=16, batch_size=48, num_neighbors=[10, 10],
                         neighbor_sampler="builtin", seed=0).fit(graph)
    assert sampled.config.train.num_neighbors == "10,10"
    full = ETDetector(epochs=20, hidden=16, seed=0).fit(graph)
    # A planted graph both modes separate well (full batch ~0.9): mini-batches must get close.
    assert test_auroc(sampled) > max(0.8, test_auroc(full) - 0.08), (test_auroc(sampled),
                                                                     test_auroc(full))
    with pytest.raises(ValueError, match="needs batch_size"):
        ETDetector(num_neighbors="5")


@pytest.mark.parametrize("steps", [1, 2])
def test_a_symmetric_graph_needs_two_hops_per_step_for_exact_seed_outputs(steps):
    """docs/scale.md's rule: each step reads two hops (the key side goes one hop out and reads
    that node's softmax one hop in), so T steps need 2T hops of -1 for the seeds' outputs to
    equal the full graph's; 2T - 1 hops are not enough. (The docs once said T hops.)"""
    from torch_geometric.utils import to_undirected

    from et_graph.nn import ETConv

    torch.manual_seed(3)
    num_nodes = 40
    edge_index = to_undirected(torch.randint(0, num_nodes, (2, 70)), num_nodes=num_nodes)
    x = torch.randn(num_nodes, 8, dtype=torch.float64)
    conv = ETConv(8, heads=2, head_dim=4, steps=steps, alpha=0.5).double().eval()
    seeds = torch.tensor([0, 5, 11])
    with torch.no_grad():
        full = conv(x, edge_index)[seeds]

        def seed_outputs(hops):
            batch = NeighbourSampler(edge_index, num_nodes, [-1] * hops).sample(seeds)
            return conv(x[batch.nodes], batch.edge_index)[:len(seeds)]

        torch.testing.assert_close(seed_outputs(2 * steps), full, rtol=0, atol=1e-12)
        assert (seed_outputs(2 * steps - 1) - full).abs().max() > 1e-6


def test_sampling_a_directed_graph_warns_that_it_cannot_match_scoring():
    """From an audit: on a directed graph the sampled batches never give the full-graph
    outputs (not even with fanouts of -1), and only the module docstring said so."""
    import warnings

    from torch_geometric.utils import to_undirected

    with pytest.warns(ConfigWarning, match="directed graph: the sampler follows in-edges"):
        make_sampler("builtin", random_graph(), 300, [-1, -1])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        warnings.simplefilter("error", ETGraphWarning)
        make_sampler("builtin", to_undirected(random_graph(), num_nodes=300), 300, [-1, -1])


def test_self_loops_do_not_take_a_neighbours_place_in_the_fanout():
    """From an audit: ET ignores self-loops, yet the sampler drew them, so a node with a
    self-loop and 2 in-neighbours kept only one real neighbour at fanout 2 (66% of draws)."""
    # 1 - 0 - 2, both directions, and a self-loop on 0
    edge_index = torch.tensor([[1, 2, 0, 0, 0], [0, 0, 1, 2, 0]])
    sampler = make_sampler("builtin", edge_index, 3, [2])
    for seed in range(20):
        batch = sampler.sample(torch.tensor([0]), torch.Generator().manual_seed(seed))
        sources = batch.nodes[batch.edge_index[0][batch.edge_index[1] == 0]]
        assert sorted(sources.tolist()) == [1, 2]  # both real neighbours, every time


def test_a_sampler_choice_without_sampling_is_refused_and_fanouts_have_one_spelling():
    """From a large-graph audit: neighbor_sampler="pyg" without num_neighbors was accepted
    (pyg-lib missing or not) and ignored; " 5 , 3 " and "5,3" were two configs to resume."""
    with pytest.raises(ValueError, match="neighbor_sampler='pyg' needs num_neighbors"):
        NodeTrainConfig(neighbor_sampler="pyg")
    with pytest.raises(ValueError, match="needs num_neighbors"):
        NodeTrainConfig(batch_size=50, neighbor_sampler="builtin")
    assert NodeTrainConfig(batch_size=8, num_neighbors=" 5 , 3 ").num_neighbors == "5,3"
    assert NodeTrainConfig(batch_size=8, num_neighbors=[5, 3]).num_neighbors == "5,3"


def test_repeated_seeds_name_the_link_prediction_recipe():
    """(a link-prediction audit) the two ends of edges repeat nodes: the error says how to
    make distinct seeds and find each pair among them."""
    from et_graph.loaders import NeighbourSampler

    sampler = NeighbourSampler(torch.tensor([[0, 1, 2], [1, 2, 0]]), 3, [2])
    with pytest.raises(ValueError, match=r"distinct .*torch\.unique\(edge_label_index"):
        sampler.sample(torch.tensor([0, 1, 1, 2]))
