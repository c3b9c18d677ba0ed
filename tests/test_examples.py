"""The teaching example and the detector quick start run as documented (2 epochs here)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / script), *args],
                          capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.slow
def test_detector_quickstart_prints_a_test_auroc():
    out = _run("detector_quickstart.py", "--epochs", "2")
    auroc = float(re.search(r"test AUROC (\d\.\d+)", out).group(1))
    assert 0.5 < auroc <= 1.0


@pytest.mark.slow
def test_etconv_node_classification_example():
    out = _run("etconv_node_classification.py", "--epochs", "10")
    best = re.search(r"Best validation ROC-AUC: (\d\.\d+), test ROC-AUC at that epoch: (\d\.\d+)",
                     out)
    assert best and 0.5 < float(best.group(1)) <= 1.0
