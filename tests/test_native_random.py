"""The compiled generator for training noise and dropout (et_graph/csrc/random.cpp): Philox's
published answer, normals and dropout equal to a reference built from its raw words,
the right distribution, reproducible under torch.manual_seed, and used only when switched on."""

from __future__ import annotations

import math
import os
import shutil

import pytest
import torch
from helpers import record_calls, relative_error, torch_threads

import et_graph.native as native
from et_graph.nn import Dropout, ETConv
from et_graph.nn.models import ETGraphModel

# conftest.py: every test starts with the switch off; `built` is the compiled extension.
pytestmark = pytest.mark.usefixtures("native_switch_off")

MASK32 = 0xFFFFFFFF


def philox_reference(counter: int, key: int) -> list[int]:
    """Philox4x32-10 of the block (counter, 0, 0, 0) under a 64-bit key, in plain Python."""
    c = [counter & MASK32, (counter >> 32) & MASK32, 0, 0]
    k0, k1 = key & MASK32, (key >> 32) & MASK32
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k0) & MASK32, p1 & MASK32,
             ((p0 >> 32) ^ c[3] ^ k1) & MASK32, p0 & MASK32]
        k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
    return c


def planar_words(built, values: int, seed: int) -> torch.Tensor:
    """The word behind each of ``values`` outputs: block i's four words go to i, i + B, i + 2B,
    i + 3B (``B`` blocks)."""
    return built.philox_words(values // 4, seed).t().reshape(-1)


def test_philox_gives_the_published_answer_and_the_reference(built):
    # Random123's known-answer vector for philox4x32-10, counter 0 and key 0.
    assert built.philox_words(1, 0)[0].tolist() == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C,
                                                    0x9B00DBD8]
    seed = 0x0123456789ABCDEF
    words = built.philox_words(64, seed)
    assert words.tolist() == [philox_reference(i, seed) for i in range(64)]
    assert words.min() >= 0 and words.max() <= MASK32


def test_normals_are_the_inverse_cdf_of_the_words(built):
    seed, values = 987654321, 4 * 4096
    z = built.random_normal(values, seed, True)
    assert z.dtype == torch.float64 and z.shape == (values,)
    top = planar_words(built, values, seed) >> 8
    expected = math.sqrt(2) * torch.erfinv((2 * top + 1 - 2**24).double() / 2**24)
    # Giles' single-precision erfinv and the polynomial log: within 1e-6 of the exact value.
    assert (z - expected).abs().max() < 1e-6 * (1 + expected.abs()).max()
    # float32 draws the same values; a count that is not a multiple of 4 takes a prefix.
    assert torch.equal(built.random_normal(values, seed, False).double(), z)
    assert torch.equal(built.random_normal(values - 3, seed, True), z[:values - 3])


def test_normals_have_the_standard_normal_distribution(built):
    n = 1 << 20
    z = built.random_normal(n, 2024, True)
    assert abs(z.mean()) < 5 / math.sqrt(n) and abs(z.std() - 1) < 5 / math.sqrt(n)
    # Kolmogorov-Smirnov distance to the normal CDF (about 0.0009 expected for this n).
    ordered = z.sort().values
    cdf = 0.5 * (1 + torch.erf(ordered / math.sqrt(2)))
    ranks = torch.arange(1, n + 1, dtype=torch.float64) / n
    distance = torch.maximum((ranks - cdf).abs(), (cdf - (ranks - 1 / n)).abs()).max()
    assert distance < 2e-3
    # The tails are there, at their rates (P(|z| > 3) = 0.0027), and bounded by the 24 bits.
    assert abs((z.abs() > 3).double().mean() - 0.0027) < 3e-4
    assert z.abs().max() <= 5.43


@pytest.mark.parametrize("p", [0.07, 0.5, 0.9])
def test_dropout_factors_follow_the_words(built, p):
    seed, values = 77, 4 * 5000
    scale = built.dropout_scale(values, p, seed, False)
    kept = (planar_words(built, values, seed) >> 8) < round((1 - p) * 2**24)
    assert torch.equal(scale, torch.where(kept, torch.tensor(1 / (1 - p)), torch.tensor(0.0)))
    assert abs(kept.double().mean() - (1 - p)) < 4 * math.sqrt(p * (1 - p) / values)
    with pytest.raises(RuntimeError, match=r"p must lie in \[0, 1\)"):
        built.dropout_scale(4, 1.0, seed, False)


def test_draws_are_reproducible_under_manual_seed(built):
    x = torch.zeros(5, 7)
    torch.manual_seed(3)
    first, second = native.random_normal_like(x), native.random_normal_like(x)
    torch.manual_seed(3)
    assert torch.equal(native.random_normal_like(x), first)
    assert not torch.equal(first, second) and first.shape == x.shape
    torch.manual_seed(3)
    a = native.dropout(torch.ones(5, 7, dtype=torch.float64), 0.5)
    torch.manual_seed(3)
    assert torch.equal(native.dropout(torch.ones(5, 7, dtype=torch.float64), 0.5), a)
    assert a.dtype == torch.float64 and set(a.unique().tolist()) <= {0.0, 2.0}
    with pytest.raises(ValueError, match="float32 or float64"):
        native.random_normal_like(torch.zeros(3, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        native.dropout(x, 1.0)
    with pytest.raises(ValueError, match="runs on the CPU"):
        native.random_normal_like(torch.zeros(3, device="meta"))


def test_dropout_gradient_is_the_mask(built):
    x = torch.randn(6, 5, dtype=torch.float64, requires_grad=True)
    out = native.dropout(x, 0.3)
    (grad,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    assert torch.equal(grad * x.detach(), out.detach())  # the same factors, 0 or 1 / 0.7
    assert torch.autograd.gradcheck(lambda t: t * grad.detach(), (x,))


def test_noise_uses_the_compiled_generator_only_when_switched_on(built, monkeypatch):
    conv = ETConv(8, heads=2, head_dim=4, steps=3, noise_std=0.1).train()
    x = torch.randn(10, 8)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 8, 9]])
    calls = record_calls(monkeypatch, native, "random_normal_like")
    conv(x, edge_index)
    assert calls == []  # off: torch.randn_like
    with native.native_attention():
        torch.manual_seed(0)
        first = conv(x, edge_index)
        assert len(calls) == 3  # one draw per step
        torch.manual_seed(0)
        assert torch.equal(conv(x, edge_index), first)
        conv.eval()
        conv(x, edge_index)
        assert len(calls) == 6  # no noise in evaluation


def test_model_dropout_uses_the_compiled_generator_only_when_switched_on(built, monkeypatch):
    torch.manual_seed(0)
    model = ETGraphModel(3, 2, hidden_channels=8, blocks=1, steps=1, heads=2, head_dim=4,
                         pe_dim=0, dropout=0.3).train()
    x = torch.randn(9, 3)
    edge_index = torch.tensor([[0, 1, 2, 4, 5, 6, 7], [1, 2, 3, 5, 6, 7, 8]])
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 1])
    calls = record_calls(monkeypatch, native, "dropout")
    model(x, edge_index, batch)
    assert calls == []
    with native.native_attention():
        model(x, edge_index, batch)
        assert len(calls) == 2  # the tokens' dropout and the head's
        model.eval()
        model(x, edge_index, batch)
        assert len(calls) == 2


def test_anomaly_network_dropout_and_noise_use_the_generator_when_switched_on(built,
                                                                          monkeypatch):
    from et_graph.nn.models import ETAnomalyNet

    torch.manual_seed(0)
    net = ETAnomalyNet(5, 8, heads=2, head_dim=4, steps=2, noise_std=0.1, dropout=0.3).train()
    x = torch.randn(12, 5)
    edge_index = torch.randint(0, 12, (2, 40))
    dropouts = record_calls(monkeypatch, native, "dropout")
    normals = record_calls(monkeypatch, native, "random_normal_like")
    net(x, edge_index)
    assert dropouts == [] and normals == []
    with native.native_attention():
        net(x, edge_index)
    assert len(dropouts) == 1 and len(normals) == 2  # the readout's dropout, one draw a step



def test_kernels_with_pytorchs_generator_draw_as_the_default_path(built, monkeypatch):
    """``native_random(False)``: the kernels compute, PyTorch draws the noise and dropout, the
    same draws for a seed as without the kernels, so a float64 training step equals the
    default path's to rounding; with the compiled generator the draws differ."""
    torch.manual_seed(0)
    model = ETGraphModel(3, 2, hidden_channels=8, blocks=1, steps=2, heads=2, head_dim=4,
                         pe_dim=0, dropout=0.3, noise_std=0.1).double().train()
    x = torch.randn(9, 3, dtype=torch.float64)
    edge_index = torch.tensor([[0, 1, 2, 4, 5, 6, 7], [1, 2, 3, 5, 6, 7, 8]])
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 1])

    def step() -> torch.Tensor:
        torch.manual_seed(7)
        return model(x, edge_index, batch)

    default = step()
    dropouts = record_calls(monkeypatch, native, "dropout")
    normals = record_calls(monkeypatch, native, "random_normal_like")
    with native.native_attention(), native.native_random(False):
        assert native.native_attention_enabled() and not native.native_random_enabled()
        kernels_torch_draws = step()
    assert dropouts == normals == [] and native.native_random_enabled()  # restored
    assert relative_error(kernels_torch_draws, default) < 1e-10
    with native.native_attention():
        assert relative_error(step(), default) > 1e-3
    with pytest.raises(TypeError, match="bool"):
        native.set_native_random(1)

def test_dropout_module_is_torch_dropout_when_off(built):
    x = torch.randn(20, 6)
    torch.manual_seed(5)
    ours = Dropout(0.4)(x)
    torch.manual_seed(5)
    assert torch.equal(ours, torch.nn.Dropout(0.4)(x))
    with native.native_attention():
        assert torch.equal(Dropout(0.0)(x), x) and torch.equal(Dropout(0.4).eval()(x), x)
        assert torch.equal(Dropout(1.0)(x), torch.zeros_like(x))
        inplace = x.clone()
        Dropout(0.4, inplace=True)(inplace)  # torch's own in-place route
        assert ((inplace == 0) | torch.isclose(inplace, x / 0.6)).all()


def test_random_benchmark_times_both_generators(built, tmp_path, capsys):
    from helpers import benchmark_module

    bench = benchmark_module("bench_random")
    with torch_threads():
        result = bench.main(["--tokens", "50", "--repeats", "1", "--inner", "2",
                             "--json", str(tmp_path / "r.json")])
    assert set(result["microseconds"]) == {"normal_torch", "normal_native", "dropout_torch",
                                           "dropout_native"}
    assert all(v > 0 for v in result["native_over_torch"].values())
    assert "| normals (noise) |" in capsys.readouterr().out
    assert (tmp_path / "r.json").stat().st_size > 0


@pytest.fixture(scope="module")
def baseline_build(built):
    """The same sources built without the per-CPU clones (-DET_NO_CLONES: what a CPU without
    AVX2 runs, which this machine's ifunc never picks) and without an OpenMP runtime
    (-fopenmp-simd, no link flag: the build off Linux, whose at::parallel_for runs one
    thread)."""
    from torch.utils.cpp_extension import load, verify_ninja_availability

    # Skipped only where the tools are missing (as `built` is, whose build needs the same
    # compiler and ninja); a build that fails with them present is a bug of the sources or
    # flags and must fail, not pass as a skip.
    compiler = os.environ.get("CXX", "c++")  # torch's choice
    if shutil.which((compiler.split() or [""])[0]) is None:
        pytest.skip(f"no C++ compiler ({compiler!r}) for the baseline build")
    try:
        verify_ninja_availability()
    except RuntimeError as error:
        pytest.skip(f"no ninja for the baseline build ({error})")
    flags = ["-fopenmp-simd" if flag == "-fopenmp" else flag for flag in native.COMPILE_FLAGS]
    return load(name=f"{native.extension_name()}_baseline",
                sources=[str(path) for path in native.SOURCES],
                extra_cflags=[*flags, "-DET_NO_CLONES"], verbose=False)


def attention_step(build, inputs: tuple, up: torch.Tensor) -> list[torch.Tensor]:
    """A build's attention gradient, probabilities and first-order backward (both upstream
    gradients ``up``)."""
    grad_k, grad_q, probs, scores = build.forward(*inputs)
    backward = build.backward(*inputs, probs, scores, up, up, False)
    return [grad_k, grad_q, probs, *backward[:3]]


def test_the_baseline_build_runs_one_thread_with_the_same_attention(built, baseline_build):
    """Without OpenMP the loops run on one thread whatever torch's count, and give the same
    attention gradient and backward as this build on two threads (float64: the same bits,
    float32: within the exponential's last bits)."""
    from et_graph.fused import build_edge_plan

    with torch_threads(2):
        assert baseline_build.threads_used() == 1
        generator = torch.Generator().manual_seed(3)
        src = torch.randint(0, 600, (5000,), generator=generator)
        dst = torch.randint(0, 600, (5000,), generator=generator)
        keep = src != dst
        plan = build_edge_plan(src[keep], dst[keep], 600, 4)
        for dtype, tolerance in ((torch.float64, 0.0), (torch.float32, 1e-5)):
            k, q, up = (torch.randn(600, 4, 8, generator=generator, dtype=dtype)
                        for _ in range(3))
            beta = torch.rand(4, generator=generator, dtype=dtype) + 0.5
            inputs = native.kernel_inputs(k, q, beta, None, plan)
            fast, plain = (attention_step(build, inputs, up) for build in (built, baseline_build))
            for a, b in zip(fast, plain):
                assert (a - b).abs().max() <= tolerance * a.abs().max()


def test_the_baseline_build_gives_the_same_draws_and_gradients(built, baseline_build):
    for seed in (0, 2**62 + 12345):
        fast, plain = built.random_normal(4099, seed, True), baseline_build.random_normal(
            4099, seed, True)
        # the same words; only the erfinv's rounding (FMA contraction) may differ
        assert (fast - plain).abs().max() < 1e-6
        for p in (0.07, 0.5):
            assert torch.equal(built.dropout_scale(4099, p, seed, False),
                               baseline_build.dropout_scale(4099, p, seed, False))
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(30, 8, dtype=torch.float64, generator=generator)
    batch = torch.repeat_interleave(torch.arange(3), torch.tensor([12, 10, 8]))
    ptr = torch.tensor([0, 12, 22, 30])
    src = torch.randint(0, 30, (90,), generator=generator)
    dst = torch.randint(0, 30, (90,), generator=generator)
    grad = torch.randn(90, 9, dtype=torch.float64, generator=generator)
    fast = built.gram_entries_backward(x, src, dst, batch, ptr, 1, grad)
    plain = baseline_build.gram_entries_backward(x, src, dst, batch, ptr, 1, grad)
    assert (fast - plain).abs().max() < 1e-12 * fast.abs().max()
