"""Ten lines with a detector: ET on the embedded Tolokers graph, paper split (40% train).

    python examples/detector_quickstart.py [--epochs 100]
"""
import argparse

from sklearn.metrics import roc_auc_score

from et_graph.cli import run_example
from et_graph.datasets import load_anomaly_dataset
from et_graph.detectors import ETDetector
from et_graph.protocols.anomaly import stratified_split
from et_graph.transforms import FeatureTransform


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--epochs", type=int, default=100, help="training epochs (default 100)")
    epochs = parser.parse_args().epochs

    # fitted on this graph; kept (transform.save) to transform every graph scored later
    transform = FeatureTransform("quantile", degree_feature=True)
    data = transform.fit_transform(load_anomaly_dataset("tolokers"))
    split = stratified_split(data.y, 0.4, seed=2)  # the paper's: 40% train, val:test 1:2
    data.train_mask, data.val_mask, test = split.masks(data.num_nodes)
    det = ETDetector(epochs=epochs).fit(data)  # checkpoint and threshold chosen on data.val_mask
    score = det.decision_function(data)  # [N], higher = more anomalous
    pred = det.predict(data)  # 0/1 at det.threshold_
    best = det.fit_info_["best_epoch"] + 1  # counted from 1 here (from 0 in fit_info_)
    print(f"best epoch {best} of {epochs}, threshold {det.threshold_:.2f}, "
          f"test AUROC {roc_auc_score(data.y[test], score[test]):.4f}, "
          f"flagged {int(pred[test].sum())} of {int(test.sum())} test nodes")


if __name__ == "__main__":
    run_example(main, __file__)
