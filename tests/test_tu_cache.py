"""The TU dataset cache after a killed run or a full disk: rebuilt, or named; never a raw
traceback on every later run (from a filesystem audit)."""
import pytest

from et_graph.datasets import load_tudataset
from et_graph.datasets.tudataset import default_tu_root


def test_a_cut_processed_file_or_stamp_is_rebuilt(tmp_path):
    cache = tmp_path / "cache"
    graphs, _ = load_tudataset(None, "MUTAG", cache, pe_dim=0, progress=False)
    processed = next((cache / "MUTAG" / "processed").glob("data*.pt"))
    processed.write_bytes(processed.read_bytes()[:1000])  # a run killed while PyG wrote it
    again, _ = load_tudataset(None, "MUTAG", cache, pe_dim=0, progress=False)
    assert len(again) == len(graphs) and all(
        bool((a.x == b.x).all()) for a, b in zip(again, graphs))
    (cache / "MUTAG" / "raw_source.json").write_text("",
                                                     encoding="utf-8")  # a full disk left it empty
    assert len(load_tudataset(None, "MUTAG", cache, pe_dim=0, progress=False)[0]) == len(graphs)
    assert not list((cache / "MUTAG").glob("*.partial"))


def test_an_empty_et_graph_data_folder_is_named_as_such(tmp_path, monkeypatch):
    # the hint said to set ET_GRAPH_DATA, which was set already
    monkeypatch.setenv("ET_GRAPH_DATA", str(tmp_path))
    assert default_tu_root() is None
    with pytest.raises(ValueError, match=f"ET_GRAPH_DATA={tmp_path} does not hold it"):
        load_tudataset(None, "MUTAG", tmp_path / "cache", pe_dim=0, progress=False)



def test_a_misspelt_dataset_is_answered_with_the_closest_name_and_the_list(tmp_path):
    # (from a CLI audit) "--dataset mutag" found nothing and named nothing else
    with pytest.raises(ValueError, match=r"did you mean MUTAG\? .* holds .*MUTAG, Mutagenicity"):
        load_tudataset(None, "mutag", tmp_path / "cache", pe_dim=0, progress=False)


def test_a_dataset_name_cannot_leave_its_folder(tmp_path):
    # (from a security review) a preset naming ".." made the cache cleanup delete the cache's
    # parent folder, and put results and checkpoints one folder up
    from et_graph.config import parse
    from et_graph.protocols.tudataset_config import TUDatasetConfig

    kept = tmp_path / "important.txt"
    kept.write_text("results", encoding="utf-8")
    for name in ("..", "a/b", ".", "../x"):
        with pytest.raises(ValueError, match="a TU dataset name is letters"):
            load_tudataset(tmp_path, name, tmp_path / "cache", pe_dim=0, progress=False)
        with pytest.raises(ValueError, match="a TU dataset name is letters"):
            parse(TUDatasetConfig, ["--dataset", name])  # when parsed, before any folder
    assert kept.is_file()


def test_the_default_cache_is_the_users_own(monkeypatch, tmp_path):
    from et_graph.datasets.tudataset import default_tu_cache

    monkeypatch.setenv("ET_GRAPH_CACHE", str(tmp_path))
    assert default_tu_cache() == tmp_path / "tudataset"  # not a guessable /tmp folder


def test_without_a_writable_home_the_cache_is_a_private_temp_folder(monkeypatch, tmp_path):
    # (from a review) a container with a read-only home failed with a raw FileNotFoundError
    import os
    import stat

    from et_graph.datasets.tudataset import default_tu_cache

    blocked = tmp_path / "file"
    blocked.write_text("", encoding="utf-8")
    # no writable home (the user named no cache: ET_GRAPH_CACHE unset), so it cannot be made
    monkeypatch.delenv("ET_GRAPH_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked / "cache"))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    folder = default_tu_cache()
    assert folder.parent == tmp_path / "tmp" and folder.name.endswith(str(os.getuid()))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    folder.chmod(0o777)  # as another user's (or a careless) folder would be
    with pytest.raises(ValueError, match="not a private folder of this user"):
        default_tu_cache()
    # Windows reports every writable folder as 0o777: it refused its own temp folder
    from et_graph import paths

    monkeypatch.setattr(paths, "WINDOWS", True)
    assert default_tu_cache() == folder


def test_a_full_disk_is_not_called_a_damaged_file(tmp_path):
    import errno

    from et_graph.datasets.gnnbenchmark_common import read_local_files

    def full():
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        read_local_files(full, tmp_path, "fix")

    def cut():
        raise OSError(errno.EINVAL, "Invalid argument")

    with pytest.raises(ValueError, match="truncated, damaged"):
        read_local_files(cut, tmp_path, "fix")


def _copy_mutag(root):
    import shutil

    source = default_tu_root() / "MUTAG" / "raw"
    (root / "MUTAG" / "raw").mkdir(parents=True)
    for path in source.iterdir():
        shutil.copyfile(path, root / "MUTAG" / "raw" / path.name)
    return root / "MUTAG" / "raw"


def test_the_cache_never_deletes_a_folder_it_did_not_make(tmp_path):
    """(a security audit) the cache cleanup deleted any same-named folder inside --cache: with
    --root D --cache D the dataset's own raw files, and through a crafted preset or results
    file a folder of the victim's choosing."""
    raw = _copy_mutag(tmp_path / "data")
    with pytest.raises(ValueError, match="is the root"):
        load_tudataset(tmp_path / "data", "MUTAG", tmp_path / "data", pe_dim=0, progress=False)
    assert sorted(p.name for p in raw.iterdir()) == sorted(
        p.name for p in (default_tu_root() / "MUTAG" / "raw").iterdir())
    victim = tmp_path / "home"
    (victim / "MUTAG").mkdir(parents=True)
    (victim / "MUTAG" / "thesis.tex").write_text("years of work", encoding="utf-8")
    with pytest.raises(ValueError, match="exists without et-graph.s stamp"):
        load_tudataset(tmp_path / "data", "MUTAG", victim, pe_dim=0, progress=False)
    assert (victim / "MUTAG" / "thesis.tex").read_text(encoding="utf-8") == "years of work"


def test_a_copy_killed_half_way_is_replaced_and_links_to_non_files_are_skipped(tmp_path):
    import os

    raw = _copy_mutag(tmp_path / "data")
    os.symlink("/dev/zero", raw / "MUTAG_zero.txt")  # (a security audit: it filled the disk)
    os.symlink(tmp_path, raw / "elsewhere")  # a folder: it was copied whole
    cache = tmp_path / "cache"
    graphs, _ = load_tudataset(tmp_path / "data", "MUTAG", cache, pe_dim=0, progress=False)
    copied = cache / "MUTAG" / "raw"
    assert not (copied / "MUTAG_zero.txt").exists() and not (copied / "elsewhere").exists()
    # a run killed after the stamp's placeholder and part of the copy: the next run replaces it
    (cache / "MUTAG" / "raw_source.json").write_text("{}", encoding="utf-8")
    (copied / "MUTAG_A.txt").unlink()
    again, _ = load_tudataset(tmp_path / "data", "MUTAG", cache, pe_dim=0, progress=False)
    assert len(again) == len(graphs) and (copied / "MUTAG_A.txt").is_file()


def test_degree_features_the_machine_cannot_hold_are_refused_first(tmp_path, monkeypatch):
    """(a security audit) one-hot degrees take nodes x (max degree + 1) floats: a 278 KB star
    graph asked for 0.9 GB; beyond the machine's memory the load is refused before building
    them."""
    from et_graph.datasets import tudataset

    assert load_tudataset(None, "IMDB-BINARY", tmp_path / "cache", pe_dim=0,
                          progress=False)[0][0].x.size(1) > 1  # one-hot degrees, as before
    monkeypatch.setattr(tudataset, "physical_memory", lambda: 10**6)
    with pytest.raises(ValueError, match="one-hot degree features .* more than this machine"):
        load_tudataset(None, "IMDB-BINARY", tmp_path / "cache", pe_dim=0, progress=False)


def test_a_copy_killed_after_its_first_file_is_still_recognised_as_the_caches_own(
        tmp_path, monkeypatch):
    """(a review) the stamp is written before the copy: without it, a copy killed half-way
    left a folder without a stamp, which every later run refused as someone else's."""
    import shutil

    from et_graph.datasets import tudataset

    raw = _copy_mutag(tmp_path / "data")
    copied = []
    real = shutil.copyfile

    def killed(source, target, *args, **kwargs):
        if copied:
            raise KeyboardInterrupt  # the run is killed after the first file
        copied.append(source)
        return real(source, target, *args, **kwargs)

    monkeypatch.setattr(tudataset.shutil, "copyfile", killed)
    with pytest.raises(KeyboardInterrupt):
        load_tudataset(tmp_path / "data", "MUTAG", tmp_path / "cache", pe_dim=0, progress=False)
    monkeypatch.setattr(tudataset.shutil, "copyfile", real)
    graphs, _ = load_tudataset(tmp_path / "data", "MUTAG", tmp_path / "cache", pe_dim=0,
                               progress=False)
    assert len(graphs) == 188 and raw.is_dir()


def test_an_unusable_et_graph_cache_is_an_error_not_a_silent_fallback(tmp_path, monkeypatch):
    """From a locked-down runtime audit: ET_GRAPH_CACHE naming a file (or an unwritable folder)
    was replaced by a private temporary folder without a word; the fallback is for a machine
    without a writable home, not for a folder the user chose."""
    from et_graph.datasets.tudataset import default_tu_cache

    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder", encoding="utf-8")
    monkeypatch.setenv("ET_GRAPH_CACHE", str(blocker))
    with pytest.raises(ValueError, match="ET_GRAPH_CACHE=.*point it at a writable folder"):
        default_tu_cache()
    monkeypatch.setenv("ET_GRAPH_CACHE", str(tmp_path / "cache"))
    assert default_tu_cache() == tmp_path / "cache" / "tudataset"


def test_graphs_a_user_processed_with_a_pre_transform_in_the_cache_are_not_read(tmp_path):
    """(a graph-level audit) the docs' own example runs TUDataset(..., pre_transform=
    CLSLaplacianPE(k=8)) on the default cache: load_tudataset then read those transformed
    graphs (lap_pe on every graph of a pe_dim=0 load), with only PyG's warning."""
    import warnings

    from torch_geometric.datasets import TUDataset

    from et_graph.datasets import prepare_root
    from et_graph.transforms import CLSLaplacianPE

    cache = tmp_path / "cache"
    root = prepare_root(default_tu_root(), "MUTAG", cache)
    TUDataset(str(root), "MUTAG", use_edge_attr=True, pre_transform=CLSLaplacianPE(k=4),
              force_reload=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (PyG's "The `pre_transform` argument differs")
        graphs, _ = load_tudataset(None, "MUTAG", cache, pe_dim=0, progress=False)
    assert "lap_pe" not in graphs[0]
    data = next((cache / "MUTAG" / "processed").glob("data*.pt"))
    written = data.stat().st_mtime_ns
    load_tudataset(None, "MUTAG", cache, pe_dim=0, progress=False)  # its own: kept as it is
    assert data.stat().st_mtime_ns == written
