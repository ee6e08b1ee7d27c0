"""PyTorch Geometric's GCN on a graph written by bench_scale.py (run with a torch_geometric Python).

    PYG_VENV/bin/python benchmarks/pyg_gcn_scale.py --graph g.npz --adjacency csr

--adjacency edge_index: GCNConv's default path (gcn_norm with added self-loops and gather/scatter
messages on every forward). --adjacency csr: the normalized adjacency computed once and stored as
torch.sparse_csr_tensor, GCNConv(normalize=False): PyG's fastest and leanest CPU path. Host
preprocessing (to_undirected: coalescing and symmetrizing the raw edge list) is timed. Each epoch
is a training step plus an evaluation forward, as in PyG's examples/gcn.py. Prints one JSON line.
"""
import argparse
import json
import resource
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch_geometric.nn import GCNConv
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import remove_self_loops, to_undirected


class GCN(torch.nn.Module):
    def __init__(self, n_in, hidden, n_out, normalize):
        super().__init__()
        self.conv1 = GCNConv(n_in, hidden, normalize=normalize)
        self.conv2 = GCNConv(hidden, n_out, normalize=normalize)

    def forward(self, x, adj):
        x = F.dropout(x, 0.5, self.training)
        x = F.relu(self.conv1(x, adj))
        x = F.dropout(x, 0.5, self.training)
        return self.conv2(x, adj)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graph", required=True)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--adjacency", choices=("edge_index", "csr"), default="csr")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with np.load(args.graph) as z:
        senders, receivers = torch.from_numpy(z["senders"]), torch.from_numpy(z["receivers"])
        x = torch.from_numpy(z["features"])
        y = torch.from_numpy(z["labels"].astype(np.int64))
        train = torch.from_numpy(z["train"])
    n = x.shape[0]
    start = time.perf_counter()
    edge_index, _ = remove_self_loops(to_undirected(torch.stack([senders, receivers]), num_nodes=n))
    if args.adjacency == "csr":
        ei, w = gcn_norm(edge_index, None, n, add_self_loops=True)
        adj = torch.sparse_coo_tensor(torch.stack([ei[1], ei[0]]), w, (n, n)).coalesce().to_sparse_csr()
        del ei, w
    else:
        adj = edge_index
    host_s = time.perf_counter() - start
    model = GCN(x.shape[1], 128, int(y.max()) + 1, normalize=args.adjacency == "edge_index")
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    times = []
    for _ in range(1 + args.epochs):  # the first epoch is a warm-up, not counted
        t = time.perf_counter()
        model.train()
        opt.zero_grad()
        loss = F.cross_entropy(model(x, adj)[train], y[train])
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            model(x, adj)
        times.append(time.perf_counter() - t)
    print(json.dumps({"impl": f"PyG GCNConv {args.adjacency}", "host_s": host_s,
                      "epoch_s": statistics.median(times[1:]),
                      "epochs": times, "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
                      "edges": int(edge_index.shape[1])}))


if __name__ == "__main__":
    main()
