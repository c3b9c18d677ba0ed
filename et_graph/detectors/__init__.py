"""Node anomaly detectors with PyGOD's core conventions (``fit`` / ``decision_function`` /
``predict``; see :mod:`et_graph.detectors.base` for what of PyGOD's API they leave out).

.. code-block:: python

    from et_graph.detectors import ETDetector
    det = ETDetector(epochs=50).fit(data)          # data.y, data.train_mask, data.val_mask
    score = det.decision_function(data)            # [N], higher = more anomalous
    pred = det.predict(data)                       # 0/1 at det.threshold_ (chosen on validation)

    det = ETDetector(supervised=False).fit(data)   # = UnsupervisedETDetector: no label read
    det = StackedETDetector(folds=5).fit(data)     # ET reading the trees' cross-fitted score

Detectors of your own join ``et-graph anomaly --models`` and its tuner by
:func:`register_detector` (:mod:`et_graph.detectors.registry`).
"""
from .base import BaseDetector
from .config import (
    SEARCH_SPACES,
    ETDetectorConfig,
    ETModelConfig,
    GBTDetectorConfig,
    GBTModelConfig,
    GNNDetectorConfig,
    GNNModelConfig,
    NodeTrainConfig,
)
from .neural import ETDetector, GATDetector, GCNDetector, MLPDetector, NeuralDetector
from .registry import register_detector, registered_detectors, unregister_detector
from .stacked import StackedETDetector
from .tree import GBTDetector, neighbourhood_features
from .unsupervised import (
    MaskedETModelConfig,
    MaskedTrainConfig,
    UnsupervisedETDetector,
    UnsupervisedETDetectorConfig,
    UnsupervisedScoreConfig,
)

#: The built-in detector classes by the names the CLI and the tuner use (detectors of your own:
#: :func:`register_detector`).
DETECTORS = {
    "et": ETDetector,
    "mlp": MLPDetector,
    "gcn": GCNDetector,
    "gat": GATDetector,
    "gbt": GBTDetector,
    # ET reading the gradient-boosted trees' cross-fitted log-odds as one more input column
    "et_stacked": StackedETDetector,
}

__all__ = [
    "DETECTORS",
    "SEARCH_SPACES",
    "BaseDetector",
    "ETDetector",
    "ETDetectorConfig",
    "ETModelConfig",
    "GATDetector",
    "GBTDetector",
    "GBTDetectorConfig",
    "GBTModelConfig",
    "GCNDetector",
    "GNNDetectorConfig",
    "GNNModelConfig",
    "MaskedETModelConfig",
    "MaskedTrainConfig",
    "MLPDetector",
    "NeuralDetector",
    "NodeTrainConfig",
    "StackedETDetector",
    "UnsupervisedETDetector",
    "UnsupervisedETDetectorConfig",
    "UnsupervisedScoreConfig",
    "neighbourhood_features",
    "register_detector",
    "registered_detectors",
    "unregister_detector",
]
