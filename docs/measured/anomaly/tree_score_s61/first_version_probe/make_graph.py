"""The first version of the stacked column (session 61; kept as the record of its probe).

Probe: append a cross-fitted GBT logit (training nodes: out-of-fold; others: mean of the fold
models) to Tolokers' x, save as .pt. Training labels only."""
import sys

import numpy as np
import torch
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import StratifiedKFold

from et_graph.datasets.anomaly import load_anomaly_dataset
from et_graph.detectors.tree import neighbourhood_features
from et_graph.protocols.anomaly import make_splits

out = sys.argv[1]
folds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
data = load_anomaly_dataset("tolokers")
split = make_splits(data, "paper", 1, 0.4, 2)[0]
feat = neighbourhood_features(data.x, data.edge_index, "x_mean_mean2")
y = data.y.numpy()
train = split.train.numpy()
logit = np.zeros(len(y))
other = np.ones(len(y), bool)
other[train] = False
skf = StratifiedKFold(folds, shuffle=True, random_state=0)
yt = y[train]
w_pos = (yt.size - yt.sum()) / yt.sum()
for k, (a, b) in enumerate(skf.split(train, yt)):
    m = HistGradientBoostingClassifier(max_iter=200, learning_rate=0.030907735692320523,
        max_leaf_nodes=20, min_samples_leaf=71, l2_regularization=0.42180172158059204,
        random_state=k, early_stopping=False)
    m.fit(feat[train[a]], yt[a], sample_weight=np.where(yt[a] == 1, w_pos, 1.0))
    logit[train[b]] = m.decision_function(feat[train[b]])
    logit[other] += m.decision_function(feat[other]) / folds
val = split.val.numpy()
print("OOF train AUROC", roc_auc_score(yt, logit[train]),
      "val AUROC", roc_auc_score(y[val], logit[val]))
data.x = torch.cat([data.x, torch.from_numpy(logit).float()[:, None]], 1)
torch.save(data, out)
print(data)
