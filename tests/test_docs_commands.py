"""Every ``et-graph ...`` command and task example in README.md and docs/ parses.

The docs quote well over a hundred commands, each behind a table. A renamed flag or a moved
preset would leave them failing for whoever reruns them, and nothing else would notice. Here each
command runs through the parser and the config resolution (``--config`` loaded, every flag
converted and checked), but nothing is trained. Commands written with shell variables (``$m``),
elisions (``...``) or optional parts in brackets are templates and are skipped. A preset under
``runs/`` is the output of an earlier command in the same recipe.
"""
from __future__ import annotations

import ast
import importlib
import re
import shlex
from pathlib import Path

import pytest

from et_graph.cli import SUBCOMMANDS, build_parser
from et_graph.config import resolve

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
EXAMPLE_TASKS = {"yelpchi_anomaly.py": "anomaly", "tudataset_classification.py": "tudataset",
                 "gnnbenchmark.py": "gnnbenchmark", "image_completion.py": "image",
                 "unsupervised_anomaly.py": "unsupervised"}
COMMAND = re.compile(r"(et-graph|python examples/(\w+\.py))\s+(.*)")


def shell_blocks(text: str, languages: tuple[str, ...] = ("bash", "sh", "console", "")
                 ) -> list[str]:
    """The contents of the fenced blocks in ``languages`` (by default the shell's)."""
    blocks, current, language = [], None, ""
    for line in text.splitlines():
        fence = line.strip()
        if fence.startswith("```"):
            if current is None:
                current, language = [], fence[3:].strip()
            else:
                if language in languages:
                    blocks.append("\n".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def documented_commands() -> list[tuple[str, str, list[str]]]:
    """``(page, task, argv)`` for every concrete command of the pages."""
    found = []
    # The pages' shell blocks, and the usage lines of the examples' docstrings.
    sources = [(page, shell_blocks(page.read_text(encoding="utf-8"))) for page in PAGES]
    sources += [(script, [ast.get_docstring(ast.parse(script.read_text(encoding="utf-8"))) or ""])
                for script in sorted((ROOT / "examples").glob("*.py"))]
    for page, blocks in sources:
        for block in blocks:
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                line = re.sub(r"^(\w+=\S+\s+)+", "", line.strip())  # OMP_NUM_THREADS=1 ...
                match = COMMAND.match(line)
                if match is None:
                    continue
                rest = match.group(3).split(" #")[0]
                if any(mark in rest for mark in ("$", "...", "<", "[")):
                    continue
                argv = shlex.split(rest)
                if match.group(2):
                    if match.group(2) not in EXAMPLE_TASKS:
                        continue
                    task = EXAMPLE_TASKS[match.group(2)]
                else:
                    task, argv = (argv[0], argv[1:]) if argv else ("", [])
                found.append((page.relative_to(ROOT).as_posix(), task, argv))
    return found


COMMANDS = documented_commands()


def test_the_pages_quote_commands():
    """The collector finds them (a broken collector would make the test below vacuous)."""
    assert len(COMMANDS) > 100
    assert {task for _, task, _ in COMMANDS} >= {"anomaly", "tudataset", "gnnbenchmark", "tune"}


@pytest.mark.parametrize("page, task, argv", COMMANDS,
                         ids=[f"{p}:{i}" for i, (p, _, _) in enumerate(COMMANDS)])
def test_documented_command_parses(page, task, argv, monkeypatch, plugin_registries):
    monkeypatch.chdir(ROOT)  # presets are quoted relative to the repository
    assert task in SUBCOMMANDS, f"{page}: unknown command et-graph {task!r}"
    config_path = argv[argv.index("--config") + 1] if "--config" in argv else None
    if config_path and config_path.startswith("runs/"):
        argv = argv[:argv.index("--config")] + argv[argv.index("--config") + 2:]
    if task == "tune":
        from et_graph.tuning import cli as tune_cli

        args = tune_cli.build_parser(argv[0] if argv else None).parse_args(argv)
        # as the commands do: the plugins first, then --models, which may name their models
        plugin_registries.load_plugins(getattr(args, "plugin", []))
        resolve(tune_cli.task_config(args.task), args)
        return
    args = build_parser(task).parse_args(argv)
    plugin_registries.load_plugins(getattr(args, "plugin", []))
    module = importlib.import_module(SUBCOMMANDS[task][0])
    if not hasattr(module, "CONFIG"):  # native, compare: their own parsers
        for spec in getattr(args, "files", ()):  # compare's stored runs must be in the repo
            path = spec.partition("@")[0]
            assert path.startswith("runs/") or (ROOT / path).exists(), f"{page}: no {path}"
        return
    resolve(module.CONFIG, args)


BENCHMARK = re.compile(r"python (benchmarks/\w+\.py)\s*(.*)")


def documented_benchmark_flags() -> dict[str, set[tuple[str, str]]]:
    """``{script: {(page, --flag)}}`` for the ``python benchmarks/...`` commands of the pages."""
    found: dict[str, set[tuple[str, str]]] = {}
    for page in PAGES:
        for block in shell_blocks(page.read_text(encoding="utf-8")):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                match = BENCHMARK.match(re.sub(r"^(\w+=\S+\s+)+", "", line.strip()))
                if match is None:
                    continue
                # Top-level tokens only: a quoted --variant "name=--flag ..." is the
                # task's own flags, which the parse test above covers where concrete.
                tokens = shlex.split(match.group(2).split(" #")[0])
                # after a bare "--", the arguments of the command the script runs
                tokens = tokens[:tokens.index("--")] if "--" in tokens else tokens
                flags = [t.split("=", 1)[0] for t in tokens if re.match(r"--[a-z]", t)]
                name = page.relative_to(ROOT).as_posix()
                found.setdefault(match.group(1), set()).update((name, f) for f in flags)
    return found


BENCHMARK_FLAGS = documented_benchmark_flags()


@pytest.mark.parametrize("script", sorted(BENCHMARK_FLAGS))
def test_documented_benchmark_flags_exist(script, capsys):
    """Every flag a page gives a benchmark script is one of the script's options (read from
    its --help, so nothing runs)."""
    from helpers import benchmark_module

    assert (ROOT / script).is_file(), f"the docs quote {script}, which does not exist"
    with pytest.raises(SystemExit) as done:
        benchmark_module(Path(script).stem).main(["--help"])
    assert done.value.code == 0
    options = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", capsys.readouterr().out))
    unknown = sorted(f"{page}: {flag}" for page, flag in BENCHMARK_FLAGS[script]
                     if flag not in options)
    assert not unknown, f"{script} has no such option: {unknown}"


def test_python_snippets_compile_and_their_imports_exist():
    """Every ```python block of the pages is valid Python, and each name it imports from
    et_graph exists (a renamed function would leave the snippet failing on its first line)."""
    import textwrap

    snippets = [(page, block) for page in PAGES
                for block in shell_blocks(page.read_text(encoding="utf-8"), ("python",))]
    assert len(snippets) > 10
    missing = []
    for page, block in snippets:
        tree = ast.parse(textwrap.dedent(block), filename=str(page))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("et_graph"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    if not hasattr(module, alias.name):
                        try:
                            importlib.import_module(f"{node.module}.{alias.name}")
                        except ImportError:
                            missing.append(f"{page.name}: {node.module}.{alias.name}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("et_graph"):
                        importlib.import_module(alias.name)
    assert not missing, missing


def test_the_readmes_etconv_block_runs_as_written():
    """It used x_dense a line before defining it, and names nothing defined elsewhere."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## Using `ETConv`", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["out"].shape == (2, 50, 64)


def test_the_graph_pages_etgraphmodel_block_runs_and_leaves_the_shipped_data_alone(
        tmp_path, monkeypatch):
    """(a user audit) it processed MUTAG inside the shipped datasets/ folder, where a later
    pre_transform met the stale encodings with only PyG's warning."""
    text = (ROOT / "docs" / "graph_classification.md").read_text(encoding="utf-8")
    block = text.split("```python", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("ET_GRAPH_CACHE", str(tmp_path / "cache"))
    before = sorted(p.relative_to(ROOT) for p in (ROOT / "datasets" / "TUDataset").rglob("*"))
    namespace: dict = {}
    exec(compile(block, "graph_classification.md", "exec"), namespace)
    assert namespace["logits"].size(1) == 2
    assert sorted(p.relative_to(ROOT) for p in (ROOT / "datasets" / "TUDataset").rglob("*")) == (
        before)
