"""Does showing progress bars change a run's figures at a given commit?

Runs ``et-graph ARGS`` twice, with ``--progress`` and with ``--no-progress``, each in its own
process with every tqdm bar's construction traced: the iterable it wraps and whether building
it moved any random state (torch's, NumPy's and Python's global generators, and a wrapped
loader's own generators). Then it compares every figure of the two runs' JSON files, leaving
out the metadata and the timings. A bar class that calls ``iter()`` on what it wraps
(``tqdm.auto``'s asyncio class did, until commit 5512fe4) draws a shuffle seed from a wrapped
``DataLoader``; over ranges and lists it draws nothing.

Run it on a checkout of the commit to examine (``git worktree add /tmp/at-X X``)::

    OMP_NUM_THREADS=1 python benchmarks/progress_bar_audit.py --code /tmp/at-X \\
        --out runs/bar-audit/X -- gnnbenchmark --dataset ZINC --models et --seeds 0 --epochs 2

It prints the traced bars and the comparison, and exits 1 when the figures differ. The script
itself needs only the standard library, NumPy and torch of the environment, so it runs against
any commit's package. ``docs/measured/reruns/progress_audit_s66/`` holds session 66's audit of
every stored run made with bars shown.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Optional

#: Leaves of a results file that differ between two identical runs (where and when they ran).
NOT_FIGURES = re.compile(r"(^|/)meta(/|$)|second|time|_s$|wall|peak|memory|rss|elapsed|"
                         r"duration|out$|notes?(/|$)|run_id|_at$|(^|/)pid$", re.IGNORECASE)


def _traced_child(trace_path: str, argv: list[str]) -> int:
    """In the child process: trace every tqdm construction, then run ``et-graph argv``."""
    import numpy as np
    import torch
    import tqdm.asyncio
    import tqdm.std

    trace = open(trace_path, "w", encoding="utf-8")  # noqa: SIM115 (open for the whole run)
    depth = [0]

    def digest(state) -> str:
        return hashlib.md5(state.numpy().tobytes()).hexdigest()[:10]

    def states(iterable) -> dict[str, str]:
        found = {"torch": digest(torch.get_rng_state()),
                 "numpy": hashlib.md5(repr(np.random.get_state()).encode()).hexdigest()[:10],
                 "python": hashlib.md5(repr(random.getstate()).encode()).hexdigest()[:10]}
        for name, owner in (("loader", iterable), ("sampler", getattr(iterable, "sampler", None))):
            generator = getattr(owner, "generator", None)
            if isinstance(generator, torch.Generator):
                found[name] = digest(generator.get_state())
        return found

    def traced(cls, label: str) -> None:
        original = cls.__init__

        def __init__(self, iterable=None, *args, **kwargs):
            if depth[0]:  # a subclass's __init__ calling its base's
                return original(self, iterable, *args, **kwargs)
            before = states(iterable)
            depth[0] = 1
            try:
                original(self, iterable, *args, **kwargs)
            finally:
                depth[0] = 0
            after = states(iterable)
            kind = type(iterable)
            trace.write(json.dumps({
                "class": label, "desc": kwargs.get("desc"),
                "iterable": f"{kind.__module__}.{kind.__name__}",
                "moved": [name for name in before if before[name] != after.get(name)],
            }) + "\n")
            trace.flush()

        cls.__init__ = __init__

    traced(tqdm.asyncio.tqdm_asyncio, "tqdm_asyncio")
    traced(tqdm.std.tqdm, "tqdm")
    from et_graph.cli import main

    return int(main(argv) or 0)


def _leaves(value, path: str = ""):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{path}/{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{path}[{index}]")
    else:
        yield path, value


def compare(first: Path, second: Path) -> tuple[int, list[tuple[str, object, object]]]:
    """``(figures compared, [(leaf, first value, second value)] that differ)`` of two JSON
    files, leaving out :data:`NOT_FIGURES`."""
    a = dict(_leaves(json.loads(first.read_text(encoding="utf-8"))))
    b = dict(_leaves(json.loads(second.read_text(encoding="utf-8"))))
    keys = [key for key in sorted(set(a) | set(b)) if not NOT_FIGURES.search(key)]
    return len(keys), [(key, a.get(key), b.get(key)) for key in keys if a.get(key) != b.get(key)]


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) > 1 and argv[0] == "--child":
        return _traced_child(argv[1], argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--code", required=True, help="checkout of the commit to examine")
    parser.add_argument("--out", required=True, help="folder for both runs and their traces")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- then et-graph's arguments")
    options = parser.parse_args(argv)
    args = options.args[1:] if options.args[:1] == ["--"] else options.args
    out = Path(options.out).resolve()
    environment = {**os.environ, "PYTHONPATH": str(Path(options.code).resolve())}
    for mode in ("progress", "no-progress"):
        (out / mode).mkdir(parents=True, exist_ok=True)
        command = [sys.executable, str(Path(__file__).resolve()), "--child",
                   str(out / f"trace_{mode}.jsonl"), *args, "--threads", "1", f"--{mode}",
                   "--out", str(out / mode)]
        with open(out / f"log_{mode}.txt", "w", encoding="utf-8") as log:
            status = subprocess.run(command, env=environment, cwd=options.code, stdout=log,
                                    stderr=subprocess.STDOUT).returncode
        if status:
            print(f"the run with --{mode} failed (status {status}): {out / f'log_{mode}.txt'}")
            return 2
    differ = False
    for mode in ("progress", "no-progress"):
        bars = [json.loads(line) for line in
                (out / f"trace_{mode}.jsonl").read_text(encoding="utf-8").splitlines()]
        moved = [bar for bar in bars if bar["moved"]]
        print(f"--{mode}: {len(bars)} bars over {sorted({bar['iterable'] for bar in bars})}; "
              f"{len(moved)} moved a random state" + (f": {moved[:3]}" if moved else ""))
    for shown in sorted((out / "progress").rglob("*.json")):
        hidden = out / "no-progress" / shown.relative_to(out / "progress")
        count, different = compare(shown, hidden)
        differ = differ or bool(different)
        print(f"{shown.relative_to(out / 'progress')}: {count} figures, {len(different)} differ"
              + "".join(f"\n  {key}: {a!r} -> {b!r}" for key, a, b in different[:10]))
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
