"""Graph classification with edge features: ETConv(edge_dim=...) in PyG's example style.

MUTAG (188 molecules, shipped): atoms one-hot (7 types), bonds one-hot (4 types) as
``edge_attr``. Four models share one skeleton (a linear input map, two graph layers, sum and
mean pooling, an MLP head) and differ only in the graph layers:

* ``et_edges``:    two ETConv blocks whose keys the bond types offset (``edge_dim=4``)
* ``et``:          the same without the bonds (``edge_dim=None``)
* ``transformer``: TransformerConv(edge_dim=4), with ReLU and a skip connection
* ``gine``:        GINEConv (its MLP reads x_j + the bond's embedding), with ReLU and a skip

Protocol: stratified 10-fold cross-validation; in each fold a stratified tenth of the training
graphs is the validation split, and the test accuracy is read at the epoch of the best
validation accuracy (the earliest of ties). Nothing is tuned: every model runs the settings
below. Mean and std over the folds, and a JSON file with every fold.
Run:  python examples/etconv_edge_features.py [--epochs 100] [--json results.json]
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from sklearn.model_selection import StratifiedKFold, train_test_split
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GINEConv, TransformerConv, global_add_pool, global_mean_pool
from tqdm import tqdm

from et_graph.datasets.tudataset import load_tudataset
from et_graph.nn import ETConv

MODELS = ('et_edges', 'et', 'transformer', 'gine')
parser = argparse.ArgumentParser(allow_abbrev=False)
parser.add_argument('--epochs', type=int, default=100)
parser.add_argument('--hidden', type=int, default=32)
parser.add_argument('--lr', type=float, default=0.005)
parser.add_argument('--folds', type=int, default=10)
parser.add_argument('--models', default=','.join(MODELS), help='comma-separated subset')
parser.add_argument('--json', default=None, help='write every fold to this file')
args = parser.parse_args()
models = args.models.split(',')
# (an even width: TransformerConv's two heads of hidden // 2 must give hidden back for the skip)
if args.epochs < 1 or args.hidden < 2 or args.hidden % 2 or not 0 < args.lr < float('inf'):
    parser.error('--epochs >= 1, --hidden an even number >= 2 and --lr a finite number > 0')
if not models or any(name not in MODELS for name in models) or len(set(models)) < len(models):
    parser.error(f'--models takes a comma-separated subset of {",".join(MODELS)}, each once')

graphs, info = load_tudataset(None, 'MUTAG', pe_dim=0, progress=False)
labels = [int(graph.y) for graph in graphs]
smallest_class = min(labels.count(label) for label in set(labels))
if not 2 <= args.folds <= smallest_class:
    parser.error(f'--folds must be from 2 to {smallest_class} (the smaller class\'s graphs)')
in_channels, edge_dim = info['node_feature_width'], info['edge_features']


class GraphLayers(torch.nn.Module):
    """Two graph layers of one kind over ``hidden`` channels."""

    def __init__(self, kind, hidden):
        super().__init__()
        self.kind = kind
        if kind in ('et_edges', 'et'):
            # ET blocks update the tokens by descent on one energy: no activation between.
            self.convs = torch.nn.ModuleList(
                ETConv(hidden, heads=2, head_dim=hidden // 2, steps=1, alpha=0.5,
                       edge_dim=edge_dim if kind == 'et_edges' else None) for _ in range(2))
        elif kind == 'transformer':
            self.convs = torch.nn.ModuleList(
                TransformerConv(hidden, hidden // 2, heads=2, edge_dim=edge_dim)
                for _ in range(2))
        else:
            self.convs = torch.nn.ModuleList(GINEConv(torch.nn.Sequential(
                torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden)),
                edge_dim=edge_dim) for _ in range(2))

    def forward(self, x, edge_index, edge_attr):
        for conv in self.convs:
            if self.kind == 'et':
                x = conv(x, edge_index)
            elif self.kind == 'et_edges':
                x = conv(x, edge_index, edge_attr=edge_attr)
            else:
                x = x + F.relu(conv(x, edge_index, edge_attr))
        return x


class Net(torch.nn.Module):
    def __init__(self, kind, hidden):
        super().__init__()
        self.lin_in = torch.nn.Linear(in_channels, hidden)
        self.layers = GraphLayers(kind, hidden)
        self.head = torch.nn.Sequential(torch.nn.Linear(2 * hidden, hidden), torch.nn.ReLU(),
                                        torch.nn.Dropout(0.5), torch.nn.Linear(hidden, 2))

    def forward(self, data):
        x = self.layers(self.lin_in(data.x), data.edge_index, data.edge_attr)
        pooled = torch.cat([global_add_pool(x, data.batch), global_mean_pool(x, data.batch)], 1)
        return self.head(pooled)


@torch.no_grad()
def accuracy(model, loader):
    model.eval()
    correct = sum(int((model(batch).argmax(-1) == batch.y).sum()) for batch in loader)
    return correct / len(loader.dataset)


def run_fold(kind, fold, train_index, test_index):
    torch.manual_seed(fold)
    train_index, val_index = train_test_split(
        train_index, test_size=0.1, stratify=[labels[i] for i in train_index], random_state=fold)
    train_loader = DataLoader([graphs[i] for i in train_index], batch_size=32, shuffle=True)
    val_loader = DataLoader([graphs[i] for i in val_index], batch_size=128)
    test_loader = DataLoader([graphs[i] for i in test_index], batch_size=128)
    model = Net(kind, args.hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    best_val, test_at_best, best_epoch = -1.0, 0.0, 0
    for epoch in range(1, args.epochs + 1):
        model.train()
        for batch in train_loader:
            optimizer.zero_grad()
            F.cross_entropy(model(batch), batch.y).backward()
            optimizer.step()
        val = accuracy(model, val_loader)
        if val > best_val:  # the test split is read only here, never to choose
            best_val, test_at_best, best_epoch = val, accuracy(model, test_loader), epoch
    return {'val': best_val, 'test': test_at_best, 'epoch': best_epoch}


folds = list(StratifiedKFold(args.folds, shuffle=True, random_state=0).split(labels, labels))
results = {kind: [] for kind in models}
with tqdm(total=len(models) * len(folds), desc='folds') as bar:
    for fold, (train_index, test_index) in enumerate(folds):
        for kind in models:
            results[kind].append(run_fold(kind, fold, train_index, test_index))
            bar.update()

print(f'\nMUTAG, {args.folds}-fold CV, epoch chosen on validation, {args.epochs} epochs, '
      f'hidden {args.hidden}, lr {args.lr}:\n')
print('| model | test accuracy (mean ± std) | validation accuracy |')
print('|---|---|---|')
for kind in models:
    tests = [100 * r['test'] for r in results[kind]]
    vals = [100 * r['val'] for r in results[kind]]
    print(f'| {kind} | {statistics.mean(tests):.1f} ± {statistics.stdev(tests):.1f} | '
          f'{statistics.mean(vals):.1f} |')
if args.json:
    with open(args.json, 'w', encoding='utf-8') as out:
        json.dump({'settings': vars(args), 'folds': results}, out, indent=2)
