"""Shared test fixtures."""
import pytest
import torch

# The suite runs on one torch thread (small graphs run fastest and steadiest so, and it shares
# 2 cores). Two modules set it at import, so the whole session ran so whenever they were
# collected and a module run alone did not: said here, once (a test-isolation audit).
torch.set_num_threads(1)


@pytest.fixture(autouse=True, scope="session")
def private_et_graph_cache(tmp_path_factory):
    """The session's et-graph cache (the TU cache, downloads) is a temporary folder, never the
    user's ~/.cache/et_graph, where two tests processed MUTAG and left lock files (a
    test-isolation audit); a test of the default location unsets it itself."""
    patch = pytest.MonkeyPatch()
    patch.setenv("ET_GRAPH_CACHE", str(tmp_path_factory.mktemp("et_graph_cache")))
    yield
    patch.undo()


@pytest.fixture
def one_thread():
    """Run a test on one torch thread: small graphs run fastest and steadiest that way, and the
    suite shares 2 cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def native_switch_off(monkeypatch):
    """The compiled kernels' switch off for the test (whatever ET_GRAPH_NATIVE_ATTENTION says:
    the suite also runs with it set), and the process-wide switch left as it was found."""
    import et_graph.native as native

    before = native.native_attention_enabled()
    monkeypatch.delenv(native.ENV_VARIABLE, raising=False)
    native._state["enabled"] = False
    yield
    native._state["enabled"] = before


@pytest.fixture(scope="session")
def built():
    """The compiled extension (et_graph.native); the tests that run it are skipped (with the
    compiler's message) where it cannot be built, e.g. without a C++ compiler."""
    import et_graph.native as native

    try:
        return native.load_native_attention()
    except RuntimeError as error:
        pytest.skip(str(error))


@pytest.fixture
def plugin_registries(monkeypatch):
    """Empty model registries for the test (no detector, graph or benchmark model registered,
    no plugin loaded, no ET_GRAPH_PLUGINS), and the plugin modules it imports dropped
    afterwards: the registries are process-wide, and a name left behind would change the next
    test's runs and results. Yields :mod:`et_graph.plugins`."""
    import sys

    import et_graph.detectors.registry  # noqa: F401  (every registry made, so emptied here)
    import et_graph.protocols.benchmark_models  # noqa: F401
    import et_graph.protocols.graph_models  # noqa: F401
    from et_graph import plugins

    for registry in plugins._REGISTRIES:
        monkeypatch.setattr(registry, "_entries", {})
    monkeypatch.setattr(plugins, "_LOADED", [])
    monkeypatch.delenv(plugins.PLUGINS_ENV, raising=False)
    yield plugins
    for plugin in plugins._LOADED:
        sys.modules.pop(plugin["module"], None)
