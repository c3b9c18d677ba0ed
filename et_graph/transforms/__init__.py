from .features import (
    FEATURE_NORMS,
    FeatureTransform,
    piecewise_linear_encoding,
    prepare_detection_data,
    quantile_normal,
    transform_features,
)
from .injection import (
    InjectAnomalies,
    inject_contextual_anomalies,
    inject_structural_anomalies,
)
from .laplacian_pe import (
    CLSLaplacianPE,
    cls_laplacian_eigenvectors,
    cls_padded_adjacency,
    normalized_laplacian,
)
from .neighbourhood import (
    NEIGHBOUR_STATS,
    NeighbourhoodStatistics,
    neighbourhood_statistics,
    parse_neighbour_stats,
)
from .structural import IncidentEdgeSum, LogDegree, RandomWalkPE

__all__ = [
    "FEATURE_NORMS",
    "NEIGHBOUR_STATS",
    "FeatureTransform",
    "piecewise_linear_encoding",
    "prepare_detection_data",
    "quantile_normal",
    "transform_features",
    "CLSLaplacianPE",
    "IncidentEdgeSum",
    "InjectAnomalies",
    "LogDegree",
    "RandomWalkPE",
    "NeighbourhoodStatistics",
    "cls_laplacian_eigenvectors",
    "cls_padded_adjacency",
    "inject_contextual_anomalies",
    "inject_structural_anomalies",
    "neighbourhood_statistics",
    "normalized_laplacian",
    "parse_neighbour_stats",
]
