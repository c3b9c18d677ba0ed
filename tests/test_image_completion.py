"""Masked image completion on ETConv's dense path: model, data, protocol, example."""
from __future__ import annotations

import copy
import json
import runpy
import sys
from pathlib import Path

import pytest
import torch

from et_graph.datasets.images import load_digits_images, load_image_folder, split_images
from et_graph.exceptions import ConfigWarning
from et_graph.nn.models.image_completion import (
    ETImageCompletion,
    masked_patch_count,
    patchify,
    random_patch_mask,
    unpatchify,
)
from et_graph.protocols.image_completion import (
    VALIDATION_SEED,
    ImageTrainConfig,
    energy_is_monotone,
    evaluate_image_completion,
    masked_mse,
    mean_patch_baseline,
    nearest_open_baseline,
    predict_patches,
    trace_dynamics,
    train_image_completion,
    validation_split,
)

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "image_completion.py"
PNG_FILES = ("completion_grid.png", "energy.png", "update_norms.png", "memories.png",
             "position_similarity.png", "training_loss.png")


@pytest.fixture(scope="module")
def digits() -> torch.Tensor:
    return load_digits_images()


def small_model(**kwargs) -> ETImageCompletion:
    torch.manual_seed(0)
    options = dict(dim=16, heads=2, head_dim=4, steps=3)
    options.update(kwargs)
    return ETImageCompletion(**options)


# ----------------------------------------------------------------------------------------------
# Patches and masks
# ----------------------------------------------------------------------------------------------
def test_patchify_round_trip_and_layout() -> None:
    images = torch.arange(2 * 3 * 4 * 6, dtype=torch.float32).reshape(2, 3, 4, 6)
    patches = patchify(images, 2)
    assert patches.shape == (2, 6, 12)
    # Patch 1 is grid row 0, column 1: pixels rows 0-1, columns 2-3 of every channel.
    torch.testing.assert_close(patches[0, 1], images[0, :, 0:2, 2:4].reshape(-1))
    torch.testing.assert_close(unpatchify(patches, 2, (4, 6), 3), images)


def test_random_patch_mask_masks_the_same_count_in_every_image() -> None:
    mask = random_patch_mask(50, 16, 0.3, torch.Generator().manual_seed(0))
    assert mask.dtype == torch.bool and mask.shape == (50, 16)
    assert bool((mask.sum(1) == 5).all())
    assert masked_patch_count(4, 0.01) == 1 and masked_patch_count(4, 0.99) == 3
    assert not torch.equal(mask[0], mask[1]) or not torch.equal(mask[1], mask[2])


# ----------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------
def test_model_runs_the_conv_dense_path_and_reports_energy_per_image(digits) -> None:
    model = small_model().eval()
    images = digits[:5]
    mask = model.random_mask(5, generator=torch.Generator().manual_seed(1))
    prediction, energies = model(images, mask, return_energy=True)
    assert prediction.shape == (5, 16, 4)
    assert energies.shape == (5, model.conv.steps + 1)
    # The model is the image plumbing around ETConv.forward_dense, nothing else.
    expected = model.decode(model.conv.forward_dense(model.encode(images, mask)))
    torch.testing.assert_close(prediction, expected)
    torch.testing.assert_close(energies[:, 0], model.conv.dense_energy(model.encode(images, mask)))


def test_masked_pixels_do_not_leak_into_the_prediction(digits) -> None:
    model = small_model().eval()
    images = digits[:4].clone()
    mask = model.random_mask(4, generator=torch.Generator().manual_seed(2))
    before = model(images, mask)
    patches = patchify(images, 2)
    patches[mask] = torch.rand_like(patches[mask])
    after = model(unpatchify(patches, 2, 8, 1), mask)
    torch.testing.assert_close(before, after)
    # ... whereas the open pixels do matter.
    patches[~mask] = torch.rand_like(patches[~mask])
    assert not torch.allclose(before, model(unpatchify(patches, 2, 8, 1), mask))


def test_loss_is_mse_on_masked_patches_only(digits) -> None:
    model = small_model()
    images = digits[:6]
    mask = model.random_mask(6, generator=torch.Generator().manual_seed(3))
    loss = model.loss(images, mask)
    target = patchify(images, 2)
    prediction = model(images, mask)
    torch.testing.assert_close(loss, (prediction - target).pow(2)[mask].mean())
    loss.backward()
    assert model.mask_token.grad is not None and model.conv.xi.grad is not None


def test_complete_keeps_open_patches(digits) -> None:
    model = small_model().eval()
    images = digits[:3]
    mask = model.random_mask(3, generator=torch.Generator().manual_seed(4))
    completed = patchify(model.complete(images, mask), 2)
    torch.testing.assert_close(completed[~mask], patchify(images, 2)[~mask])


def test_bfloat16_images_are_accepted(digits) -> None:
    model = small_model().eval()
    mask = model.random_mask(4, generator=torch.Generator().manual_seed(5))
    out = model(digits[:4].to(torch.bfloat16), mask)
    reference = model(digits[:4], mask)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, reference, atol=5e-2, rtol=5e-2)


def test_rgb_model_with_rectangular_images() -> None:
    model = small_model(image_size=(8, 12), patch_size=(4, 2), channels=3).eval()
    images = torch.rand(5, 3, 8, 12)
    mask = model.random_mask(5)
    assert model.num_patches == 12 and model(images, mask).shape == (5, 12, 24)
    assert model.decoded_memories().shape == (model.conv.hopfield_dim, 3, 4, 2)
    mse = evaluate_image_completion(model, images, images, mask)
    assert set(mse) == {"et", "mean_patch", "mean_patch_global", "nearest_open"}


def test_the_completion_grid_draws_every_baseline_of_the_table(digits, tmp_path,
                                                                  monkeypatch) -> None:
    """The grid left out mean_patch_global, which the results table holds (a plots audit)."""
    import matplotlib.figure
    from helpers import record_arguments

    from et_graph.reporting_images import write_figures

    saved = record_arguments(monkeypatch, matplotlib.figure.Figure, "savefig")
    model = small_model().eval()
    images = digits[:4]
    mask = model.random_mask(4, generator=torch.Generator().manual_seed(1))
    trace = trace_dynamics(model, images, mask)
    write_figures(tmp_path, model, images, mask, trace, [{"epoch": 0, "train_loss": 1.0,
                                                          "val_score": -0.5}], 0,
                  train_images=digits[8:40])
    grid = next(args[0] for args, _ in saved if "completion_grid" in str(args[1]))
    rows = [label.get_text() for label in grid.axes[0].get_yticklabels()]
    assert rows == ["masked", "ET", "mean patch", "global mean", "nearest open", "original"]


def test_trace_follows_the_model_and_splits_the_update(digits) -> None:
    model = small_model(steps=4).eval()
    images = digits[:8]
    mask = model.random_mask(8, generator=torch.Generator().manual_seed(6))
    trace = trace_dynamics(model, images, mask)
    assert model.conv.steps == 4  # untouched: each step is a forward_dense(..., steps=1) call
    assert trace["energies"].shape == (8, 5)
    _, energies = model(images, mask, return_energy=True)
    torch.testing.assert_close(trace["energies"], energies)
    torch.testing.assert_close(
        model.decode(trace["tokens"][-1]), model(images, mask), atol=1e-5, rtol=1e-5
    )
    for key in ("att_masked", "att_open", "hn_masked", "hn_open"):
        assert trace["norms"][key].shape == (4,) and bool((trace["norms"][key] > 0).all())
    assert trace["memory_usage"].shape == (model.conv.hopfield_dim,)


def test_model_energy_per_image_never_increases_for_small_alpha(digits) -> None:
    model = small_model(steps=10, alpha=0.02).eval()
    mask = model.random_mask(16, generator=torch.Generator().manual_seed(8))
    _, energies = model(digits[:16], mask, return_energy=True)
    assert energy_is_monotone(energies, tolerance=0.0)
    assert bool((energies[:, -1] < energies[:, 0]).all())


def test_energy_monotone_check() -> None:
    assert energy_is_monotone(torch.tensor([[3.0, 2.0, 2.0, 1.0]]))
    assert not energy_is_monotone(torch.tensor([[3.0, 2.0, 2.5, 1.0]]))


# ----------------------------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------------------------
def test_image_size_not_divisible_by_patch_size_raises() -> None:
    with pytest.raises(ValueError, match="not divisible"):
        ETImageCompletion(image_size=9, patch_size=2)
    with pytest.raises(ValueError, match="not divisible"):
        patchify(torch.rand(1, 1, 7, 8), 2)
    model = small_model()
    with pytest.raises(ValueError, match="built for 8x8"):
        model(torch.rand(1, 1, 12, 12), torch.zeros(1, 16, dtype=torch.bool))


@pytest.mark.parametrize("ratio", [0.0, 1.0, -0.2, 1.5, float("nan")])
def test_mask_ratio_outside_open_interval_raises(ratio: float) -> None:
    with pytest.raises(ValueError, match="mask_ratio"):
        ETImageCompletion(mask_ratio=ratio)
    with pytest.raises(ValueError, match="mask_ratio"):
        random_patch_mask(2, 16, ratio)
    with pytest.raises(ValueError, match="mask_ratio"):
        small_model().random_mask(2, mask_ratio=ratio)


def test_channel_mismatch_raises(digits) -> None:
    model = small_model(channels=3)
    with pytest.raises(ValueError, match="channels"):
        model(digits[:2], model.random_mask(2))
    with pytest.raises(ValueError, match="channels"):
        train_image_completion(model, digits[:8], ImageTrainConfig(epochs=1), progress=False)


def test_other_bad_images_and_masks_raise(digits) -> None:
    model = small_model()
    mask = model.random_mask(2)
    bad = digits[:2].clone()
    bad[0, 0, 3, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        model(bad, mask)
    with pytest.raises(ValueError, match=r"\[B, C, H, W\]"):
        model(digits[0], mask)
    with pytest.raises(ValueError, match="floating"):
        model((digits[:2] * 16).long(), mask)
    with pytest.raises(ValueError, match="bool"):
        model(digits[:2], mask.float())
    with pytest.raises(ValueError, match="shape"):
        model(digits[:2], mask[:, :-1])


# ----------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------
def test_digits_are_8x8_in_unit_range(digits) -> None:
    assert digits.shape == (1797, 1, 8, 8) and digits.dtype == torch.float32
    assert float(digits.min()) == 0.0 and float(digits.max()) == 1.0


def test_split_is_disjoint_and_seeded(digits) -> None:
    train, test = split_images(digits[:100], 0.25, seed=3)
    assert train.shape[0] == 75 and test.shape[0] == 25
    again, _ = split_images(digits[:100], 0.25, seed=3)
    torch.testing.assert_close(train, again)
    flat_train = {tuple(t.flatten().tolist()) for t in train}
    assert not any(tuple(t.flatten().tolist()) in flat_train for t in test)


def test_image_folder_loader(tmp_path) -> None:
    from PIL import Image

    nested = tmp_path / "sub"
    nested.mkdir()
    Image.new("RGB", (10, 6), (255, 0, 0)).save(tmp_path / "a.png")
    Image.new("L", (5, 5), 128).save(nested / "b.jpg")
    (tmp_path / "notes.txt").write_text("not an image", encoding="utf-8")
    grey = load_image_folder(tmp_path, size=8)
    assert grey.shape == (2, 1, 8, 8) and grey.dtype == torch.float32
    assert 0.0 <= float(grey.min()) and float(grey.max()) <= 1.0
    rgb = load_image_folder(tmp_path, size=(4, 6), color="rgb")
    assert rgb.shape == (2, 3, 4, 6)
    torch.testing.assert_close(rgb[0, :, 0, 0], torch.tensor([1.0, 0.0, 0.0]))
    model = small_model(image_size=(4, 6), channels=3)
    assert model(rgb, model.random_mask(2)).shape == (2, 6, 12)


def test_sixteen_bit_and_transparent_images_and_bare_extensions(tmp_path) -> None:
    """A 16-bit grey PNG at half scale once loaded as 1.0 everywhere (convert("L") clips);
    transparency is named in a warning; "png" without its dot matched nothing."""
    import numpy as np
    from PIL import Image

    half = np.full((6, 6), 32768, dtype=np.uint16)
    Image.fromarray(half).save(tmp_path / "deep.png")
    grey = load_image_folder(tmp_path, size=6)
    torch.testing.assert_close(grey, torch.full((1, 1, 6, 6), 32768 / 65535))
    rgb = load_image_folder(tmp_path, size=6, color="rgb")
    assert rgb.shape == (1, 3, 6, 6)
    torch.testing.assert_close(rgb[0, 1], grey[0, 0])
    assert load_image_folder(tmp_path, size=6, extensions=("png",)).shape == (1, 1, 6, 6)
    Image.new("RGBA", (6, 6), (255, 255, 255, 0)).save(tmp_path / "clear.png")
    with pytest.warns(UserWarning, match="transparent pixels"):
        load_image_folder(tmp_path, size=6)
    with pytest.raises(ValueError, match="empty batch"):
        small_model()(torch.zeros(0, 1, 4, 4), torch.zeros(0, 4, dtype=torch.bool))


def test_image_folder_loader_errors(tmp_path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        load_image_folder(tmp_path / "missing")
    with pytest.raises(ValueError, match="no images"):
        load_image_folder(tmp_path)
    (tmp_path / "broken.png").write_bytes(b"not a png")
    with pytest.raises(ValueError, match="could not read"):
        load_image_folder(tmp_path)
    with pytest.raises(ValueError, match="color"):
        load_image_folder(tmp_path, color="cmyk")


# ----------------------------------------------------------------------------------------------
# Baselines and protocol
# ----------------------------------------------------------------------------------------------
def test_baselines_on_a_hand_made_image() -> None:
    image = torch.zeros(1, 1, 4, 4)
    image[0, 0, :2, :2] = 1.0  # patch 0 (top left) is white, the rest black
    mask = torch.tensor([[False, True, True, True]])
    filled = nearest_open_baseline(image, mask, 2, (2, 2))
    # Patches 1 and 2 touch patch 0; patch 3 is diagonal but patch 0 is still the only open one.
    torch.testing.assert_close(filled, torch.ones(1, 4, 4))
    mask = torch.tensor([[False, True, False, True]])  # open: 0 (white) and 2 (black)
    filled = nearest_open_baseline(image, mask, 2, (2, 2))
    torch.testing.assert_close(filled[0, 3], torch.full((4,), 0.0))  # nearest open is patch 2
    torch.testing.assert_close(filled[0, 1], torch.full((4,), 1.0))  # nearest open is patch 0
    row = torch.tensor([[[[0.0, 0.0, 5.0, 5.0, 1.0, 1.0]] * 2]])  # three patches in a row
    filled = nearest_open_baseline(row, torch.tensor([[False, True, False]]), 2, (1, 3))
    torch.testing.assert_close(filled[0, 1], torch.full((4,), 0.5))  # a tie is averaged
    train = torch.stack([image[0], 1 - image[0]])
    mean = mean_patch_baseline(train, image, 2)
    torch.testing.assert_close(mean, torch.full((1, 4, 4), 0.5))
    assert masked_mse(mean, patchify(image, 2), mask) == pytest.approx(0.25)


def test_resume_refuses_a_checkpoint_trained_on_other_images(digits, tmp_path) -> None:
    """Other images under the same settings (another folder's files at the same path) are
    refused, not resumed; the same images resume."""
    from et_graph.training import CheckpointConfig

    def fit(images, resume):
        torch.manual_seed(0)
        return train_image_completion(small_model(), images, ImageTrainConfig(epochs=1),
                                      progress=False,
                                      checkpoint=CheckpointConfig(str(tmp_path), resume=resume))

    first = fit(digits[:16], resume=False)
    assert fit(digits[:16], resume=True).best_epoch == first.best_epoch
    with pytest.raises(ValueError, match="another configuration"):
        fit(1.0 - digits[:16], resume=True)


def test_short_training_beats_the_mean_patch_baseline(digits) -> None:
    """Seconds of training must beat the training-set mean patch at each grid position on
    held-out digits (the stronger of the two mean-patch baselines). 4x4 patches (4 tokens) and
    3 steps keep it short; the full example uses 2x2 patches and 12 steps."""
    train, test = split_images(digits, 0.2, seed=0)
    train = train[:800]
    model = small_model(
        patch_size=4, dim=32, heads=4, head_dim=8, hopfield_dim=64, steps=3
    )
    config = ImageTrainConfig(epochs=8, batch_size=32, lr=5e-3)
    fit = train_image_completion(model, train, config, progress=False)
    mask = model.random_mask(test.size(0), generator=torch.Generator().manual_seed(7))
    mse = evaluate_image_completion(model, train, test, mask)
    assert mse["et"] < mse["mean_patch"], mse
    assert mse["mean_patch"] < mse["mean_patch_global"]
    # The engine kept the epoch with the lowest validation MSE, and the model holds it: its
    # masked MSE on the validation images (the fixed seeded mask) is the recorded best.
    val_mse = [-row["val_score"] for row in fit.history]
    assert fit.epochs_run == 8 and fit.best_epoch == min(range(8), key=val_mse.__getitem__)
    _, val = validation_split(train, 0.1, seed=0)
    val_mask = model.random_mask(
        val.size(0), generator=torch.Generator().manual_seed(VALIDATION_SEED)
    )
    again = masked_mse(predict_patches(model, val, val_mask), patchify(val, 4), val_mask)
    assert again == pytest.approx(fit.best.loss, rel=1e-5) and fit.best.score == -fit.best.loss


def test_training_seeds_its_noise_and_gives_the_caller_its_random_state(digits) -> None:
    """``seed`` did not reach the descent noise, drawn from the process's generator: two
    trainings of one model with one seed differed, and each moved the caller's random stream
    (the other tasks' trainings seed every generator and give the caller's states back)."""
    model = small_model(noise_std=0.1)
    twin = copy.deepcopy(model)
    config = ImageTrainConfig(epochs=2, batch_size=16)
    caller = torch.get_rng_state()
    first = train_image_completion(model, digits[:48], config, seed=3, progress=False)
    assert torch.equal(torch.get_rng_state(), caller)
    torch.rand(5)  # the caller's program draws on between the two calls
    second = train_image_completion(twin, digits[:48], config, seed=3, progress=False)
    assert [row["train_loss"] for row in first.history] == \
        [row["train_loss"] for row in second.history]
    for name, value in model.state_dict().items():
        assert torch.equal(value, twin.state_dict()[name]), name


def test_validation_part_is_a_seeded_subset_of_the_training_images(digits) -> None:
    train = digits[:100]
    fit_part, val = validation_split(train, 0.1, seed=3)
    again_fit, again_val = validation_split(train, 0.1, seed=3)
    assert torch.equal(val, again_val) and torch.equal(fit_part, again_fit)
    assert val.size(0) == 10 and fit_part.size(0) == 90
    assert not torch.equal(val, validation_split(train, 0.1, seed=4)[1])
    with pytest.raises(ValueError, match="val_fraction"):
        validation_split(train, 0.0)
    with pytest.raises(ValueError, match="batch_size"):
        ImageTrainConfig(batch_size=0)


# ----------------------------------------------------------------------------------------------
# Example (quick mode) and CLI
# ----------------------------------------------------------------------------------------------
def test_example_quick_mode_writes_results_and_valid_pngs(tmp_path, monkeypatch) -> None:
    from PIL import Image

    monkeypatch.setattr(
        sys, "argv", [str(EXAMPLE), "--quick", "--no-progress", "--out", str(tmp_path)]
    )
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert set(results["mse"]) >= {"et", "mean_patch", "nearest_open"}
    # said, for et-graph compare: it read a higher MSE as better (every verdict backwards)
    assert results["metric"] == "mse" and results["lower_is_better"] is True
    assert isinstance(results["energy_monotone"], bool)
    assert results["seeds"] == [0, 1] and len(results["per_seed"]) == 2
    assert results["meta"]["config"]["train"]["epochs"] == 2
    assert all(0 <= r["best_epoch"] < 2 for r in results["per_seed"])
    assert (tmp_path / "results.md").exists()
    # ET minus each baseline, paired over the seeds' own splits (an audit: et-graph compare
    # took them as seeds on one test set, the wrong test, and says so now)
    differences = {d["second"]: d for d in results["differences"]}
    assert set(differences) == {"mean_patch", "mean_patch_global", "nearest_open"}
    mean_patch = [r["mse"]["et"] - r["mse"]["mean_patch"] for r in results["per_seed"]]
    assert differences["mean_patch"]["mean"] == pytest.approx(sum(mean_patch) / 2)
    assert differences["mean_patch"]["design"] == "folds"
    assert differences["mean_patch"]["test_train_ratio"] == pytest.approx(0.25)
    assert "corrected resampled t-test" in (tmp_path / "results.md").read_text(encoding="utf-8")
    from et_graph.compare_cli import compare

    with pytest.raises(ValueError, match="draw their own splits"):
        compare([str(tmp_path / "results.json")])
    for name in PNG_FILES:
        path = tmp_path / name
        assert path.exists() and path.stat().st_size > 0, name
        with Image.open(path) as image:
            image.verify()
        with Image.open(path) as image:
            assert image.format == "PNG" and min(image.size) > 50
    # the training-loss figure's numbers beside it, tied to the run (an output audit)
    drawn = json.loads((tmp_path / "training_loss.json").read_text(encoding="utf-8"))
    assert drawn["run_id"] == results["meta"]["run_id"] and drawn["seed"] == results["seeds"][0]
    assert [row["epoch"] for row in drawn["history"]] == list(range(len(drawn["history"])))
    assert drawn["best_epoch"] == results["per_seed"][0]["best_epoch"]


def test_image_config_flags_quick_and_preset() -> None:
    from et_graph.config import load_file, merge, parse
    from et_graph.experiments.image_completion import CONFIG

    config = parse(CONFIG, ["--quick", "--patch-size", "4", "--seeds", "3", "--no-progress"])
    assert config.model.patch_size == 4 and config.data.data == "digits"
    assert config.protocol.seeds == 3 and config.seed_list == [0, 1, 2]  # the flag wins
    assert config.train.epochs == 2 and config.data.train_limit == 200 and not config.run.progress
    preset = merge(CONFIG(), load_file(EXAMPLE.parents[1] / "configs" / "image" / "digits.toml"))
    assert preset == CONFIG()  # the documented run is the defaults
    # a negative limit would slice images away ([:-5]), a zero one leave nothing to score
    for flag, value in (("--train-limit", "-5"), ("--test-limit", "0")):
        with pytest.raises(ValueError, match="must be positive"):
            parse(CONFIG, [flag, value])


def test_the_protocol_states_the_masked_count_a_ratio_rounds_to(tmp_path) -> None:
    """From an audit: --mask-ratio 0.01 masks 1 of 16 patches (6%) and was reported as 1%."""
    from et_graph.config import parse
    from et_graph.experiments.image_completion import CONFIG, run

    base = ["--quick", "--seeds", "1", "--epochs", "1", "--train-limit", "40", "--test-limit",
            "10", "--no-progress"]
    results = run(parse(CONFIG, [*base, "--mask-ratio", "0.01", "--out", str(tmp_path / "a")]))
    assert "1 of 16 patches masked (6%; --mask-ratio 0.01 rounds to it)" in results["protocol"]
    assert results["per_seed"][0]["masked_patches"] == 1
    # the limits are said in the protocol (it read as the whole 80%/20% split), and the table
    # names the code and the machine like the other runners'
    assert "this run limits the images to 40 training and 10 test" in results["protocol"]
    assert "commit" in (tmp_path / "a" / "results.md").read_text(encoding="utf-8")
    results = run(parse(CONFIG, [*base, "--mask-ratio", "0.5", "--out", str(tmp_path / "b")]))
    assert "50% of patches masked at random" in results["protocol"]
    # A limit above a split's size cuts nothing, and the protocol said it did (an audit).
    wide = run(parse(CONFIG, [*base[:5], "--train-limit", "100000", "--test-limit", "100000",
                              "--no-progress", "--out", str(tmp_path / "c")]))
    assert "limits the images" not in wide["protocol"]
    # The digits are 8x8 grayscale whatever --image-size and --color say: named (an audit).
    with pytest.warns(ConfigWarning, match="image_size=16, color=rgb: the digits are 8x8"):
        from et_graph.experiments.image_completion import load_images

        load_images(parse(CONFIG, ["--image-size", "16", "--color", "rgb"]).data)
    with pytest.raises(ValueError, match="1 training image: .*raise --train-limit"):
        # it said "need at least 2 images to split"
        run(parse(CONFIG, [*base, "--train-limit", "1", "--out", str(tmp_path / "c")]))


@pytest.mark.skipif(not hasattr(torch.compiler, "is_exporting"),
                    reason="torch < 2.6 cannot tell the layers that it is exporting")
def test_the_dense_model_exports_with_a_dynamic_batch() -> None:
    """torch.export of ETImageCompletion failed only on the input checks that read values (a
    guard on an unbacked symbol); they are skipped while exporting, as under torch.func."""
    from et_graph.nn.models import ETImageCompletion

    torch.manual_seed(0)
    model = ETImageCompletion(image_size=8, patch_size=2, dim=16, heads=2, head_dim=8,
                              steps=2).eval()
    images = torch.rand(2, 1, 8, 8)
    mask = model.random_mask(2, generator=torch.Generator().manual_seed(0))
    batch = torch.export.Dim("batch")
    exported = torch.export.export(model, (images, mask), strict=False,
                                   dynamic_shapes=({0: batch}, {0: batch})).module()
    more = torch.rand(5, 1, 8, 8)
    more_mask = model.random_mask(5, generator=torch.Generator().manual_seed(1))
    assert torch.equal(exported(more, more_mask), model(more, more_mask))
    with pytest.raises(ValueError, match="NaN"):  # the eager model still checks
        model(torch.full_like(images, float("nan")), mask)


def test_the_grid_marks_masked_patches_in_a_colour_no_pixel_has() -> None:
    """Masked patches were drawn mid-grey, like the digits' own grey pixels."""
    from et_graph.nn.models import ETImageCompletion
    from et_graph.reporting_images import _marked_rgb, _masked_view

    model = ETImageCompletion(image_size=8, patch_size=2, dim=8, heads=1, head_dim=4)
    images = torch.rand(2, 1, 8, 8)
    mask = model.random_mask(2, generator=torch.Generator().manual_seed(0))
    rgb = _marked_rgb(_masked_view(model, images, mask)[0])
    hidden = model.unpatchify(mask.unsqueeze(-1).expand(-1, -1, 4).float())[0, 0].bool()
    assert rgb.shape == (3, 8, 8)
    grey = (rgb[0] == rgb[1]) & (rgb[1] == rgb[2])
    assert bool((~grey[hidden]).all()) and bool(grey[~hidden].all())


def test_the_image_task_takes_the_descent_noise_as_every_task_does():
    # (engine audit) --noise-std existed in the four other tasks; image had no way to set it
    from et_graph.config import parse
    from et_graph.experiments.image_completion import CONFIG, build_model

    config = parse(CONFIG, ["--noise-std", "0.1", "--dim", "8", "--heads", "1"])
    model = build_model(config.model, torch.zeros(2, 1, 4, 4))
    assert model.conv.noise_std == 0.1
    with pytest.raises(ValueError, match="noise_std"):
        build_model(parse(CONFIG, ["--noise-std", "-1"]).model, torch.zeros(2, 1, 4, 4))


def test_silently_wrong_image_inputs_are_refused_or_named(tmp_path) -> None:
    """From an image-path audit: each of these gave a wrong number or image without a word."""
    import numpy as np
    from PIL import Image

    from et_graph.protocols.image_completion import masked_mse

    prediction, target = torch.zeros(2, 4, 3), torch.ones(2, 4, 3)
    mask = torch.tensor([[True, False, False, False], [False, True, True, False]])
    assert masked_mse(prediction, target, mask) == 1.0
    with pytest.raises(ValueError, match="must be a bool tensor"):  # indexed the batch
        masked_mse(prediction, target, mask.long())
    image = torch.arange(16.0).view(1, 1, 4, 4)
    with pytest.raises(ValueError, match="every patch masked"):  # averaged the hidden patches
        nearest_open_baseline(image, torch.ones(1, 4, dtype=torch.bool), 2, (2, 2))
    model = small_model()
    with pytest.raises(ValueError, match="masks no patch"):  # returned 0
        model.loss(torch.rand(2, 1, 8, 8), torch.zeros_like(model.random_mask(2)))
    # the loader: a camera's rotation, stretched shapes, animations, 8-bit values in mode I
    rotated = Image.new("L", (16, 8), 200)
    exif = rotated.getexif()
    exif[0x0112] = 6  # "rotate 90 degrees clockwise"
    rotated.save(tmp_path / "photo.jpg", exif=exif)
    with pytest.warns(UserWarning, match="1 of 1 image"):  # 8x16 after the turn, not 8x8
        load_image_folder(tmp_path, size=8)
    assert load_image_folder(tmp_path, size=(16, 8)).shape == (1, 1, 16, 8)  # no warning
    (tmp_path / "photo.jpg").unlink()
    frames = [Image.new("L", (8, 8), value) for value in (0, 255)]
    frames[0].save(tmp_path / "anim.gif", save_all=True, append_images=frames[1:])
    with pytest.warns(UserWarning, match="several frames"):
        load_image_folder(tmp_path, size=8)
    (tmp_path / "anim.gif").unlink()
    Image.fromarray(np.full((8, 8), 200, dtype=np.int32), mode="I").save(tmp_path / "wide.tif")
    with pytest.warns(UserWarning, match="mode I.*largest value is 200"):
        load_image_folder(tmp_path, size=8)
    # arguments: a negative limit dropped the last image, a bare string read letter by letter
    with pytest.raises(ValueError, match="limit must be a positive"):
        load_image_folder(tmp_path, size=8, limit=-1)
    with pytest.raises(ValueError, match="size must be"):
        load_image_folder(tmp_path, size=8.0)
    with pytest.warns(UserWarning):
        assert load_image_folder(tmp_path, size=8, extensions="tif").shape == (1, 1, 8, 8)


def test_an_output_folder_inside_the_image_folder_is_refused(tmp_path) -> None:
    # a second run read the first one's figures as training and test images (an audit)
    from PIL import Image

    from et_graph.experiments.image_completion import main

    for index in range(6):
        Image.new("L", (8, 8), 40 * index).save(tmp_path / f"{index}.png")
    with pytest.raises(ValueError, match="lies inside the image folder"):
        main(["--data", str(tmp_path), "--out", str(tmp_path / "results"), "--quick",
              "--no-progress"])


def test_a_resumed_image_run_says_its_seconds_are_the_resumed_part(tmp_path) -> None:
    # ("0s training" for a finished training read back from its checkpoint: an audit)
    from et_graph.experiments.image_completion import main

    flags = ["--quick", "--seeds", "1", "--no-progress", "--checkpoint-dir", str(tmp_path)]
    first = main(flags)
    again = main([*flags, "--resume"])
    assert first["per_seed"][0]["resumed_from_epoch"] is None
    assert again["per_seed"][0]["resumed_from_epoch"] == 2
    assert again["per_seed"][0]["mse"] == first["per_seed"][0]["mse"]


def test_the_trace_goes_through_the_images_in_chunks_with_the_same_figures(digits) -> None:
    # (all held-out images in one dense batch took 1.6 GB for 200 images of 256 patches: an
    # audit)
    model = small_model().double()
    images = digits[:37].double()
    mask = model.random_mask(37, generator=torch.Generator().manual_seed(0))
    whole = trace_dynamics(model, images, mask, chunk_size=64)
    chunked = trace_dynamics(model, images, mask, chunk_size=5)
    for key in ("energies", "tokens", "memory_usage"):
        torch.testing.assert_close(chunked[key], whole[key])
    for key, value in whole["norms"].items():
        torch.testing.assert_close(chunked["norms"][key], value)
    assert whole["energies"].shape == (37, model.conv.steps + 1)
    with pytest.raises(ValueError, match="chunk_size"):
        trace_dynamics(model, images, mask, chunk_size=0)


def test_pixels_outside_the_unit_range_are_named(digits) -> None:
    # (images in 0..255 trained without a word: an audit)
    import warnings

    from et_graph.protocols.image_completion import ImageTrainConfig

    model = small_model()
    with pytest.warns(UserWarning, match=r"the training images reach 255.*divide 8-bit"):
        train_image_completion(model, digits[:20] * 255, ImageTrainConfig(epochs=1),
                               progress=False)
    mask = model.random_mask(4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        evaluate_image_completion(model, digits[:20], digits[20:24], mask)


def test_a_validation_part_larger_than_the_training_part_is_named() -> None:
    # (--val-fraction 0.99 trained on 2 of 200 images without a word: an audit)
    from et_graph.protocols.image_config import ImageProtocolConfig

    with pytest.warns(UserWarning, match="holds out more of the training images"):
        ImageProtocolConfig(val_fraction=0.99)


def test_folder_images_of_another_aspect_ratio_through_the_cli_flags(tmp_path) -> None:
    """--image-size took one integer, so a folder of 8x12 images could only be stretched to a
    square from the command line (the API takes (H, W): an audit)."""
    import warnings

    from PIL import Image

    from et_graph.config import parse
    from et_graph.experiments.image_completion import CONFIG, _fingerprint, load_images

    for index in range(2):
        Image.new("L", (12, 8), 40 * index).save(tmp_path / f"{index}.png")
    config = parse(CONFIG, ["--data", str(tmp_path), "--image-size", "8", "--image-width", "12"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not stretched
        assert load_images(config.data).shape == (2, 1, 8, 12)
    with pytest.raises(ValueError, match="image_width must be positive"):
        parse(CONFIG, ["--image-width", "0"])
    # a square run's checkpoint fingerprint is the one written before the field existed
    square = parse(CONFIG, ["--data", str(tmp_path)])
    assert "image_width" not in _fingerprint(square, 0)
    same = parse(CONFIG, ["--data", str(tmp_path), "--image-size", "32", "--image-width", "32"])
    assert _fingerprint(same, 0) == _fingerprint(square, 0)  # a square spelt out (a review)
    assert '"image_width": 12' in _fingerprint(config, 0)
    with pytest.warns(ConfigWarning, match="image_width=12"):
        load_images(parse(CONFIG, ["--image-width", "12"]).data)


def test_the_grid_outlines_exactly_the_filled_patches_of_the_fill_rows() -> None:
    """The fill rows looked like whole images: which patches a model filled could not be told
    (an audit). The outlines cover each fill row's masked patches and nothing else."""
    from et_graph.nn.models import ETImageCompletion
    from et_graph.reporting_images import _filled_patch_outlines, _mosaic

    model = ETImageCompletion(image_size=(8, 6), patch_size=2, dim=8, heads=1, head_dim=4)
    mask = model.random_mask(3, generator=torch.Generator().manual_seed(1))
    masked_pixels = model.unpatchify(mask.unsqueeze(-1).expand(-1, -1, 4).float())
    rows = torch.cat([torch.zeros_like(masked_pixels), masked_pixels, torch.zeros_like(
        masked_pixels)])  # a masked row, a fill row (its masked pixels 1), the original
    picture = _mosaic(rows, columns=3, pad=1, pad_value=0.0)[0]
    covered = torch.zeros_like(picture, dtype=torch.bool)
    for x, y, width, height in _filled_patch_outlines(model, mask, [1], columns=3, pad=1):
        top, left = int(y + 0.5), int(x + 0.5)
        assert not covered[top:top + height, left:left + width].any()  # each patch once
        covered[top:top + height, left:left + width] = True
    assert torch.equal(covered, picture == 1.0)


def test_the_mask_takes_a_colour_the_images_do_not_have() -> None:
    """A vermillion mask could not be told from red image content (an audit): the mask takes
    the first palette colour that few pixels are close to; grey digits keep vermillion."""
    from et_graph.reporting_images import MASK_COLOURS, _mask_colour, _rgb

    assert _mask_colour(load_digits_images()[:8])[0] == "vermillion"
    for red in ((1.0, 0.0, 0.0), (0.7, 0.1, 0.1)):  # (a review: pure and dark red kept it)
        assert _mask_colour(torch.tensor(red).view(1, 3, 1, 1).expand(2, 3, 4, 4))[0] == "blue"
    red_images = _rgb(MASK_COLOURS[0][1]).view(1, 3, 1, 1).expand(2, 3, 4, 4).clone()
    red_images[0, :, 0, 0] = _rgb(MASK_COLOURS[2][1])  # one yellow pixel
    assert _mask_colour(red_images)[0] == "blue"
    blue_too = red_images.clone()
    blue_too[1] = _rgb(MASK_COLOURS[1][1]).view(3, 1, 1)
    assert _mask_colour(blue_too)[0] == "purple"  # yellow has one close pixel, purple none


def test_a_decompression_bomb_is_named_with_its_file(tmp_path, monkeypatch) -> None:
    """(a security audit) Pillow's DecompressionBombError came out as a bare traceback."""
    from PIL import Image

    Image.new("L", (20, 20), 0).save(tmp_path / "big.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # 400 pixels: twice the limit and more
    with pytest.raises(ValueError, match="could not read image .*big.png"):
        load_image_folder(tmp_path, size=8)
