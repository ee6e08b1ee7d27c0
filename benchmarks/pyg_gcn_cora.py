"""Reference PyTorch Geometric GCN measurement on Planetoid (Cora / CiteSeer).

Follows the recipe of PyG's examples/gcn.py (public split, NormalizeFeatures,
input dropout 0.5 -> GCNConv(in, 16) -> ReLU -> dropout 0.5 -> GCNConv(16, C),
Adam lr 0.01, weight decay 5e-4 on conv1 only, 200 full-batch epochs), on CPU
with 2 threads. Data is read from local raw Planetoid files; nothing is
downloaded.

It needs a separate PyG environment, not the jaxgcn one:

    python3 -m venv PYG_VENV
    PYG_VENV/bin/pip install torch==2.13.0
    PYG_VENV/bin/pip install torch_geometric scipy numpy

Run it from the repository root:

    PYG_VENV/bin/python benchmarks/pyg_gcn_cora.py --seeds 10 --json out.json
    PYG_VENV/bin/python benchmarks/pyg_gcn_cora.py --dataset CiteSeer --seeds 3 --data-dir DIR

DIR holds the raw Planetoid files ind.<name>.{x,y,tx,ty,allx,ally,graph,test.index} (from
https://github.com/kimiyoung/planetoid/tree/master/data). Without --data-dir: $PLANETOID_DIR,
else a shared/datasets/planetoid folder beside the repository when there is one.
"""
import time

T_START = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch_geometric  # noqa: E402
import torch_geometric.transforms as T  # noqa: E402
from torch_geometric.datasets import Planetoid  # noqa: E402
from torch_geometric.nn import GCNConv  # noqa: E402

IMPORT_S = time.perf_counter() - T_START

SUFFIXES = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")


def default_data_dir():
    """$PLANETOID_DIR, else <repository>/../shared/datasets/planetoid if it exists, else None."""
    if os.environ.get("PLANETOID_DIR"):
        return os.environ["PLANETOID_DIR"]
    beside = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "planetoid"
    return str(beside) if beside.is_dir() else None


def check_data_dir(parser, name, data_dir):
    """Fail with the fix when the raw files are not there (rather than a traceback from shutil)."""
    missing = [f"ind.{name.lower()}.{s}" for s in SUFFIXES
               if data_dir is None or not (Path(data_dir) / f"ind.{name.lower()}.{s}").is_file()]
    if missing:
        parser.error(f"no raw Planetoid files for {name} in {data_dir or '(no --data-dir given)'}: missing "
                     f"{', '.join(missing)}; pass --data-dir DIR with the ind.{name.lower()}.* files of "
                     "https://github.com/kimiyoung/planetoid/tree/master/data (or set $PLANETOID_DIR)")


def load_dataset(name, data_dir):
    """Copy ind.<name>.* into a temp root so Planetoid processes them offline."""
    root = Path(tempfile.mkdtemp(prefix="pyg_planetoid_"))
    raw = root / name / "raw"
    raw.mkdir(parents=True)
    for suffix in SUFFIXES:
        fname = f"ind.{name.lower()}.{suffix}"
        shutil.copy(Path(data_dir) / fname, raw / fname)
    dataset = Planetoid(str(root), name, split="public", transform=T.NormalizeFeatures())
    data = dataset[0]
    shutil.rmtree(root, ignore_errors=True)
    return dataset, data


class GCN(torch.nn.Module):
    def __init__(self, in_dim, hidden, out_dim):
        super().__init__()
        self.conv1 = GCNConv(in_dim, hidden, cached=True)
        self.conv2 = GCNConv(hidden, out_dim, cached=True)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=0.5, training=self.training)
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, p=0.5, training=self.training)
        return self.conv2(x, edge_index)


def run_seed(seed, dataset, data, epochs):
    torch.manual_seed(seed)
    model = GCN(dataset.num_features, 16, dataset.num_classes)
    opt = torch.optim.Adam(
        [
            dict(params=model.conv1.parameters(), weight_decay=5e-4),
            dict(params=model.conv2.parameters(), weight_decay=0.0),
        ],
        lr=0.01,
    )
    masks = (data.train_mask, data.val_mask, data.test_mask)
    train_ms, eval_ms = [], []
    best_val, test_at_best_val = -1.0, 0.0
    t_run = time.perf_counter()
    for _ in range(epochs):
        t0 = time.perf_counter()
        model.train()
        opt.zero_grad()
        out = model(data.x, data.edge_index)
        loss = F.cross_entropy(out[data.train_mask], data.y[data.train_mask])
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        model.eval()
        with torch.no_grad():
            pred = model(data.x, data.edge_index).argmax(dim=-1)
            accs = [float((pred[m] == data.y[m]).float().mean()) for m in masks]
        t2 = time.perf_counter()
        train_ms.append((t1 - t0) * 1e3)
        eval_ms.append((t2 - t1) * 1e3)
        if accs[1] > best_val:
            best_val, test_at_best_val = accs[1], accs[2]
    run_s = time.perf_counter() - t_run
    return dict(
        seed=seed,
        final_test_acc=accs[2],
        final_val_acc=accs[1],
        best_val_acc=best_val,
        test_acc_at_best_val=test_at_best_val,
        final_loss=float(loss.detach()),
        median_train_epoch_ms=statistics.median(train_ms),
        median_eval_ms=statistics.median(eval_ms),
        run_s=run_s,
    )


def mean_std(values):
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="Cora", choices=["Cora", "CiteSeer"])
    p.add_argument("--data-dir", default=default_data_dir(),
                   help="folder with the raw ind.<name>.* Planetoid files (default: $PLANETOID_DIR, else "
                        "shared/datasets/planetoid beside the repository)")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", default=None, help="write results to this file")
    args = p.parse_args()
    check_data_dir(p, args.dataset, args.data_dir)

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    dataset, data = load_dataset(args.dataset, args.data_dir)
    load_s = time.perf_counter() - t0

    runs = []
    for seed in range(args.seeds):
        r = run_seed(seed, dataset, data, args.epochs)
        runs.append(r)
        print(f"seed {seed}: final test {r['final_test_acc']:.4f}  "
              f"test@best-val {r['test_acc_at_best_val']:.4f}  "
              f"train {r['median_train_epoch_ms']:.2f} ms/epoch  "
              f"eval {r['median_eval_ms']:.2f} ms  run {r['run_s']:.2f} s")

    final_m, final_s = mean_std([r["final_test_acc"] for r in runs])
    best_m, best_s = mean_std([r["test_acc_at_best_val"] for r in runs])
    summary = dict(
        dataset=args.dataset,
        torch=torch.__version__,
        torch_geometric=torch_geometric.__version__,
        threads=torch.get_num_threads(),
        epochs=args.epochs,
        seeds=args.seeds,
        import_s=IMPORT_S,
        load_s=load_s,
        final_test_acc_mean=final_m,
        final_test_acc_std=final_s,
        test_acc_at_best_val_mean=best_m,
        test_acc_at_best_val_std=best_s,
        median_train_epoch_ms=statistics.median(r["median_train_epoch_ms"] for r in runs),
        median_eval_ms=statistics.median(r["median_eval_ms"] for r in runs),
        median_run_s=statistics.median(r["run_s"] for r in runs),
        runs=runs,
    )
    print(f"{args.dataset}: import {IMPORT_S:.2f} s, load {load_s:.2f} s, "
          f"torch {torch.__version__}, PyG {torch_geometric.__version__}, "
          f"{summary['threads']} threads")
    print(f"final test acc {final_m:.4f} +- {final_s:.4f}; "
          f"test acc at best val {best_m:.4f} +- {best_s:.4f} over {args.seeds} seed(s)")
    print(f"median train epoch {summary['median_train_epoch_ms']:.2f} ms, "
          f"median eval {summary['median_eval_ms']:.2f} ms, "
          f"median {args.epochs}-epoch run {summary['median_run_s']:.2f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
