"""The ``jaxgcn`` command line: parses arguments and calls the library, nothing more."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

EXIT_USAGE, EXIT_DIVERGED = 2, 1


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one line (no usage dump) and exits 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"jaxgcn: error: {message} (see '{self.prog} --help')\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _add_train_args(p: argparse.ArgumentParser) -> None:
    d = p.add_argument_group("data")
    d.add_argument("--dataset", default="cora", help="cora, citeseer, synthetic, or a raw Planetoid "
                   "name with --data-dir (default: cora)")
    d.add_argument("--data-dir", type=Path, help="folder with raw Planetoid files ind.<name>.*")
    d.add_argument("--norm", choices=("sym", "row", "none"), default="sym",
                   help="adjacency normalization (default: sym, D^-1/2 (A+I) D^-1/2)")
    d.add_argument("--feature-norm", choices=("row", "standardize", "none"), default="row",
                   help="feature preprocessing (default: row, as in the paper)")
    d.add_argument("--no-symmetrize", action="store_true", help="keep directed edges one-way")
    s = p.add_argument_group("synthetic dataset")
    s.add_argument("--nodes", type=_positive_int, default=2000)
    s.add_argument("--classes", type=_positive_int, default=5)
    s.add_argument("--features", type=_positive_int, default=64)
    s.add_argument("--avg-degree", type=float, default=8.0)
    s.add_argument("--homophily", type=float, default=0.8)
    s.add_argument("--train-per-class", type=_positive_int, default=20,
                   help="train nodes per class of the random split (default 20)")
    m = p.add_argument_group("model (defaults: the paper's)")
    m.add_argument("--hidden", type=_positive_int, default=16)
    m.add_argument("--layers", type=_positive_int, default=2)
    m.add_argument("--dropout", type=float, default=0.5, help="probability to DROP (default 0.5)")
    m.add_argument("--bias", action="store_true", help="add a bias per layer (the reference has none)")
    m.add_argument("--residual", action="store_true")
    m.add_argument("--layer-norm", action="store_true")
    m.add_argument("--backend", choices=("auto", "dense", "segment", "bcoo"), default="auto")
    m.add_argument("--dropout-rng", choices=("hash", "jax"), default="hash",
                   help="dropout masks from a fast counter hash (default) or jax.random.bernoulli")
    t = p.add_argument_group("training (defaults: the paper's)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--seeds", type=_positive_int, default=1, help="number of seeds: seed, seed+1, ...")
    t.add_argument("--epochs", type=_positive_int, default=200)
    t.add_argument("--lr", type=float, default=0.01)
    t.add_argument("--weight-decay", type=float, default=5e-4, help="L2 added to the loss")
    t.add_argument("--l2", choices=("first", "all"), default="first", help="layers the L2 covers")
    t.add_argument("--clip-norm", type=float, default=None, help="global-norm gradient clipping")
    t.add_argument("--early-stopping", choices=("kipf", "patience", "none"), default="kipf")
    t.add_argument("--window", type=_positive_int, default=10, help="Kipf's early-stopping window")
    t.add_argument("--patience", type=_positive_int, default=50)
    o = p.add_argument_group("output")
    o.add_argument("--json", type=Path, help="write the results to this JSON file")
    o.add_argument("--quiet", action="store_true", help="only the final summary")
    o.add_argument("--log-every", type=_positive_int, default=20)
    o.add_argument("--no-compile-cache", action="store_true",
                   help="do not use JAX's persistent compilation cache (~/.cache/jaxgcn)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="jaxgcn", description="Graph Convolutional Networks in JAX (Kipf & Welling 2017).")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    train = sub.add_parser("train", help="train a GCN and report test accuracy")
    _add_train_args(train)
    sub.add_parser("datasets", help="list the datasets --dataset accepts")
    return parser


def _enable_compile_cache() -> None:
    import jax

    cache = Path(os.environ.get("JAXGCN_CACHE_DIR", Path.home() / ".cache" / "jaxgcn" / "xla"))
    jax.config.update("jax_compilation_cache_dir", str(cache))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write atomically: a crash never leaves a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(tmp, path)


def _configs(args: argparse.Namespace, backend: str):
    from jaxgcn.models import GCNConfig
    from jaxgcn.train import TrainConfig

    model = GCNConfig(hidden=args.hidden, layers=args.layers, dropout=args.dropout, bias=args.bias,
                      residual=args.residual, layer_norm=args.layer_norm, backend=backend,
                      dropout_rng=args.dropout_rng)
    train = TrainConfig(lr=args.lr, weight_decay=args.weight_decay, l2=args.l2, epochs=args.epochs,
                        early_stopping=args.early_stopping, window=args.window,
                        patience=args.patience, clip_norm=args.clip_norm)
    return model, train


def _check_output(path: Path | None) -> None:
    if path is not None and not path.parent.is_dir():
        raise ValueError(f"--json {path}: folder {path.parent} does not exist; create it first")


def cmd_train(args: argparse.Namespace) -> int:
    import dataclasses

    import jax
    import numpy as np

    from jaxgcn.datasets import load_dataset, prepare
    from jaxgcn.train import fit

    _check_output(args.json)
    say = (lambda msg: None) if args.quiet else print
    raw = load_dataset(args.dataset, data_dir=args.data_dir, n_nodes=args.nodes, n_classes=args.classes,
                       n_features=args.features, avg_degree=args.avg_degree, homophily=args.homophily,
                       train_per_class=args.train_per_class, seed=args.seed)
    prepared = prepare(raw, norm=args.norm, feature_norm=args.feature_norm,
                       symmetrize=not args.no_symmetrize, backend=args.backend)
    model_config, train_config = _configs(args, prepared.backend)
    info = prepared.info
    say(f"{info['dataset']}: {info['n_nodes']} nodes, {info['n_edges']} edges, {info['n_features']} "
        f"features, {info['n_classes']} classes | backend {prepared.backend}"
        + (f" | {info['edges_symmetrized']} one-way edges symmetrized" if info["edges_symmetrized"] else ""))
    seeds = [args.seed + i for i in range(args.seeds)]
    results = []
    for seed in seeds:
        if len(seeds) > 1:
            say(f"seed {seed}")
        res = fit(prepared.data, prepared.n_classes, model_config=model_config, config=train_config,
                  key=jax.random.key(seed), log_every=args.log_every, log=say)
        results.append(res)
    test = np.array([r.metrics["test_acc"] for r in results])
    val = np.array([r.metrics["val_acc"] for r in results])
    compile_s = sum(r.compile_seconds for r in results)
    train_s = sum(r.train_seconds for r in results)
    epochs = [r.epochs_run for r in results]
    print(f"test accuracy {test.mean():.4f} ± {test.std():.4f} over {len(seeds)} seed(s) | val "
          f"{val.mean():.4f} | epochs {min(epochs)}-{max(epochs)} | compile {compile_s:.2f}s | "
          f"train {train_s:.2f}s ({1e3 * train_s / sum(epochs):.2f} ms/epoch)")
    if args.json is not None:
        _write_json(args.json, {
            "dataset": info["dataset"], "n_nodes": info["n_nodes"], "n_edges": info["n_edges"],
            "n_features": info["n_features"], "n_classes": info["n_classes"], "backend": prepared.backend,
            "config": {"model": dataclasses.asdict(model_config), "train": dataclasses.asdict(train_config),
                       "norm": args.norm, "feature_norm": args.feature_norm},
            "graph_report": {k: info[k] for k in ("input_edges", "duplicates_merged", "self_loops_found",
                                                  "edges_symmetrized", "isolated_nodes")},
            "seeds": seeds, "test_acc": test.tolist(), "test_acc_mean": float(test.mean()),
            "test_acc_std": float(test.std()), "val_acc": val.tolist(), "val_acc_mean": float(val.mean()),
            "epochs_run": epochs, "stopped_early": [r.stopped_early for r in results],
            "compile_seconds": compile_s, "train_seconds": train_s,
        })
    return 0


def cmd_datasets(args: argparse.Namespace) -> int:
    from jaxgcn.datasets import available

    for name, description in available():
        print(f"{name:24s} {description}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``jaxgcn`` console script; returns the exit code."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed on one line
        return int(exc.code or 0)
    try:
        if args.command == "train":
            if not args.no_compile_cache:
                _enable_compile_cache()
            return cmd_train(args)
        return cmd_datasets(args)
    except ValueError as exc:
        from jaxgcn.train import TrainingDiverged

        code = EXIT_DIVERGED if isinstance(exc, TrainingDiverged) else EXIT_USAGE
        print(f"jaxgcn: error: {exc}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
