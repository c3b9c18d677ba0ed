"""Link prediction with ETConv as the encoder, in PyG's example style, beside a GCN encoder.

The graph is generated (no download): four planted communities of 100 nodes, an edge inside a
community with probability 0.08 and across with 0.005, and node features that are a noisy view
of the community. PyG's RandomLinkSplit holds out 10% of the edges for validation and 10% for
test; the encoders pass messages over the training edges only, a dot product of the two end
tokens scores a pair, and each epoch's negatives are drawn afresh. The epoch is chosen on
validation AUROC; test AUROC is read at that epoch. Run:

    python examples/etconv_link_prediction.py            # 100 epochs, 3 seeds
"""
import argparse

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from sklearn.metrics import roc_auc_score
from torch_geometric import seed_everything
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv
from torch_geometric.utils import negative_sampling, stochastic_blockmodel_graph

from et_graph.nn import ETConv

parser = argparse.ArgumentParser(allow_abbrev=False)
parser.add_argument('--epochs', type=int, default=100)
parser.add_argument('--hidden', type=int, default=32)
parser.add_argument('--seeds', type=int, default=3)
parser.add_argument('--lr', type=float, default=0.01)
args = parser.parse_args()
if args.epochs < 1 or args.hidden < 1 or args.seeds < 1 or not 0 < args.lr < float('inf'):
    parser.error('--epochs, --hidden and --seeds must be >= 1 and --lr a finite number > 0')


def planted_graph(seed):
    seed_everything(seed)
    blocks = torch.arange(4).repeat_interleave(100)
    edge_index = stochastic_blockmodel_graph(
        [100] * 4, torch.full((4, 4), 0.005).fill_diagonal_(0.08))
    x = F.one_hot(blocks).float() @ torch.randn(4, 16) + torch.randn(400, 16)
    return T.RandomLinkSplit(num_val=0.1, num_test=0.1, is_undirected=True,
                             add_negative_train_samples=False)(Data(x=x, edge_index=edge_index))


class ET(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels):
        super().__init__()
        self.lin = torch.nn.Linear(in_channels, hidden_channels)
        # One ET block, two descent steps; the message edges are the same every epoch.
        self.conv = ETConv(hidden_channels, heads=2, head_dim=16, steps=2, cached=True)

    def forward(self, x, edge_index):
        # The pair scores read the normalised tokens g = LN(x) after the descent.
        return self.conv.norm(self.conv(self.lin(x), edge_index))


class GCN(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels):
        super().__init__()
        # (not cached=True: GCNConv's cache keeps the first graph's normalised adjacency, and
        # validation and test pass other message edges)
        self.conv1 = GCNConv(in_channels, hidden_channels)
        self.conv2 = GCNConv(hidden_channels, hidden_channels)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


def decode(z, edge_label_index):
    return (z[edge_label_index[0]] * z[edge_label_index[1]]).sum(-1)


@torch.no_grad()
def auroc(model, split):
    model.eval()
    z = model(split.x, split.edge_index)
    return roc_auc_score(split.edge_label, decode(z, split.edge_label_index))


def run(encoder, seed):
    train, val, test = planted_graph(seed)
    # (negative_sampling draws with Python's random module: seeded here too)
    seed_everything(seed)
    model = encoder(train.num_features, args.hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    best_val, test_at_best = -1.0, None
    for _ in range(args.epochs):
        model.train()
        optimizer.zero_grad()
        z = model(train.x, train.edge_index)
        negative = negative_sampling(train.edge_index, train.num_nodes,
                                     num_neg_samples=train.edge_label_index.size(1))
        index = torch.cat([train.edge_label_index, negative], dim=1)
        label = torch.cat([train.edge_label, torch.zeros(negative.size(1))])
        F.binary_cross_entropy_with_logits(decode(z, index), label).backward()
        optimizer.step()
        val_auroc = auroc(model, val)
        if val_auroc > best_val:  # the epoch is chosen on validation; test is only read
            best_val, test_at_best = val_auroc, auroc(model, test)
    return best_val, test_at_best


print(f'{"encoder":8} {"val AUROC":>16} {"test AUROC":>16}   ({args.seeds} seeds, '
      f'{args.epochs} epochs)')
for name, encoder in (('ETConv', ET), ('GCN', GCN)):
    val, test = torch.tensor([run(encoder, seed) for seed in range(args.seeds)]).T

    def shown(t):  # mean ± std over the seeds (no spread from one seed)
        return f'{t.mean():.4f} ± {t.std():.4f}' if t.numel() > 1 else f'{t.mean():.4f} (1 seed)'
    print(f'{name:8} {shown(val):>16} {shown(test):>16}')
