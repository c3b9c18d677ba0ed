import re
from pathlib import Path

from setuptools import find_packages, setup

README = Path(__file__).with_name("README.md")
# One version, the package's own (et_graph/__init__.py), read without importing torch.
VERSION = re.search(r'^__version__ = "([^"]+)"',
                    Path(__file__).with_name("et_graph").joinpath("__init__.py").read_text(encoding="utf-8"),
                    re.MULTILINE).group(1)

setup(
    name="et-graph",
    version=VERSION,
    description="The Energy Transformer (ET) for PyTorch Geometric",
    long_description=README.read_text(encoding="utf-8") if README.exists() else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["et_graph", "et_graph.*"]),
    # The opt-in attention kernel is compiled from its source on first use (et_graph.native);
    # py.typed: the public API is typed (PEP 561). The data and presets stay in the repository
    # (datasets/, configs/): a wheel ships the code only (docs/datasets.md).
    package_data={"et_graph": ["csrc/*.cpp", "csrc/*.h", "py.typed"]},
    python_requires=">=3.9",
    classifiers=[
        "Programming Language :: Python :: 3",
        "Intended Audience :: Science/Research",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Typing :: Typed",
    ],
    install_requires=[
        "torch>=2.3",
        "torch-geometric>=2.5",
        "numpy>=1.22",  # np.percentile(method=...)
        "scipy",
        "scikit-learn>=1.4.2",  # HistGradientBoosting max_features; 1.4.2: NumPy 2
        "tqdm>=4.58",  # the bars' delay (progress in logs)
        "matplotlib>=3.5",  # set_xticks(ticks, labels)
        "pillow>=9.1",  # Image.Resampling
        "threadpoolctl",
        "optuna>=3.1",  # et-graph tune (3.0 pins scipy<1.9, which no Python 3.11 installs)
        "pyyaml",  # YAML presets (TOML needs nothing on Python >= 3.11)
        "tomli; python_version < '3.11'",
    ],
    extras_require={
        # ninja: torch builds the opt-in attention kernel with it (et_graph.native)
        # mypy pinned: tests/test_typing.py checks the whole package, and a new release's
        # rules would fail CI with no change of code (2.4 needs Python 3.10; on 3.9 the
        # typing tests skip)
        "test": ["pytest", "hypothesis", "ruff", "ninja", "mypy==2.4.1; python_version >= '3.10'"],
        "native": ["ninja"],
        "docs": ["mkdocs-material", "mkdocstrings[python]", "latex2mathml"],
        # Both build from source against the installed torch, which pip's isolated build
        # cannot import: `pip install --no-build-isolation -e ".[sampling]"` (docs/scale.md).
        "scatter": ["torch-scatter"],
        # PyG's NeighborLoader backend; without it et_graph.loaders.NeighbourSampler samples in
        # pure torch. (No DGL extra: DGL does not import beside current torch, and only
        # datasets/tools/dgl_to_npz.py, outside the package, reads DGL files.)
        "sampling": ["torch-scatter", "torch-sparse"],
        # et-graph unsupervised: DOMINANT, AnomalyDAE, CoLA, CONAD; PyGOD's samplers also need
        # pyg-lib or torch-sparse (built for your torch version).
        "pygod": ["pygod>=1.0"],
    },
    entry_points={"console_scripts": ["et-graph=et_graph.cli:console_main"]},
)
