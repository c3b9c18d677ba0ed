"""ETConv's dense path (all pairs of tokens) against its sparse path on the same graph."""
from __future__ import annotations

import pytest
import torch

from et_graph.nn import ETConv

BATCH, TOKENS, CHANNELS, HEADS = 3, 6, 8, 2


def make_conv(steps: int = 3, alpha: float = 0.1, **kwargs) -> ETConv:
    torch.manual_seed(0)
    conv = ETConv(CHANNELS, heads=HEADS, head_dim=4, steps=steps, alpha=alpha, **kwargs)
    with torch.no_grad():  # move off the zero-bias initialisation so every term matters
        conv.norm.delta.normal_(std=0.3)
        conv.norm.log_gamma.fill_(0.2)
    return conv.double()


def dense_to_union_graph(mask: torch.Tensor) -> torch.Tensor:
    """Edges of the union graph of a dense batch: ``b*M + B -> b*M + C`` where
    ``mask[b, C, B]`` (C attends to B) and ``B != C``."""
    batch, query, key = mask.nonzero(as_tuple=True)
    keep = query != key
    offset = batch[keep] * mask.size(1)
    return torch.stack([offset + key[keep], offset + query[keep]])


def random_mask(seed: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(BATCH, TOKENS, TOKENS, generator=generator) < 0.6
    mask[0, 2] = False  # a token that attends to nothing
    return mask


def tokens(seed: int = 2, dtype=torch.float64) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(BATCH, TOKENS, CHANNELS, generator=generator).to(dtype)


@pytest.mark.parametrize("use_mask", [False, True])
@pytest.mark.parametrize("grad", ["analytic", "autograd"])
def test_dense_forward_equals_sparse_forward_on_union_graph(use_mask: bool, grad: str) -> None:
    conv = make_conv(grad=grad)
    x = tokens()
    mask = random_mask() if use_mask else None
    full = torch.ones(BATCH, TOKENS, TOKENS, dtype=torch.bool)
    edge_index = dense_to_union_graph(mask if use_mask else full)
    batch = torch.arange(BATCH).repeat_interleave(TOKENS)

    dense_out, dense_energy = conv.forward_dense(x, mask, return_energy=True)
    sparse_out, sparse_energy = conv(x.reshape(-1, CHANNELS), edge_index, return_energy=True)

    assert dense_out.shape == x.shape and dense_energy.shape == (BATCH, conv.steps + 1)
    torch.testing.assert_close(dense_out.reshape(-1, CHANNELS), sparse_out)
    # The dense path reports one energy per image; their sum is the sparse total.
    torch.testing.assert_close(dense_energy.sum(0), sparse_energy)
    torch.testing.assert_close(
        conv.dense_energy(x, mask), conv.energy(x.reshape(-1, CHANNELS), edge_index, batch=batch)
    )


def test_dense_edge_weight_equals_sparse_edge_weight() -> None:
    conv = make_conv()
    x = tokens()
    generator = torch.Generator().manual_seed(3)
    weight = torch.rand(BATCH, HEADS, TOKENS, TOKENS, generator=generator, dtype=torch.float64)
    full = torch.ones(BATCH, TOKENS, TOKENS, dtype=torch.bool)
    edge_index = dense_to_union_graph(full)
    b, c, k = full.nonzero(as_tuple=True)
    keep = c != k
    sparse_weight = weight[b[keep], :, c[keep], k[keep]]  # [E, H]
    dense_out = conv.forward_dense(x, edge_weight=weight)
    sparse_out = conv(x.reshape(-1, CHANNELS), edge_index, sparse_weight)
    torch.testing.assert_close(dense_out.reshape(-1, CHANNELS), sparse_out)


def test_dense_grad_parts_sum_to_the_update_and_match_sparse_grad() -> None:
    conv = make_conv(steps=1).eval()
    x = tokens()
    mask = random_mask()
    attention, hopfield = conv.dense_attention_and_hopfield_grads(x, mask)
    step = conv.forward_dense(x, mask)
    torch.testing.assert_close(x - conv.alpha * (attention + hopfield), step)
    sparse_grad = conv.energy_grad(x.reshape(-1, CHANNELS), dense_to_union_graph(mask))
    torch.testing.assert_close((attention + hopfield).reshape(-1, CHANNELS), sparse_grad)


def test_dense_batch_items_are_independent() -> None:
    conv = make_conv()
    x = tokens()
    mask = random_mask()
    together = conv.forward_dense(x, mask)
    alone = torch.cat([conv.forward_dense(x[i : i + 1], mask[i : i + 1]) for i in range(BATCH)])
    torch.testing.assert_close(together, alone)


@pytest.mark.parametrize("use_mask", [False, True])
@pytest.mark.parametrize("hopfield", ["relu", "softmax"])
def test_energy_per_image_never_increases_for_small_alpha(use_mask: bool, hopfield: str) -> None:
    conv = make_conv(steps=40, alpha=0.01, hopfield=hopfield)
    x = 2.0 * tokens(seed=5)
    _, energies = conv.forward_dense(x, random_mask() if use_mask else None, return_energy=True)
    rises = energies[:, 1:] - energies[:, :-1]
    assert bool((rises <= 1e-10).all()), rises.max()
    assert bool((energies[:, -1] < energies[:, 0]).all())  # it actually descends


def test_energy_check_can_fail_on_ascent() -> None:
    """The monotonicity check above can fail: a step up the gradient climbs the energy."""
    conv = make_conv()
    x = 2.0 * tokens(seed=5)
    energies = [conv.dense_energy(x)]
    for _ in range(5):  # alpha must be positive, so the ascent is written out here
        attention, hopfield = conv.dense_attention_and_hopfield_grads(x)
        x = x + 0.01 * (attention + hopfield)
        energies.append(conv.dense_energy(x))
    energies = torch.stack(energies, dim=-1)
    assert bool(((energies[:, 1:] - energies[:, :-1]) > 0).any())


def test_bfloat16_input_is_computed_in_parameter_dtype_and_returned_as_bfloat16() -> None:
    conv = make_conv().float()
    x = tokens(dtype=torch.float32).to(torch.bfloat16)
    out, energies = conv.forward_dense(x, return_energy=True)
    assert out.dtype == torch.bfloat16
    assert energies.shape == (BATCH, conv.steps + 1)
    reference = conv.forward_dense(x.float())
    torch.testing.assert_close(out.float(), reference, atol=5e-2, rtol=2e-2)
    assert conv.dense_energy(x).dtype == torch.float32  # energies: the parameters' dtype


def test_float32_dense_matches_float64() -> None:
    conv = make_conv()
    x = tokens()
    out64 = conv.forward_dense(x)
    out32 = conv.float().forward_dense(x.float())
    torch.testing.assert_close(out32.double(), out64, atol=1e-4, rtol=1e-4)


def test_dense_path_is_differentiable() -> None:
    conv = make_conv()
    x = tokens().requires_grad_(True)
    conv.forward_dense(x, random_mask()).pow(2).sum().backward()
    assert x.grad is not None and bool(torch.isfinite(x.grad).all())
    assert conv.xi.grad is not None and conv.w_k.grad is not None


def test_dense_bad_inputs_raise_value_error() -> None:
    conv = make_conv()
    x = tokens()
    with pytest.raises(ValueError, match="dimensions"):
        conv.forward_dense(x[0])
    with pytest.raises(ValueError, match="channels"):
        conv.forward_dense(x[..., :-1])
    with pytest.raises(ValueError, match="bool"):
        conv.forward_dense(x, torch.ones(BATCH, TOKENS, TOKENS))
    with pytest.raises(ValueError, match="shape"):
        conv.forward_dense(x, torch.ones(BATCH, TOKENS, TOKENS + 1, dtype=torch.bool))
    bad = x.clone()
    bad[1, 2, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        conv.forward_dense(bad)


def test_the_node_mask_of_to_dense_batch_keeps_padding_out() -> None:
    """From a new-user audit: the README's forward_dense(x_dense, mask=None) on a padded batch
    let padding tokens take part (graph 0 moved by up to 4.69 against itself alone), and
    to_dense_batch's own [B, M] mask was refused as the wrong shape."""
    from torch_geometric.utils import to_dense_batch

    conv = make_conv(steps=2).double()
    x = torch.randn(7, CHANNELS, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    batch = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    x_dense, node_mask = to_dense_batch(x, batch)
    out = conv.forward_dense(x_dense, node_mask)
    alone = conv.forward_dense(x[:3].unsqueeze(0))
    assert torch.allclose(out[0, :3], alone[0], atol=1e-12)
    pairs = node_mask[:, :, None] & node_mask[:, None, :]
    assert torch.equal(out, conv.forward_dense(x_dense, pairs))
    # The energies, too, are those of the real tokens (a layer audit: each padding token added
    # the Hopfield term of g = LN(0); softmax memories even at initialisation).
    for hopfield in ("softmax", "relu"):
        conv = make_conv(steps=2, hopfield=hopfield).double()
        with torch.no_grad():
            conv.norm.delta.add_(0.3)  # relu's padding term vanished only while delta = 0
        alone_energy = conv.dense_energy(x[:3].unsqueeze(0))[0]
        assert torch.allclose(conv.dense_energy(x_dense, node_mask)[0], alone_energy)
        _, trace = conv.forward_dense(x_dense, node_mask, return_energy=True)
        _, alone_trace = conv.forward_dense(x[:3].unsqueeze(0), return_energy=True)
        assert torch.allclose(trace[0], alone_trace[0])
