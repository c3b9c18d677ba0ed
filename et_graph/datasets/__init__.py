"""Datasets for et-graph.

Node anomaly detection (``load_anomaly_dataset``): Tolokers, PyGOD Reddit / injected Amazon
(shipped in ``datasets/``), YelpChi / Amazon (CARE-GNN ``.mat``), T-Finance / T-Social (open
``.npz``), or any ``.mat`` / ``.npz`` / ``.pt`` file.

GNNBenchmark (``load_benchmark`` from a ``GNNBenchmarkDataConfig``): ZINC (full or the partial
offline copy, ``zinc``), PATTERN / CLUSTER (official files, ``gnnbenchmark_sbm``, or generated
with ``generate_sbm_pattern`` / ``generate_sbm_cluster`` of ``synthetic``), MNIST / CIFAR10
(``superpixels``).

Images for the dense path (``load_digits_images``, ``load_image_folder``).
"""
from .anomaly import ANOMALY_DATASETS, DEFAULT_ANOMALY_DATASET, load_anomaly_dataset
from .anomaly_data import data_dir, describe_anomaly_data, from_pyg_data, prepare_anomaly_data
from .embedded import load_pyg_file
from .fraud_mat import AMAZON_UNLABELLED_NODES, CARE_RELATIONS, load_fraud_mat
from .gnnbenchmark import GNNBenchmarkDataConfig, add_positional_encoding, load_benchmark
from .gnnbenchmark_common import GNN_BENCHMARK_NAMES, BenchmarkData, load_gnn_benchmark
from .gnnbenchmark_sbm import sbm_benchmark
from .images import load_digits_images, load_image_folder, split_images
from .npz import dgl_graph_to_data, load_anomaly_npz, save_anomaly_npz
from .superpixels import superpixel_benchmark
from .synthetic import (
    SBMClusterRecipe,
    SBMPatternRecipe,
    generate_sbm_cluster,
    generate_sbm_pattern,
    sbm_statistics,
)
from .tudataset import default_tu_root, load_tudataset, prepare_root
from .zinc import (
    ZINC_NUM_ATOM_TYPES,
    ZINC_NUM_BOND_TYPES,
    load_zinc,
    load_zinc_partial,
    zinc_benchmark,
)

__all__ = [
    "BenchmarkData",
    "GNNBenchmarkDataConfig",
    "GNN_BENCHMARK_NAMES",
    "SBMClusterRecipe",
    "SBMPatternRecipe",
    "ZINC_NUM_ATOM_TYPES",
    "ZINC_NUM_BOND_TYPES",
    "generate_sbm_cluster",
    "generate_sbm_pattern",
    "load_gnn_benchmark",
    "load_zinc",
    "load_zinc_partial",
    "sbm_statistics",
    "add_positional_encoding",
    "load_benchmark",
    "sbm_benchmark",
    "superpixel_benchmark",
    "zinc_benchmark",
    "AMAZON_UNLABELLED_NODES",
    "ANOMALY_DATASETS",
    "CARE_RELATIONS",
    "DEFAULT_ANOMALY_DATASET",
    "data_dir",
    "describe_anomaly_data",
    "dgl_graph_to_data",
    "from_pyg_data",
    "load_anomaly_dataset",
    "load_anomaly_npz",
    "load_digits_images",
    "load_fraud_mat",
    "load_image_folder",
    "load_pyg_file",
    "prepare_anomaly_data",
    "save_anomaly_npz",
    "split_images",
    "default_tu_root",
    "load_tudataset",
    "prepare_root",
]
