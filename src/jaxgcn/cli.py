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


INT32_MAX = 2**31 - 1  # counts, ids and training seeds reach the device as int32
MAX_EPOCHS = 1_000_000  # --epochs/--window/--patience: per-epoch history and the window are held in memory
MAX_LAYERS = 1_000  # every layer is unrolled into the one compiled program
MAX_RUNS = 10_000  # --seeds/--splits: every run's spec and split masks are built up front


def _int_in(lo: int, hi: int, why: str = "") -> Any:
    """An argparse type: an integer in [lo, hi]; anything else is refused on one line."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'a positive integer' if lo == 1 else 'an integer'}") \
                from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"{text} is not a positive integer" if lo == 1 else
                                             f"{text} is below {lo}; give an integer from {lo} to {hi:,}{why}")
        if value > hi:
            raise argparse.ArgumentTypeError(f"{text} is too large; give an integer from {lo} to {hi:,}{why}")
        return value
    return parse


_positive_int = _int_in(1, INT32_MAX)
_epochs = _int_in(1, MAX_EPOCHS, " (every epoch's metrics are kept)")
_layers = _int_in(1, MAX_LAYERS)
_runs = _int_in(1, MAX_RUNS)
_seed = _int_in(0, INT32_MAX, " (seeds are int32 on the device; --seed + --seeds - 1 must fit too)")
_data_seed = _int_in(0, 2**63 - 1)


def _list_of(kind: Any, what: str, each: Any = None) -> Any:
    """A comma-separated list of ``kind``; ``each`` (an argparse type) then checks every value's range."""
    def parse(text: str) -> tuple:
        try:
            values = tuple(kind(v) for v in text.split(",") if v.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of {what}") from None
        if not values:
            raise argparse.ArgumentTypeError(f"{text!r}: give at least one value")
        return tuple(each(str(v)) for v in values) if each is not None else values
    return parse


def _bytes(text: str) -> int:
    units = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    body, unit = (text[:-1], text[-1].upper()) if text[-1:].upper() in units and text[-1:].isalpha() else (text, "")
    try:
        value = int(float(body) * units[unit])
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 4G or 512M") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


REORDER_MIN_NODES = 100_000  # below this the features fit in cache and renumbering gains little
OVERFIT_GAP = 0.3  # train minus validation accuracy above which the CLI prints a hint


def _add_data_args(p: argparse.ArgumentParser) -> None:
    """Arguments that name the data and its split (train, sweep, evaluate, predict)."""
    d = p.add_argument_group("data")
    d.add_argument("--dataset", default="cora", help="cora, citeseer, synthetic, or a raw Planetoid "
                   "name with --data-dir (default: cora)")
    d.add_argument("--data-dir", type=Path, help="folder with raw Planetoid files ind.<name>.*")
    d.add_argument("--edges", type=Path, help="your graph: edge file (CSV src,dst[,weight] or 'src dst' lines); "
                   "with --labels FILE and optionally --features FILE")
    d.add_argument("--labels", type=Path, help="with --edges: CSV node,label (names or integers)")
    d.add_argument("--split-file", type=Path, help="CSV node,split (train/val/test) naming the split")
    d.add_argument("--train-frac", type=float, default=None,
                   help="stratified random split by fractions (with --val-frac, --test-frac)")
    d.add_argument("--val-frac", type=float, default=None, help="with --train-frac (default 0.1)")
    d.add_argument("--test-frac", type=float, default=None, help="with --train-frac (default 0.2)")
    d.add_argument("--save-split", type=Path, help="write the split used as CSV node,split (for --split-file)")
    d.add_argument("--ogb-split", default=None, help="with --dataset ogb:DIR, the split/<name> to use "
                   "(default: the only one)")
    d.add_argument("--feature-norm", choices=("row", "standardize", "none"), default="row",
                   help="feature preprocessing (default: row, as in the paper)")
    d.add_argument("--no-symmetrize", action="store_true", help="keep directed edges one-way")
    d.add_argument("--reorder", choices=("auto", "rcm", "none"), default="auto",
                   help=f"renumber nodes for memory locality (reverse Cuthill-McKee); auto: rcm from "
                        f"{REORDER_MIN_NODES:,} nodes on (metrics do not depend on the numbering)")
    s = p.add_argument_group("synthetic dataset")
    s.add_argument("--nodes", type=_positive_int, default=2000)
    s.add_argument("--classes", type=_positive_int, default=5)
    s.add_argument("--features", default=None,
                   help="synthetic: the feature count (default 64); with --edges: the features file "
                        "(node,f0,f1,... or node,feature,value CSV, .npy or .npz; absent: one-hot ids)")
    s.add_argument("--avg-degree", type=float, default=8.0)
    s.add_argument("--homophily", type=float, default=0.8)
    d.add_argument("--data-seed", type=_data_seed, default=0,
                   help="seed of the synthetic graph and of random split k (data seed + k); --seed "
                        "only seeds training, so --seeds N equals N runs of --seed s")
    s.add_argument("--train-per-class", type=_positive_int, default=20,
                   help="train nodes per class of a random split (default 20)")
    d.add_argument("--split", choices=("public", "random"), default="public",
                   help="public (the dataset's own split) or random Planetoid-style splits")
    d.add_argument("--splits", type=_runs, default=1, help="number of random splits (--split random)")
    d.add_argument("--val", type=_positive_int, default=500, help="validation nodes of a random split")
    d.add_argument("--test", type=_positive_int, default=1000, help="test nodes of a random split")
    d.add_argument("--norm", choices=("sym", "row", "none"), default="sym",
                   help="adjacency normalization (default: sym, D^-1/2 (A+I) D^-1/2)")


def _add_train_args(p: argparse.ArgumentParser, grid: bool = False) -> None:
    """Arguments shared by ``train`` and ``sweep``; with ``grid`` the swept ones take lists."""
    ints = _list_of(int, "integers", _positive_int) if grid else _positive_int
    floats = _list_of(float, "numbers") if grid else float
    _add_data_args(p)
    m = p.add_argument_group("model (defaults: the paper's)")
    m.add_argument("--hidden", type=ints, default=(16,) if grid else 16)
    m.add_argument("--layers", type=_list_of(int, "integers", _layers) if grid else _layers, default=(2,) if grid else 2)
    m.add_argument("--dropout", type=floats, default=(0.5,) if grid else 0.5,
                   help="probability to DROP (default 0.5)")
    m.add_argument("--bias", action="store_true", help="add a bias per layer (the reference has none)")
    m.add_argument("--residual", action="store_true")
    m.add_argument("--layer-norm", action="store_true")
    m.add_argument("--backend", choices=("auto", "dense", "segment", "bcoo", "csr"), default="auto")
    m.add_argument("--chunk-edges", type=_positive_int, default=None,
                   help="segment backend: propagate in blocks of N edges (bounds the message buffer)")
    m.add_argument("--aggregate-first", choices=("auto", "on", "off"), default="auto",
                   help="first layer as (A X) W instead of A (X W) for dense features; auto: when 2 x "
                        "features < 3 x hidden (cheaper: no propagation in its backward pass)")
    m.add_argument("--dropout-rng", choices=("hash", "jax"), default="hash",
                   help="dropout masks from a fast counter hash (default) or jax.random.bernoulli")
    t = p.add_argument_group("training (defaults: the paper's)")
    t.add_argument("--seed", type=_seed, default=0)
    t.add_argument("--seeds", type=_runs, default=1, help="number of seeds: seed, seed+1, ...")
    t.add_argument("--epochs", type=_epochs, default=200)
    t.add_argument("--lr", type=floats, default=(0.01,) if grid else 0.01)
    t.add_argument("--weight-decay", type=floats, default=(5e-4,) if grid else 5e-4, help="L2 added to the loss")
    t.add_argument("--l2", choices=("first", "all"), default="first", help="layers the L2 covers")
    t.add_argument("--clip-norm", type=float, default=None, help="global-norm gradient clipping")
    t.add_argument("--early-stopping", choices=("kipf", "patience", "none"), default="kipf")
    t.add_argument("--window", type=_epochs, default=10, help="Kipf's early-stopping window")
    t.add_argument("--patience", type=_epochs, default=50)
    o = p.add_argument_group("output")
    o.add_argument("--json", type=Path, help="write the results to this JSON file")
    if not grid:
        o.add_argument("--save", type=Path, help="save the trained model as a checkpoint directory")
        o.add_argument("--checkpoint-every", type=_positive_int, default=None,
                       help="with --save: also save the whole run state every K epochs (for --resume)")
        o.add_argument("--resume", type=Path, default=None,
                       help="continue an interrupted --checkpoint-every run from its checkpoint directory")
    o.add_argument("--devices", type=_positive_int, default=None,
                   help="devices to shard the run axis (or, with --shard-graph, the graph's rows) over "
                        "(default: all visible)")
    g = p.add_argument_group("several devices and processes (see the README's distributed section)")
    if not grid:
        g.add_argument("--shard-graph", action="store_true",
                       help="split the graph's nodes into row blocks, one per device, and train the one "
                            "full graph across them (on a CPU: --devices N CPU devices)")
        g.add_argument("--exchange", choices=("auto", "all_gather", "halo"), default="auto",
                       help="with --shard-graph: how a device gets the neighbour rows it needs: all of "
                            "them (all_gather) or only those its edges read (halo); auto: halo when it "
                            "receives fewer rows")
    g.add_argument("--distributed", action="store_true",
                   help="join a multi-process job (jax.distributed); train shards the graph's rows over "
                        "every device of every process, sweep shares the runs out; only process 0 writes")
    g.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                   help="with --distributed: process 0's address (default: detected, e.g. from SLURM)")
    g.add_argument("--num-processes", type=_positive_int, default=None)
    g.add_argument("--process-id", type=_int_in(0, INT32_MAX), default=None)
    o.add_argument("--quiet", action="store_true", help="only the final summary (no bar, no progress lines)")
    o.add_argument("--log-every", type=_positive_int, default=20,
                   help="progress and --log period in epochs (default 20)")
    if not grid:
        o.add_argument("--log", type=Path, default=None,
                       help="append one JSON line per logged epoch and run (epoch, loss, train/val accuracy, "
                            "val loss, elapsed seconds) to this file; `jaxgcn plot curves` draws it")
        o.add_argument("--tensorboard", type=Path, default=None,
                       help="also write TensorBoard event files here (needs tensorboardX)")
    o.add_argument("--debug", action="store_true",
                   help="check the first training step with jax_debug_nans and checkify index/NaN checks")
    o.add_argument("--no-compile-cache", action="store_true",
                   help="do not use JAX's persistent compilation cache (~/.cache/jaxgcn)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="jaxgcn", description="Graph Convolutional Networks in JAX (Kipf & Welling 2017).")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    train = sub.add_parser("train", help="train a GCN and report test accuracy")
    _add_train_args(train)
    sweep = sub.add_parser("sweep", help="a hyperparameter grid x seeds x splits in few compiled programs")
    _add_train_args(sweep, grid=True)
    sweep.add_argument("--csv", type=Path, help="write one row per configuration to this CSV file")
    sweep.add_argument("--memory-budget", type=_bytes, default=None,
                       help="split groups into chunks that fit (e.g. 4G; default: half the available memory)")
    part = sub.add_parser("partition", help="split a dataset into per-device row blocks on disk, so each "
                          "process of a --distributed job reads only its own (--dataset partitioned:DIR)")
    _add_data_args(part)
    part.add_argument("--parts", type=_positive_int, required=True, help="devices of the job that will train")
    part.add_argument("--exchange", choices=("auto", "all_gather", "halo"), default="auto",
                      help="the exchange the blocks are laid out for (auto: halo when it receives fewer rows)")
    part.add_argument("--out", type=Path, required=True, help="the directory to write")
    plot = sub.add_parser("plot", help="PNG figures: training curves (--log), node embeddings (--checkpoint), "
                          "a sweep heatmap (--sweep-json)")
    plot.add_argument("kind", choices=("curves", "embeddings", "sweep"))
    plot.add_argument("--out", type=Path, required=True, help="the PNG file to write")
    plot.add_argument("--log", type=Path, help="curves: a file written by train --log")
    plot.add_argument("--checkpoint", type=Path, help="embeddings: a directory written by train --save")
    plot.add_argument("--method", choices=("pca", "tsne"), default="pca",
                      help="embeddings: 2-D projection (tsne needs scikit-learn)")
    plot.add_argument("--sweep-json", type=Path, help="sweep: a file written by sweep --json")
    plot.add_argument("--x", default="lr", help="sweep: hyperparameter on the x axis (default lr)")
    plot.add_argument("--y", default="hidden", help="sweep: hyperparameter on the y axis (default hidden)")
    plot.add_argument("--title", default=None)
    _add_data_args(plot)
    info = sub.add_parser("info", help="a dataset's statistics: size, cleaning, degrees, classes, features, "
                          "memory estimate")
    _add_data_args(info)
    info.add_argument("--hidden", type=_positive_int, default=16, help="for the memory estimate (default 16)")
    info.add_argument("--json", type=Path, help="also write the statistics to this JSON file")
    sub.add_parser("datasets", help="list the datasets --dataset accepts")
    for name, text in (("evaluate", "metrics of a saved model on a dataset's split"),
                       ("predict", "class predictions of a saved model, written as CSV")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--checkpoint", type=Path, required=True, help="a directory written by train --save")
        _add_data_args(cmd)
        if name == "predict":
            cmd.add_argument("--out", type=Path, required=True, help="CSV node,label,prob_<class>...")
        else:
            cmd.add_argument("--on", choices=("test", "val", "train", "labelled"), default="test",
                             help="the nodes to score (default: the test split)")
            cmd.add_argument("--json", type=Path, help="write the metrics to this JSON file")
    return parser


def _enable_compile_cache() -> None:
    import jax

    cache = Path(os.environ.get("JAXGCN_CACHE_DIR", Path.home() / ".cache" / "jaxgcn" / "xla"))
    jax.config.update("jax_compilation_cache_dir", str(cache))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def _use_cpu_cores(args: argparse.Namespace) -> None:
    """For batched runs, expose one CPU device per core so the run axis is sharded over them (the
    gather/scatter kernels of one device use one core; measured 1.6x on 2 cores). No-op when
    XLA_FLAGS already sets a device count or JAX is already running (library use)."""
    if getattr(args, "shard_graph", False) or args.distributed:
        if args.devices and not args.distributed and "xla_force_host_platform_device_count" not in \
                os.environ.get("XLA_FLAGS", ""):
            import jax

            try:
                jax.config.update("jax_num_cpu_devices", args.devices)  # CPU only; GPUs are what they are
            except RuntimeError:
                pass
        return
    batched = args.command == "sweep" or (args.seeds > 1 or args.splits > 1)
    cores = args.devices or os.cpu_count() or 1
    if not batched or cores < 2 or "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return
    from jaxgcn.csr import kernel_possible

    if args.backend in ("auto", "csr") and kernel_possible() and not args.devices:
        return  # the fused kernel uses every core of one device
    import jax

    try:
        jax.config.update("jax_num_cpu_devices", cores)
    except RuntimeError:
        pass


def _json_text(payload: dict[str, Any]) -> str:
    return json.dumps(payload, indent=2) + "\n"


def _configs(args: argparse.Namespace, backend: str, **grid: Any):
    from jaxgcn.models import GCNConfig
    from jaxgcn.train import TrainConfig

    pick = {k: grid.get(k, getattr(args, k)) for k in ("hidden", "layers", "dropout", "lr", "weight_decay")}
    model = GCNConfig(hidden=pick["hidden"], layers=pick["layers"], dropout=pick["dropout"], bias=args.bias,
                      residual=args.residual, layer_norm=args.layer_norm, backend=backend,
                      dropout_rng=args.dropout_rng, chunk_edges=args.chunk_edges)
    train = TrainConfig(lr=pick["lr"], weight_decay=pick["weight_decay"], l2=args.l2, epochs=args.epochs,
                        early_stopping=args.early_stopping, window=args.window,
                        patience=args.patience, clip_norm=args.clip_norm)
    return model, train


# Every output of every command: (flag, attribute, kind). file: replaced atomically; append: --log;
# checkpoint/partitions: a directory jaxgcn owns (replaced only when it holds that kind of output); dir: any.
OUTPUTS = {
    "train": (("--json", "json", "file"), ("--save-split", "save_split", "file"), ("--log", "log", "append"),
              ("--save", "save", "checkpoint"), ("--tensorboard", "tensorboard", "dir")),
    "sweep": (("--json", "json", "file"), ("--csv", "csv", "file"), ("--save-split", "save_split", "file")),
    "evaluate": (("--json", "json", "file"),),
    "predict": (("--out", "out", "file"),),
    "plot": (("--out", "out", "file"),),
    "info": (("--json", "json", "file"), ("--save-split", "save_split", "file")),
    "partition": (("--out", "out", "partitions"), ("--save-split", "save_split", "file")),
}
INPUTS = (("--edges", "edges"), ("--features", "features"), ("--labels", "labels"), ("--split-file", "split_file"),
          ("--checkpoint", "checkpoint"), ("--sweep-json", "sweep_json"))
F32_MAX = 3.4028234663852886e38


def _inputs(args: argparse.Namespace) -> list[tuple[str, Path]]:
    """The input files the arguments name (plot's --log is an input; --features is a count without --edges)."""
    found = [(flag, Path(getattr(args, attr))) for flag, attr in INPUTS if getattr(args, attr, None) is not None
             and (attr != "features" or args.edges is not None)]
    if args.command == "plot" and args.log is not None:
        found.append(("--log", args.log))
    return found


def _check_inputs(args: argparse.Namespace) -> None:
    """An existing input file that cannot be read (permissions, an I/O error) is named before any work;
    missing files and wrong formats are for the readers to report."""
    for flag, path in _inputs(args):
        if not path.is_file():
            continue
        try:
            with open(path, "rb") as f:
                f.read(1)
        except OSError as err:
            raise ValueError(f"{flag} {path}: cannot be read ({err.strerror}); check that the file is readable "
                             "(its permissions, the disk)") from None


def _check_outputs(args: argparse.Namespace) -> None:
    """Every output path of the command, checked before any work (data loading, training), so a run
    never fails at its end for a path that was wrong from the start. Two outputs naming one file, or an
    output naming an input, are refused too."""
    from jaxgcn import outputs

    if getattr(args, "save_split", None) is not None and args.command in ("evaluate", "predict", "plot"):
        raise ValueError(f"--save-split {args.save_split}: `jaxgcn {args.command}` draws no split to save; "
                         "write it with `jaxgcn train --save-split FILE`")
    seen: dict[str, str] = {}
    for flag, attr, kind in OUTPUTS.get(args.command, ()):
        path = getattr(args, attr, None)
        if path is None:
            continue
        if kind in ("file", "append"):
            example = {"--json": "results.json", "--csv": "sweep.csv", "--save-split": "split.csv",
                       "--log": "train.jsonl", "--out": "plot.png" if args.command == "plot" else "predictions.csv"}
            target = outputs.check_file(flag, path, append=kind == "append", example=example[flag])
        elif kind == "checkpoint":
            target = outputs.check_dir(flag, path, marker="checkpoint.json", what="a checkpoint to replace")
        elif kind == "partitions":
            target = outputs.check_dir(flag, path, marker="partitions.json", what="partitions to replace")
        else:
            target = outputs.check_dir(flag, path)
        key = os.path.realpath(target)
        if key in seen:
            raise ValueError(f"{flag} {path} and {seen[key]} name the same path; give each output its own")
        seen[key] = f"{flag} {path}"
    for flag, path in _inputs(args):
        if os.path.realpath(path) in seen:
            raise ValueError(f"{seen[os.path.realpath(path)]} would overwrite the {flag} input; give the output "
                             "another path")


def _check_numbers(args: argparse.Namespace) -> None:
    """Float flags that training computes with in float32 must be finite and fit in it."""
    import math

    for flag, attr, example in (("--lr", "lr", "0.01"), ("--weight-decay", "weight_decay", "5e-4"),
                                ("--clip-norm", "clip_norm", "1.0"), ("--dropout", "dropout", "0.5")):
        values = getattr(args, attr, None)
        for value in values if isinstance(values, tuple) else (values,):
            if value is None:
                continue
            if not math.isfinite(value):
                raise ValueError(f"{flag} {value}: not a finite number; give a value such as {example}")
            if abs(value) > F32_MAX:
                raise ValueError(f"{flag} {value:g}: larger than float32 holds (max 3.4e+38), training would compute "
                                 f"with inf; give a value such as {example}")
    seed, seeds = getattr(args, "seed", None), getattr(args, "seeds", None)
    if seed is not None and seeds is not None and seed + seeds - 1 > INT32_MAX:
        raise ValueError(f"--seed {seed} --seeds {seeds}: the last seed, {seed + seeds - 1}, does not fit in int32 "
                         f"(seeds are int32 on the device); use --seed {INT32_MAX - seeds + 1} or lower")


def _check_split_flags(args: argparse.Namespace) -> None:
    """Split flags that contradict each other or would be silently ignored are refused."""
    given = "--split-file" if args.split_file is not None else "--train-frac" if args.train_frac is not None else None
    if args.split_file is not None and args.train_frac is not None:
        raise ValueError(f"--split-file {args.split_file} and --train-frac {args.train_frac} both choose the split; "
                         "give one of them")
    if args.split_file is not None and args.split == "random":
        raise ValueError(f"--split-file {args.split_file} gives the split and --split random would draw another; "
                         "drop one of them")
    if args.train_frac is None and (args.val_frac is not None or args.test_frac is not None):
        raise ValueError("--val-frac/--test-frac shape a fraction split and need --train-frac; without it they "
                         "would be ignored")
    if args.splits > 1 and given:
        raise ValueError(f"--splits {args.splits} draws {args.splits} Planetoid-style random splits (seeds "
                         f"--data-seed + k); {given} gives one split, so every run would get the same one: drop "
                         f"--splits, or {given} (to use several fraction splits, run once per --data-seed)")
    if args.splits > 1 and args.split != "random":
        raise ValueError(f"--splits {args.splits} needs --split random (the public split is one split)")


def _warn_tensorboard(args: argparse.Namespace) -> None:
    """--tensorboard without tensorboardX: say so even with --quiet (the user asked for files that will
    not appear), on stderr, once, before the run; the run goes on without event files."""
    import importlib.util

    if getattr(args, "tensorboard", None) is not None and importlib.util.find_spec("tensorboardX") is None:
        print(f"jaxgcn: warning: --tensorboard {args.tensorboard}: tensorboardX is not installed (pip install "
              "tensorboardX); no event files are written (--log FILE keeps the same metrics as JSON lines)",
              file=sys.stderr, flush=True)
        args.tensorboard = None


def _prelude(args: argparse.Namespace) -> None:
    """The checks every data command runs before any work: flags, inputs, outputs."""
    if hasattr(args, "split_file"):
        _check_split_flags(args)
    _check_numbers(args)
    _check_inputs(args)
    if not getattr(args, "distributed", False) or _is_writer():  # only process 0 of a job writes
        _check_outputs(args)


def _load(args: argparse.Namespace, say: Any, on_device: bool = True, two_classes: bool = True):
    """Load, clean and prepare the dataset the arguments name (random splits stacked when asked).
    ``two_classes``: refuse data whose labelled nodes are all in one class (training needs two)."""
    from jaxgcn.datasets import prepare, with_random_splits

    if args.save_split is not None and args.splits > 1:
        raise ValueError(f"--save-split writes one split; --splits {args.splits} draws several")
    import time

    start = time.perf_counter()
    tty = sys.stdout.isatty() and not getattr(args, "quiet", False)
    if tty:
        print(f"reading {args.dataset if args.edges is None else args.edges}…", end="\r", flush=True)
    raw = _raw(args)
    n_nodes = raw.features.shape[0]
    if tty:
        print(f"preparing {n_nodes:,} nodes (cleaning, normalizing{', RCM' if n_nodes >= REORDER_MIN_NODES else ''})…",
              end="\r", flush=True)
    reorder = "rcm" if args.reorder == "auto" and n_nodes >= REORDER_MIN_NODES else args.reorder
    prepared = prepare(raw, norm=args.norm, feature_norm=args.feature_norm,
                       symmetrize=not args.no_symmetrize, backend=args.backend,
                       reorder="none" if reorder == "auto" else reorder, on_device=on_device)
    node_ids = raw.node_ids if raw.node_ids is not None else None
    args._node_ids = node_ids
    del raw  # the host copy of a large graph is not needed past this point
    if two_classes:
        _require_two_classes(args, prepared)
    if _random_splits(args):
        import numpy as np

        prepared = with_random_splits(prepared, np.asarray(prepared.data.labels), args.splits, per_class=args.train_per_class,
                                      n_val=args.val, n_test=args.test, seed=args.data_seed)
        if args.splits == 1:
            prepared = prepared._replace(info={**prepared.info, "split": _split_name(args)})
    elif _split_given(args):
        prepared = prepared._replace(info={**prepared.info, "split": _split_name(args)})
    info = prepared.info
    say(f"{info['dataset']}: {info['n_nodes']} nodes, {info['n_edges']} edges, {info['n_features']} "
        f"features, {info['n_classes']} classes | backend {prepared.backend}"
        + (f" | {info['edges_symmetrized']} one-way edges symmetrized" if info["edges_symmetrized"] else "")
        + (f" | split {info['split']}" if "split" in info else "")
        + f" | read and prepared in {time.perf_counter() - start:.2f}s" + (" " * 20 if tty else ""))
    return prepared


def _require_two_classes(args: argparse.Namespace, prepared: Any) -> None:
    """One class makes every prediction right by construction (accuracy 1.0): refuse it."""
    import numpy as np

    labels = np.asarray(prepared.data.labels)
    present = np.unique(labels[labels >= 0])
    if present.size >= 2:
        return
    where = f"--labels {args.labels}" if args.edges is not None else f"--dataset {args.dataset}"
    names = prepared.info.get("class_names")
    if present.size == 0:
        raise ValueError(f"{where}: no node has a label; training needs labelled nodes of at least 2 classes")
    name = names[present[0]] if names else str(present[0])
    raise ValueError(f"{where}: all {int(np.sum(labels >= 0))} labelled nodes are in one class ({name}); a classifier "
                     "needs at least 2 classes (with one, accuracy is 1.0 by construction): check the labels")


def _split_given(args: argparse.Namespace) -> bool:
    """Whether the split is decided before preparation: own files, a split file or fractions."""
    return args.edges is not None or args.split_file is not None or args.train_frac is not None


def _random_splits(args: argparse.Namespace) -> bool:
    """Whether Planetoid-style random splits are drawn after preparation (split k with seed data seed + k):
    --split random on a dataset, or --splits N on own files (whose one split _raw draws up front)."""
    if args.split_file is not None or args.train_frac is not None:
        return False
    return args.split == "random" if args.edges is None else args.splits > 1


def _split_name(args: argparse.Namespace) -> str:
    """What the reports say about a split decided up front (a dataset's own split is "public")."""
    if args.split_file is not None:
        return f"file {args.split_file}"
    if args.train_frac is not None:
        return (f"fractions {args.train_frac:g}/{_frac(args.val_frac, 0.1):g}/{_frac(args.test_frac, 0.2):g} "
                f"(seed {args.data_seed})")
    return f"random (seed {args.data_seed})"


def _frac(value: float | None, default: float) -> float:
    return default if value is None else value


def _raw(args: argparse.Namespace, require_labels: bool = True, split: bool = True) -> Any:
    """The RawGraph the arguments name, with the split they ask for when it is decided up front
    (``split=False``: as read, for a split taken from elsewhere)."""
    import numpy as np

    from jaxgcn.datasets import load_dataset
    from jaxgcn.datasets.files import load_files
    from jaxgcn.datasets.splits import fraction_split, planetoid_split, read_split_file

    if args.edges is not None:
        if require_labels and args.labels is None:
            raise ValueError("--labels FILE is needed with --edges: a CSV node,label")
        raw = load_files(args.edges, args.features, args.labels)
    else:
        if args.labels is not None:
            raise ValueError("--labels FILE needs --edges FILE (your own graph)")
        if args.features is not None and not str(args.features).isdigit():
            raise ValueError(f"--features {args.features}: a features file needs --edges FILE; with "
                             "--dataset synthetic give a feature count")
        raw = load_dataset(args.dataset, data_dir=args.data_dir, ogb_split=args.ogb_split, n_nodes=args.nodes,
                           n_classes=args.classes, n_features=int(args.features or 64),
                           avg_degree=args.avg_degree, homophily=args.homophily,
                           train_per_class=args.train_per_class, seed=args.data_seed)
    if not split or not _split_given(args):
        return raw
    ids = raw.node_ids if raw.node_ids is not None else np.arange(raw.labels.size).astype(str)
    if args.split_file is not None:
        splits = read_split_file(args.split_file, ids)
    elif args.train_frac is not None:
        splits = fraction_split(raw.labels, args.train_frac, _frac(args.val_frac, 0.1), _frac(args.test_frac, 0.2),
                                seed=args.data_seed)
    else:
        splits = planetoid_split(raw.labels, per_class=args.train_per_class, n_val=args.val, n_test=args.test,
                                 seed=args.data_seed, class_names=raw.class_names)
    return raw._replace(splits=splits)


def _split_codes(prepared: Any) -> Any:
    """The (first) split of the prepared data per INPUT node: [n] int8, 0 none, 1 train, 2 val, 3 test."""
    import numpy as np

    from jaxgcn.checkpoint import SPLIT_CODES

    n = prepared.info["n_nodes"]
    codes = np.zeros(n, np.int8)
    for name in ("train", "val", "test"):
        mask = np.asarray(getattr(prepared.data, f"{name}_mask")).reshape(-1, n)[0]
        codes[mask > 0] = SPLIT_CODES[name]
    order = prepared.info.get("node_order")
    if order is None:
        return codes
    out = np.zeros(n, np.int8)
    out[np.asarray(order)] = codes  # node i of the prepared graph is input node order[i]
    return out


def _split_csv(prepared: Any, node_ids: Any) -> str:
    """The split as ``node,split`` CSV text with the input's node ids (what --split-file reads)."""
    import numpy as np

    from jaxgcn.checkpoint import SPLIT_CODES

    codes = _split_codes(prepared)
    ids = node_ids if node_ids is not None else np.arange(codes.size).astype(str)
    rows = [f"{ids[i]},{name}" for name, code in SPLIT_CODES.items() for i in np.flatnonzero(codes == code)]
    return "node,split\n" + "".join(row + "\n" for row in rows)


def _plan(args: argparse.Namespace, prepared: Any, model_config: Any, runs: int, say: Any) -> Any:
    """Resolve --aggregate-first, then estimate peak memory, print it, and refuse a run that cannot fit."""
    import dataclasses

    from jaxgcn.layers import is_sparse
    from jaxgcn.memory import available_bytes, check_fits, estimate

    x, graph = prepared.data.x, prepared.data.graph
    n_features = int(x.shape[1])
    dense = not is_sparse(x)
    model_config = _first_layer(args, dataclasses.replace(model_config, backend=prepared.backend), x)
    est = estimate(prepared.info["n_nodes"], graph.n_edges, n_features, prepared.n_classes,
                   hidden=model_config.hidden, layers=model_config.layers, backend=prepared.backend,
                   feature_nnz=None if dense else int(x.nse), chunk_edges=model_config.chunk_edges,
                   symmetric=graph.csr is None or graph.csr.symmetric, runs=runs)
    available = available_bytes()
    say(f"memory estimate {est.describe()} of {available / 2**30:.1f} GiB available")
    check_fits(est, available)
    return model_config


def _base_report(args: argparse.Namespace, prepared: Any) -> dict[str, Any]:
    info = prepared.info
    return {
        "dataset": info["dataset"], "n_nodes": info["n_nodes"], "n_edges": info["n_edges"],
        "n_features": info["n_features"], "n_classes": info["n_classes"], "backend": prepared.backend,
        "split": info.get("split", "public"), "split_sizes": info["split_sizes"],
        "graph_report": {k: info[k] for k in ("input_edges", "duplicates_merged", "self_loops_found",
                                              "edges_symmetrized", "isolated_nodes")},
    }


def _checkpointing(args: argparse.Namespace, prepared: Any, model_config: Any, train_config: Any,
                   say: Any) -> dict[str, Any]:
    """``fit`` keyword arguments for --checkpoint-every and --resume."""
    import dataclasses

    from jaxgcn import checkpoint

    settings = {"model": json.loads(json.dumps(dataclasses.asdict(model_config))),
                "train": json.loads(json.dumps(dataclasses.asdict(train_config))), "seed": args.seed,
                "dataset": prepared.info["dataset"], "n_nodes": prepared.info["n_nodes"]}
    out: dict[str, Any] = {}
    if args.checkpoint_every is not None:
        def save_state(state: Any) -> None:
            checkpoint.save(args.save, state.params, model_config=model_config, train_config=train_config,
                            info=prepared.info, epoch=int(state.epoch), metrics={}, state=state, extra=settings,
                            **_checkpoint_facts(args, prepared))

        out.update(checkpoint_every=args.checkpoint_every, on_checkpoint=save_state)
    if args.resume is not None:
        ck = checkpoint.load(args.resume)
        arrays = checkpoint.load_state(args.resume, ck.meta)
        saved = ck.meta.get("extra", {})
        changed = [k for k in settings if saved.get(k) != settings[k]]
        if changed:
            raise ValueError(f"--resume {args.resume}: the run was started with different {', '.join(changed)}; "
                             "resume with the same data, seed and settings")
        if ck.meta.get("data_sha256") is None:
            raise ValueError(f"--resume {args.resume}: the checkpoint records no fingerprint of its data (written "
                             "by an older jaxgcn), so resuming cannot be checked; train again")
        differ = checkpoint.fingerprint_changes(ck.meta["data_sha256"], _fingerprint(args, prepared))
        if differ:
            raise ValueError(f"--resume {args.resume}: the prepared {', '.join(differ)} differ from the data the run "
                             "was started on (SHA-256 recorded in the checkpoint); resume with the same files, split "
                             "and preprocessing flags")
        say(f"resuming from epoch {ck.meta['epoch']} of {args.resume}")
        out["resume"] = lambda template: checkpoint.restore_state(template, arrays, str(args.resume))
    return out


def _fingerprint(args: argparse.Namespace, prepared: Any) -> dict[str, str]:
    """The SHA-256 fingerprint of the prepared data (computed once per run)."""
    if getattr(args, "_fingerprint", None) is None:
        from jaxgcn.checkpoint import data_fingerprint

        args._fingerprint = data_fingerprint(prepared.data)
    return args._fingerprint


def _checkpoint_facts(args: argparse.Namespace, prepared: Any) -> dict[str, Any]:
    """What a checkpoint records about its training data besides the params."""
    return {"node_ids": args._node_ids, "split": _split_codes(prepared), "fingerprint": _fingerprint(args, prepared),
            "identity_features": args.edges is not None and args.features is None}


def _train_runs(args: argparse.Namespace, prepared: Any, model_config: Any, train_config: Any, say: Any):
    """One run through ``fit``; several seeds/splits as one batched program. Returns per-run
    (seed, split, test_acc, val_acc, epochs_run, stopped_early), compile and train seconds."""
    from jaxgcn.progress import Progress

    seeds = [args.seed + i for i in range(args.seeds)]
    progress = Progress(train_config.epochs, every=args.log_every, quiet=args.quiet, log_file=args.log,
                        tensorboard=args.tensorboard, seeds=[s for _ in range(args.splits) for s in seeds])
    args._progress = progress
    try:
        return _run_all(args, prepared, model_config, train_config, say, seeds, progress)
    finally:
        progress.done()


def _run_all(args: argparse.Namespace, prepared: Any, model_config: Any, train_config: Any, say: Any,
             seeds: list[int], progress: Any):
    import jax

    from jaxgcn.batched import concat_specs, fit_runs, make_specs
    from jaxgcn.train import fit

    if len(seeds) == 1 and args.splits == 1:
        res = fit(_one_split(prepared.data), prepared.n_classes, model_config=model_config, config=train_config,
                  key=jax.random.key(seeds[0]), log_every=args.log_every, log=None, progress=progress,
                  **_checkpointing(args, prepared, model_config, train_config, say))
        m = res.metrics
        args._fit_result = res  # what --save writes
        args._losses = res.history["loss"]
        return [(seeds[0], 0, m["test_acc"], m["val_acc"], res.epochs_run, res.stopped_early)], \
            res.compile_seconds, res.train_seconds
    spec = concat_specs([make_specs(seeds, lr=args.lr, weight_decay=args.weight_decay, dropout=args.dropout,
                                    hidden=args.hidden, split=k) for k in range(args.splits)])
    say(f"{spec.n_runs} runs ({len(seeds)} seeds x {args.splits} split(s)) in one compiled program")
    res = fit_runs(prepared.data, prepared.n_classes, spec, model_config=model_config, config=train_config,
                   log_every=args.log_every, log=None, n_devices=args.devices, progress=progress)
    args._losses = res.history["loss"]
    runs = [(int(spec.seed[j]), int(spec.split[j]), float(res.metrics["test_acc"][j]),
             float(res.metrics["val_acc"][j]), int(res.epochs_run[j]), bool(res.stopped_early[j]))
            for j in range(spec.n_runs)]
    return runs, res.compile_seconds, res.train_seconds


def _debug_checks(prepared: Any, model_config: Any, train_config: Any, say: Any) -> None:
    """--debug: run one training step (forward, loss, gradients) and an evaluation forward with
    ``jax_debug_nans`` on and under checkify's index, NaN and division checks, so an out-of-range
    index or the first op that makes a NaN is named before the compiled loop starts. (The loop itself
    runs without them: its history marks epochs not yet run with NaN.)"""
    import jax
    from jax.experimental import checkify

    from jaxgcn.models import gcn
    from jaxgcn.train import l2_penalty, masked_cross_entropy

    data = prepared.data
    model = gcn(model_config)
    params = model.init(jax.random.key(0), int(data.x.shape[1]), prepared.n_classes)

    def step(p: Any, data: Any) -> Any:  # data as an argument: closed-over arrays would be constant-folded
        def loss(q: Any) -> Any:
            logits = model.apply(q, data.graph, data.x, key=jax.random.key(1), train=True)
            return masked_cross_entropy(logits, data.labels, data.train_mask) + \
                train_config.weight_decay * l2_penalty(q, train_config.l2)
        value, grads = jax.value_and_grad(loss)(p)
        return value, grads, model.apply(p, data.graph, data.x)

    checked = checkify.checkify(step, errors=checkify.index_checks | checkify.nan_checks | checkify.div_checks)
    with jax.debug_nans(True):
        try:
            err, _ = jax.jit(checked)(params, data)
        except FloatingPointError as exc:
            raise ValueError(f"--debug: the first training step made a NaN: {str(exc).splitlines()[0]}") from None
    message = err.get()
    if message is not None:
        raise ValueError(f"--debug: the first training step failed a check: {message.splitlines()[0]}")
    say("debug: one training step ran with jax_debug_nans on and under checkify index/NaN/division checks: "
        "no out-of-range index, no NaN (the compiled loop then runs without them)")


def _overfitting_hint(train_acc: float, val_acc: float) -> str | None:
    """A one-line hint when the final model fits the training nodes far better than the validation ones.

    >>> _overfitting_hint(1.0, 0.8) is None, _overfitting_hint(1.0, 0.5)[:26]
    (True, 'hint: train accuracy 1.000')
    """
    if train_acc - val_acc <= OVERFIT_GAP:
        return None
    return (f"hint: train accuracy {train_acc:.3f} but validation {val_acc:.3f}: the model overfits. Try more "
            "regularization (--dropout, --weight-decay), early stopping (--early-stopping patience), fewer "
            "--hidden units, or check that the split's classes are balanced (--train-per-class)")


def _is_writer() -> bool:
    """Only process 0 of a multi-process job writes files (every process when JAX is not yet
    running, or in a one-process job)."""
    import jax

    return jax.process_index() == 0


def _first_layer(args: argparse.Namespace, model_config: Any, x: Any) -> Any:
    """Resolve --aggregate-first for this input."""
    import dataclasses

    from jaxgcn.layers import is_sparse

    dense = not is_sparse(x)
    first = {"on": True, "off": False, "auto": 2 * int(x.shape[1]) < 3 * model_config.hidden}[args.aggregate_first]
    return dataclasses.replace(model_config, aggregate_first=dense and first)


PARTITIONED = "partitioned:"


def _one_split(data: Any) -> Any:
    """--split random draws a stacked [1, n] mask; sharded training takes the [n] one."""
    import numpy as np

    if np.ndim(data.train_mask) == 2:
        return data._replace(**{k: getattr(data, k)[0] for k in ("train_mask", "val_mask", "test_mask")})
    return data


def _exchange(choice: str, stats: dict[str, Any]) -> str:
    if choice == "auto":
        return "halo" if stats["halo_rows"] < stats["all_gather_rows"] else "all_gather"
    return choice


def _load_partitioned(args: argparse.Namespace, mesh: Any, say: Any) -> Any:
    """--dataset partitioned:DIR: each process reads only its own devices' blocks."""
    from types import SimpleNamespace

    from jaxgcn import distributed

    given = [flag for flag, value in (("--edges", args.edges), ("--split-file", args.split_file),
                                      ("--train-frac", args.train_frac), ("--save-split", args.save_split))
             if value is not None]
    if given or args.split != "public":
        raise ValueError(f"--dataset {args.dataset}: the graph, features and split are fixed when the "
                         f"partitions are written; drop {', '.join(given) or '--split'} (give them to "
                         "`jaxgcn partition`)")
    directory = Path(args.dataset[len(PARTITIONED):]).expanduser()
    sharded, meta = distributed.load_partitions(directory, mesh)
    info = {**meta["info"], "n_edges_directed": meta["n_edges"], "sparse_features": meta["sparse_features"]}
    args._node_ids = None
    say(f"{directory}: {meta['n_nodes']} nodes in {meta['parts']} parts written for {meta['exchange']}; this "
        f"process read {len(distributed._mine(mesh))} of them")
    return sharded, SimpleNamespace(info=info, n_classes=int(info["n_classes"]), backend="csr"), meta["stats"]


def cmd_plot(args: argparse.Namespace) -> int:
    from jaxgcn import plots

    _prelude(args)
    need = {"curves": ("--log", args.log), "embeddings": ("--checkpoint", args.checkpoint),
            "sweep": ("--sweep-json", args.sweep_json)}[args.kind]
    if need[1] is None:
        raise ValueError(f"jaxgcn plot {args.kind} needs {need[0]}")
    if args.kind == "curves":
        if not args.log.is_file():
            raise ValueError(f"--log {args.log}: no such file; write it with `jaxgcn train --log {args.log}`")
        runs = plots.read_log(args.log)
        path = plots.training_curves(runs, args.out, title=args.title or f"training curves ({args.log.name}, "
                                     f"{len(runs)} run{'s' if len(runs) > 1 else ''})")
    elif args.kind == "sweep":
        try:
            payload = json.loads(args.sweep_json.read_text())
            configurations = payload["configurations"]
        except (OSError, json.JSONDecodeError, KeyError) as err:
            raise ValueError(f"--sweep-json {args.sweep_json}: not a file written by `jaxgcn sweep --json` "
                             f"({type(err).__name__})") from None
        path = plots.sweep_heatmap(configurations, args.x, args.y, args.out, title=args.title)
    else:
        import jax
        import numpy as np

        ck, prepared, _ = _load_for_checkpoint(args, need_split=False)
        config, _ = _checkpoint_model(ck)
        h = _logits(ck, prepared, embed=True)
        if not isinstance(h, jax.Array):  # a 1-layer model's "embedding" is its (sparse) input
            raise ValueError(f"checkpoint {args.checkpoint}: a {config.layers}-layer model has no hidden layer to plot")
        labels = np.asarray(prepared.data.labels)
        path = plots.embeddings(np.asarray(h), labels, args.out, class_names=ck.meta.get("class_names"),
                                method=args.method, title=args.title or
                                f"{prepared.info['dataset']}: last hidden layer ({config.hidden} units), "
                                f"{args.method.upper()}")
    print(f"wrote {path}")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    """``jaxgcn info``: what the graph is and what preparing it did, and the training memory estimate."""
    import numpy as np
    import scipy.sparse as sp

    from jaxgcn.memory import estimate

    from jaxgcn import outputs

    _prelude(args)
    args.backend = "auto"
    raw = _raw(args)
    feats = raw.features
    n, n_features = feats.shape
    nnz = int(feats.nnz) if sp.issparse(feats) else int(np.count_nonzero(feats))
    prepared = _load(args, lambda msg: None, on_device=False, two_classes=False)
    info, graph = prepared.info, prepared.data.graph
    degree = np.diff(np.asarray(graph.csr.indptr)) if graph.csr is not None else \
        np.bincount(np.asarray(graph.receivers), minlength=n)
    labels = np.asarray(prepared.data.labels)
    names = info.get("class_names") or [str(c) for c in range(prepared.n_classes)]
    counts = np.bincount(labels[labels >= 0], minlength=prepared.n_classes)
    est = estimate(n, graph.n_edges, n_features, prepared.n_classes, hidden=args.hidden, backend=prepared.backend,
                   feature_nnz=nnz if sp.issparse(feats) else None,
                   symmetric=graph.csr is None or graph.csr.symmetric)
    stats = {
        "dataset": info["dataset"], "nodes": n, "edges": info["n_edges"], "input_edges": info["input_edges"],
        "duplicates_merged": info["duplicates_merged"], "self_loops_removed": info["self_loops_found"],
        "one_way_edges_symmetrized": info["edges_symmetrized"], "isolated_nodes": info["isolated_nodes"],
        "degree": {"min": int(degree.min()), "median": float(np.median(degree)), "mean": float(degree.mean()),
                   "p99": float(np.percentile(degree, 99)), "max": int(degree.max())},
        "features": n_features, "feature_nonzeros": nnz, "feature_density": nnz / max(1, n * n_features),
        "classes": {str(names[c]): int(counts[c]) for c in range(prepared.n_classes)},
        "unlabelled_nodes": int(np.sum(labels < 0)), "split_sizes": info["split_sizes"],
        "backend": prepared.backend, "memory_estimate_bytes": est.total,
    }
    d = stats["degree"]
    largest, smallest = counts.max(), max(counts.min(), 1)
    print(f"{info['dataset']}: {n:,} nodes, {info['n_edges']:,} edges (undirected, without self-loops)")
    print(f"  input: {info['input_edges']:,} edge entries; {info['duplicates_merged']:,} duplicates merged, "
          f"{info['self_loops_found']:,} self-loops removed (the GCN adds its own), "
          f"{info['edges_symmetrized']:,} one-way edges symmetrized")
    print(f"  isolated nodes: {info['isolated_nodes']:,}")
    print(f"  degree: min {d['min']}, median {d['median']:g}, mean {d['mean']:.2f}, 99th percentile "
          f"{d['p99']:g}, max {d['max']}")
    print(f"  features: {n_features:,} per node, {nnz:,} non-zeros ({100 * stats['feature_density']:.2f}% dense)")
    print(f"  classes: {prepared.n_classes} (largest/smallest {largest / smallest:.1f}x); " + ", ".join(
        f"{names[c]} {counts[c]:,}" for c in range(prepared.n_classes))
          + (f"; {stats['unlabelled_nodes']:,} unlabelled" if stats["unlabelled_nodes"] else ""))
    print("  split: " + ", ".join(f"{k} {v:,}" for k, v in info["split_sizes"].items()))
    print(f"  training memory estimate (backend {prepared.backend}, hidden {args.hidden}): {est.describe()}")
    with outputs.Staged() as out:
        if args.json is not None:
            out.add(args.json, _json_text(stats), label=f"--json {args.json}")
        if args.save_split is not None:
            out.add(args.save_split, _split_csv(prepared, args._node_ids), label=f"--save-split {args.save_split}")
    return 0


def cmd_partition(args: argparse.Namespace) -> int:
    from jaxgcn import distributed, outputs

    _prelude(args)
    say = print
    args.backend = "auto"  # the blocks are CSR whatever the single-device backend would be
    prepared = _load(args, say, on_device=False)
    data = _one_split(prepared.data)
    stats = distributed.partition_stats(data.graph, args.parts)
    exchange = _exchange(args.exchange, stats)
    with outputs.Staged() as out, outputs.locked_dir("--out", args.out):  # a failure removes a folder it made
        outputs.remove_stale_temps(args.out)
        meta = distributed.save_partitions(args.out, data, args.parts, exchange=exchange, info=prepared.info)
        if args.save_split is not None:
            out.add(args.save_split, _split_csv(prepared, args._node_ids), label=f"--save-split {args.save_split}")
    total = sum(f["bytes"] for f in meta["files"])
    print(f"wrote {args.parts} parts ({exchange}; {100 * stats['cut_fraction']:.1f}% of edges cross a border) to "
          f"{args.out}: {total / 2**20:.1f} MiB, {total / args.parts / 2**20:.1f} MiB per part")
    return 0


def _train_sharded(args: argparse.Namespace, say: Any) -> int:
    """``train --shard-graph`` / ``--distributed``: one full-graph run with the rows sharded over
    every device of the job (jaxgcn.distributed); only process 0 prints the summary and writes."""
    import dataclasses

    import jax

    from jaxgcn import distributed
    from jaxgcn.csr import require_kernel
    from jaxgcn.memory import available_bytes, estimate_sharded

    if args.seeds > 1 or args.splits > 1:
        raise ValueError(f"--shard-graph trains one model on one graph; for --seeds {args.seeds} / --splits "
                         f"{args.splits} use `jaxgcn sweep --distributed` (the runs are spread over processes)")
    if args.checkpoint_every is not None or args.resume is not None:
        raise ValueError("--checkpoint-every/--resume are not available with --shard-graph/--distributed yet; "
                         "save the final model with --save")
    if args.backend not in ("auto", "csr") or args.chunk_edges is not None:
        raise ValueError(f"--shard-graph aggregates each row block as a CSR product (the fused kernel on a CPU, "
                         f"XLA on a GPU); drop --backend {args.backend}" + (" and --chunk-edges" if args.chunk_edges else ""))
    if args.backend == "csr":
        require_kernel()
    writer = _is_writer()
    say = say if writer else (lambda msg: None)
    model_config, train_config = _configs(args, "csr")
    mesh = distributed.node_mesh(args.devices)
    n_parts = mesh.devices.size
    if args.dataset.startswith(PARTITIONED):
        sharded, prepared, stats = _load_partitioned(args, mesh, say)
        exchange = sharded.exchange
        model_config = dataclasses.replace(model_config, aggregate_first=not prepared.info["sparse_features"] and {
            "on": True, "off": False, "auto": 2 * sharded.n_features < 3 * model_config.hidden}[args.aggregate_first])
        feature_nnz = None  # not known without every block; the estimate counts sparse features as dense
        n_edges = prepared.info["n_edges_directed"]
    else:
        prepared = _load(args, say, on_device=False)
        data = _one_split(prepared.data)
        model_config = _first_layer(args, model_config, data.x)
        stats = distributed.partition_stats(data.graph, n_parts)
        exchange = _exchange(args.exchange, stats)
        feature_nnz = int(data.x.nse) if hasattr(data.x, "nse") else None
        n_edges = data.graph.n_edges
    rows = stats["halo_rows"] if exchange == "halo" else stats["all_gather_rows"]
    est = estimate_sharded(prepared.info["n_nodes"], n_edges, prepared.info["n_features"],
                           prepared.n_classes, parts=n_parts, exchange_rows=rows, hidden=model_config.hidden,
                           layers=model_config.layers, feature_nnz=feature_nnz)
    say(f"{n_parts} device(s) in {jax.process_count()} process(es) | {stats['rows_per_device']} nodes per device | "
        f"{100 * stats['cut_fraction']:.1f}% of edges cross a border | {exchange}: {rows} rows received per "
        f"propagation (all_gather {stats['all_gather_rows']}, halo {stats['halo_rows']})")
    say(f"memory estimate per device {est.describe()}; host {available_bytes() / 2**30:.1f} GiB available")
    if not args.dataset.startswith(PARTITIONED):
        sharded = distributed.shard_data(data, mesh, exchange=exchange)
    from jaxgcn.progress import Progress

    progress = Progress(train_config.epochs, every=args.log_every, quiet=args.quiet or not writer,
                        log_file=args.log if writer else None, tensorboard=args.tensorboard if writer else None,
                        seeds=[args.seed])
    try:
        res = distributed.fit_sharded(sharded, prepared.n_classes, model_config=model_config, config=train_config,
                                      key=jax.random.key(args.seed), log_every=args.log_every, log=None,
                                      progress=progress)
    finally:
        progress.done()
    m = res.metrics
    if writer:
        print(f"test accuracy {m['test_acc']:.4f} | val {m['val_acc']:.4f} | epochs {res.epochs_run} | "
              f"{n_parts} devices, {exchange} | compile {res.compile_seconds:.2f}s | train "
              f"{res.train_seconds:.2f}s ({1e3 * res.train_seconds / res.epochs_run:.2f} ms/epoch)")
    if not writer:
        return 0
    from jaxgcn import checkpoint, outputs

    with outputs.Staged() as out:  # everything appears, or (on an error) nothing
        if args.json is not None:
            out.add(args.json, _json_text({
                **_base_report(args, prepared),
                "config": {"model": dataclasses.asdict(model_config), "train": dataclasses.asdict(train_config),
                           "norm": args.norm, "feature_norm": args.feature_norm},
                "seeds": [args.seed], "splits": 1,
                "runs": [{"seed": args.seed, "split": 0, "test_acc": m["test_acc"], "val_acc": m["val_acc"],
                          "epochs_run": res.epochs_run, "stopped_early": res.stopped_early}],
                "test_acc": [m["test_acc"]], "test_acc_mean": m["test_acc"], "test_acc_std": 0.0,
                "val_acc": [m["val_acc"]], "val_acc_mean": m["val_acc"], "epochs_run": [res.epochs_run],
                "stopped_early": [res.stopped_early], "metrics": m,
                "history": {k: v.tolist() for k, v in res.history.items()},
                "compile_seconds": res.compile_seconds, "train_seconds": res.train_seconds,
                "distributed": {"processes": jax.process_count(), "devices": n_parts, "exchange": exchange,
                                "partition": stats, "memory_estimate_per_device": est.parts},
            }), label=f"--json {args.json}")
        own = not args.dataset.startswith(PARTITIONED)  # partitions hold no host copy of the whole data
        if args.save_split is not None and own:
            out.add(args.save_split, _split_csv(prepared, args._node_ids), label=f"--save-split {args.save_split}")
        if args.save is not None:
            facts = {"node_ids": args._node_ids, "split": _split_codes(prepared) if own else None,
                     "identity_features": args.edges is not None and args.features is None}
            checkpoint.save(args.save, res.params, model_config=model_config, train_config=train_config,
                            info=prepared.info, epoch=res.epochs_run, metrics=m, **facts)
            say(f"saved the model to {args.save}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    import contextlib

    from jaxgcn import outputs

    if (args.save is not None or args.resume is not None) and (args.seeds > 1 or args.splits > 1):
        raise ValueError(f"--save/--resume keep one model; they need one run, not --seeds {args.seeds} / "
                         f"--splits {args.splits}")
    if args.checkpoint_every is not None and args.save is None:
        raise ValueError("--checkpoint-every K needs --save DIR (where the checkpoints go)")
    _prelude(args)
    _warn_tensorboard(args)
    say = (lambda msg: None) if args.quiet else print
    lock = contextlib.nullcontext()
    if args.save is not None and (not args.distributed or _is_writer()):
        # a failed run removes the folder it created, unless --checkpoint-every put resumable state in it
        lock = outputs.locked_dir("--save", args.save, remove_on_error=args.checkpoint_every is None)
    with lock:
        if args.shard_graph or args.distributed:
            return _train_sharded(args, say)
        return _train_single(args, say)


def _train_single(args: argparse.Namespace, say: Any) -> int:
    """``train`` on one device: one run, or several seeds/splits as one batched program."""
    import dataclasses

    import numpy as np

    from jaxgcn import checkpoint, outputs
    from jaxgcn.train import divergence_hint

    model_config, train_config = _configs(args, "segment" if args.chunk_edges else "csr")  # validates early
    prepared = _load(args, say)
    model_config = _plan(args, prepared, model_config, min(args.seeds * args.splits, 8), say)
    if args.debug:
        _debug_checks(prepared, model_config, train_config, say)
    runs, compile_s, train_s = _train_runs(args, prepared, model_config, train_config, say)
    test = np.array([r[2] for r in runs])
    val = np.array([r[3] for r in runs])
    epochs = [r[4] for r in runs]
    fitted = getattr(args, "_fit_result", None)
    diverged = divergence_hint(args._losses, prepared.data, train_config)
    hint = diverged or (_overfitting_hint(fitted.metrics["train_acc"], fitted.metrics["val_acc"]) if fitted else None)

    print(f"test accuracy {test.mean():.4f} ± {test.std():.4f} over {len(runs)} run(s) | val "
          f"{val.mean():.4f} | epochs {min(epochs)}-{max(epochs)} | compile {compile_s:.2f}s | "
          f"train {train_s:.2f}s ({1e3 * train_s / max(epochs):.2f} ms/epoch)")
    if hint:
        print(hint)
    # The outputs appear together at the end, the split file last; a failure leaves none of them.
    with outputs.Staged() as out:
        if args.json is not None:
            out.add(args.json, _json_text({
                **_base_report(args, prepared),
                "config": {"model": dataclasses.asdict(model_config), "train": dataclasses.asdict(train_config),
                           "norm": args.norm, "feature_norm": args.feature_norm},
                "seeds": sorted({r[0] for r in runs}), "splits": args.splits,
                "runs": [{"seed": r[0], "split": r[1], "test_acc": r[2], "val_acc": r[3], "epochs_run": r[4],
                          "stopped_early": r[5]} for r in runs],
                "test_acc": test.tolist(), "test_acc_mean": float(test.mean()),
                "test_acc_std": float(test.std()), "val_acc": val.tolist(), "val_acc_mean": float(val.mean()),
                "epochs_run": epochs, "stopped_early": [r[5] for r in runs],
                "compile_seconds": compile_s, "train_seconds": train_s,
            }), label=f"--json {args.json}")
        if args.save_split is not None:
            out.add(args.save_split, _split_csv(prepared, args._node_ids), label=f"--save-split {args.save_split}")
        if args.save is not None:
            res = args._fit_result
            checkpoint.save(args.save, res.params, model_config=model_config, train_config=train_config,
                            info=prepared.info, epoch=res.epochs_run, metrics=res.metrics,
                            **_checkpoint_facts(args, prepared))
            say(f"saved the model to {args.save}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    import dataclasses

    from jaxgcn import outputs
    from jaxgcn.sweep import Grid, csv_text, format_table, rows_to_json, run_grid

    _prelude(args)
    say = (lambda msg: None) if args.quiet or not _is_writer() else print
    grid = Grid(lr=args.lr, weight_decay=args.weight_decay, dropout=args.dropout, hidden=args.hidden,
                layers=args.layers)
    for cfg in grid.configs():  # validate every value before any work
        _configs(args, "segment" if args.chunk_edges else "csr", **cfg)
    prepared = _load(args, say)
    model_config, train_config = _configs(args, prepared.backend, hidden=max(args.hidden), layers=args.layers[0],
                                          dropout=max(args.dropout), lr=args.lr[0],
                                          weight_decay=args.weight_decay[0])
    model_config = _plan(args, prepared, model_config, 1, say)  # one run; run_grid chunks by --memory-budget
    seeds = [args.seed + i for i in range(args.seeds)]
    n_configs = len(grid.configs())
    say(f"sweep: {n_configs} configurations x {len(seeds)} seeds x {args.splits} split(s) = "
        f"{n_configs * len(seeds) * args.splits} runs")
    share: dict[str, Any] = {}
    if args.distributed:
        import jax
        from jax.experimental import multihost_utils

        share = {"process_index": jax.process_index(), "process_count": jax.process_count(),
                 "combine": lambda local: multihost_utils.process_allgather(local).sum(axis=0)}
        say(f"process {jax.process_index()} of {jax.process_count()}: 1 in {jax.process_count()} runs of each "
            f"group, on {len(jax.local_devices())} local device(s); the results are combined")
    from jaxgcn.progress import Progress

    # a bar per group on a terminal; off a terminal the one-line-per-group log is the progress
    bar = Progress(train_config.epochs, every=args.log_every, quiet=args.quiet or not _is_writer(),
                   desc="sweep") if sys.stdout.isatty() else None
    try:
        rows = run_grid(prepared.data, prepared.n_classes, grid, seeds, n_splits=args.splits,
                        model_config=model_config, config=train_config, memory_budget=args.memory_budget, log=say,
                        progress=bar, **share)
    finally:
        if bar is not None:
            bar.done()
    if not _is_writer():
        return 0
    print(format_table(rows))
    with outputs.Staged() as out:  # together at the end, the split file last; nothing on an error
        if args.csv is not None:
            out.add(args.csv, csv_text(rows), label=f"--csv {args.csv}")
        if args.json is not None:
            fixed = {k: v for k, v in dataclasses.asdict(train_config).items() if k not in ("lr", "weight_decay")}
            out.add(args.json, _json_text({
                **_base_report(args, prepared), "seeds": seeds, "splits": args.splits,
                "grid": dataclasses.asdict(grid), "fixed": fixed, "best": rows_to_json(rows[:1])[0],
                "configurations": rows_to_json(rows)}), label=f"--json {args.json}")
        if args.save_split is not None:
            out.add(args.save_split, _split_csv(prepared, args._node_ids), label=f"--save-split {args.save_split}")
    return 0


def cmd_datasets(args: argparse.Namespace) -> int:
    from jaxgcn.datasets import available

    for name, description in available():
        print(f"{name:24s} {description}")
    return 0


def _load_for_checkpoint(args: argparse.Namespace, need_split: bool):
    """The checkpoint, and the data prepared the way it was trained (normalizations from the checkpoint).

    With ``need_split`` (evaluate) and no split flags, the split is the one the model was trained on
    (saved in the checkpoint); a split given by flags must not evaluate the model's training nodes."""
    from jaxgcn import checkpoint
    from jaxgcn.datasets import prepare

    ck = checkpoint.load(args.checkpoint)
    meta = ck.meta
    flags_split = args.split_file is not None or args.train_frac is not None or args.split == "random"
    raw = _raw(args, require_labels=need_split, split=need_split and (flags_split or ck.split is None))
    if not need_split:
        raw = raw._replace(splits={} if args.edges is not None else raw.splits)
    raw = _identity_features(args, ck, raw)
    n_features = int(raw.features.shape[1])
    if n_features != meta["n_features"]:
        raise ValueError(f"checkpoint {args.checkpoint} was trained on {meta['n_features']} features; this data has "
                         f"{n_features}; give features in the same feature space")
    if need_split and flags_split and not _split_given(args):  # --split random: drawn as train draws it
        from jaxgcn.datasets.splits import planetoid_split

        raw = raw._replace(splits=planetoid_split(raw.labels, per_class=args.train_per_class, n_val=args.val,
                                                  n_test=args.test, seed=args.data_seed,
                                                  class_names=raw.class_names))
    if need_split:
        raw = _evaluation_split(args, ck, raw, flags_split)
    prepared = prepare(raw, norm=meta["norm"] or "sym", feature_norm=meta["feature_norm"] or "row",
                       require_split=need_split, feature_statistics=meta.get("feature_stats"))
    if need_split and raw.class_names and meta["class_names"] and raw.class_names != meta["class_names"]:
        raise ValueError(f"{args.labels}: classes {raw.class_names} differ from the checkpoint's {meta['class_names']}")
    return ck, prepared, raw.node_ids


def _positions(saved_ids: Any, ids: Any) -> Any:
    """For each of ``ids``, its index in ``saved_ids`` (-1 where absent)."""
    import numpy as np

    ids = np.asarray(ids)
    if saved_ids.size == 0:
        return np.full(ids.size, -1, np.int64)
    order = np.argsort(saved_ids, kind="stable")
    pos = np.clip(np.searchsorted(saved_ids[order], ids), 0, saved_ids.size - 1)
    return np.where(saved_ids[order][pos] == ids, order[pos], -1)


def _identity_features(args: argparse.Namespace, ck: Any, raw: Any) -> Any:
    """A model trained on one-hot node ids (files without --features) reads column j as node
    ``node_ids[j]`` of its training graph: rebuild the one-hot features on those columns, by id, so
    renamed, added or removed nodes do not shift every other node's column. A node the model never saw
    gets an all-zero row (its prediction comes from its neighbours alone)."""
    import numpy as np
    import scipy.sparse as sp

    one_hot_now = args.edges is not None and args.features is None
    trained = ck.meta.get("identity_features") or (
        ck.node_ids is not None and one_hot_now and ck.node_ids.size == ck.meta["n_features"])
    if trained and not one_hot_now:
        raise ValueError(f"checkpoint {args.checkpoint}: the model was trained on one-hot node ids (files without "
                         "--features); give your graph with --edges and without --features")
    if not (trained and one_hot_now):
        return raw
    if ck.node_ids is None:
        raise ValueError(f"checkpoint {args.checkpoint}: the model was trained on one-hot node ids but the node id "
                         "file is missing; save the model again")
    pos = _positions(ck.node_ids, raw.node_ids)
    rows = np.flatnonzero(pos >= 0)
    x = sp.csr_matrix((np.ones(rows.size, np.float32), (rows, pos[rows])), shape=(pos.size, ck.node_ids.size))
    unseen = pos.size - rows.size
    if unseen:
        print(f"{unseen} node(s) of {args.edges} were not in the training graph: without identity features their "
              "predictions come from their neighbours alone")
    return raw._replace(features=x)


def _saved_codes(ck: Any, raw: Any) -> Any:
    """The checkpoint's training split on this data's nodes ([n] codes), or None when the nodes cannot be
    matched (other node ids, another dataset)."""
    import numpy as np

    if ck.split is None:
        return None
    if ck.node_ids is not None and raw.node_ids is not None:
        pos = _positions(ck.node_ids, raw.node_ids)
    elif ck.node_ids is None and raw.node_ids is None and raw.name == ck.meta.get("dataset") \
            and raw.labels.size == ck.split.size:
        pos = np.arange(raw.labels.size)
    else:
        return None
    return np.where(pos >= 0, ck.split[np.maximum(pos, 0)], 0).astype(np.int8)


def _evaluation_split(args: argparse.Namespace, ck: Any, raw: Any, flags_split: bool) -> Any:
    """The split evaluate scores: the training split saved in the checkpoint unless flags give one; a
    split from flags (or the data's own) whose scored nodes include training nodes is refused."""
    import numpy as np

    from jaxgcn.checkpoint import SPLIT_CODES

    codes = _saved_codes(ck, raw)
    where = f"its split: {ck.meta.get('split') or 'public'}"
    if not flags_split and codes is not None:
        print(f"split: the model's training split, saved in {args.checkpoint} ({ck.meta.get('split') or 'public'})")
        return raw._replace(splits={k: np.flatnonzero(codes == c) for k, c in SPLIT_CODES.items()})
    if not flags_split and args.edges is not None:  # own files have no split of their own
        raise ValueError(f"--checkpoint {args.checkpoint}: holds no training split for these nodes; pass the split "
                         "it was trained on with --split-file FILE (`jaxgcn train --save-split FILE` writes it)")
    if codes is None or args.on in ("train", "labelled"):
        return raw
    scored = np.asarray(raw.splits.get(args.on, []), np.int64)
    seen = int(np.sum(codes[scored] == SPLIT_CODES["train"]))
    if seen:
        raise ValueError(f"--on {args.on}: {seen} of the {scored.size} {args.on} nodes of this split trained the model "
                         f"({where}), so its score would be inflated; drop the split flags to evaluate on the "
                         "model's own split, or pass the file `jaxgcn train --save-split` wrote")
    return raw


def _checkpoint_model(ck: Any) -> tuple[Any, Any]:
    """The saved model's config (checked when the checkpoint was loaded) and params (device arrays)."""
    import dataclasses

    import jax

    from jaxgcn.checkpoint import model_config

    # the backend follows the graph as prepared here; chunking is a memory knob, not the model
    config = dataclasses.replace(model_config(ck.meta), backend="auto", chunk_edges=None)
    return config, jax.tree.map(jax.numpy.asarray, ck.params)


def _logits(ck: Any, prepared: Any, embed: bool = False) -> Any:
    """The saved model's logits (or, with ``embed``, its last hidden layer) on the prepared graph."""
    import jax

    from jaxgcn.models import gcn

    config, params = _checkpoint_model(ck)
    return jax.jit(lambda p, g, x: gcn(config).apply(p, g, x, embed=embed))(params, prepared.data.graph,
                                                                           prepared.data.x)


def cmd_predict(args: argparse.Namespace) -> int:
    import jax
    import numpy as np

    from jaxgcn import outputs

    _prelude(args)
    ck, prepared, node_ids = _load_for_checkpoint(args, need_split=False)
    probs = np.asarray(jax.nn.softmax(_logits(ck, prepared), axis=-1))
    names = ck.meta["class_names"] or [str(k) for k in range(ck.meta["n_classes"])]
    ids = node_ids if node_ids is not None else np.arange(probs.shape[0]).astype(str)
    pred = np.asarray(names, dtype=object)[probs.argmax(axis=1)]
    body = np.column_stack([ids.astype(str), pred.astype(str), np.char.mod("%.6f", probs).astype(str)])
    outputs.write_atomic(args.out, "node,label," + ",".join(f"prob_{n}" for n in names) + "\n"
                         + "\n".join(",".join(row) for row in body) + "\n", label=f"--out {args.out}")
    print(f"wrote {probs.shape[0]} predictions to {args.out}")
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    import numpy as np

    from jaxgcn import outputs

    _prelude(args)
    ck, prepared, _ = _load_for_checkpoint(args, need_split=True)
    pred = np.asarray(_logits(ck, prepared)).argmax(axis=1)
    labels = np.asarray(prepared.data.labels)
    d = prepared.data
    mask = {"test": d.test_mask, "val": d.val_mask, "train": d.train_mask}.get(args.on)
    chosen = labels >= 0 if mask is None else (np.asarray(mask).reshape(-1, labels.size)[0] > 0)
    k = ck.meta["n_classes"]
    conf = np.zeros((k, k), np.int64)
    np.add.at(conf, (labels[chosen], pred[chosen]), 1)
    tp = np.diag(conf).astype(float)
    precision = np.divide(tp, conf.sum(0), out=np.zeros(k), where=conf.sum(0) > 0)
    recall = np.divide(tp, conf.sum(1), out=np.zeros(k), where=conf.sum(1) > 0)
    f1 = np.divide(2 * precision * recall, precision + recall, out=np.zeros(k), where=precision + recall > 0)
    names = ck.meta["class_names"] or [str(c) for c in range(k)]
    acc = float(tp.sum() / max(conf.sum(), 1))
    print(f"{args.on}: {int(conf.sum())} nodes | accuracy {acc:.4f} | macro-F1 {f1.mean():.4f}")
    print(f"{'class':>12} {'precision':>9} {'recall':>7} {'support':>7}")
    for c in range(k):
        print(f"{names[c]:>12} {precision[c]:9.4f} {recall[c]:7.4f} {int(conf[c].sum()):7d}")
    print("confusion matrix (rows: true class, columns: predicted):")
    for c in range(k):
        print(f"{names[c]:>12} " + " ".join(f"{v:5d}" for v in conf[c]))
    if args.json is not None:
        report = {"on": args.on, "nodes": int(conf.sum()), "accuracy": acc, "macro_f1": float(f1.mean()),
                  "classes": names, "precision": precision.tolist(), "recall": recall.tolist(),
                  "f1": f1.tolist(), "confusion": conf.tolist()}
        outputs.write_atomic(args.json, _json_text(report), label=f"--json {args.json}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``jaxgcn`` console script; returns the exit code."""
    from_console = argv is None  # in-process callers keep their own JAX device setup
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed on one line
        return int(exc.code or 0)
    try:
        if args.command in ("train", "sweep"):
            if args.distributed:
                from jaxgcn.distributed import initialize

                initialize(args.coordinator, args.num_processes, args.process_id)
            elif args.coordinator or args.num_processes or args.process_id is not None:
                raise ValueError("--coordinator/--num-processes/--process-id need --distributed")
            if not args.no_compile_cache:
                _enable_compile_cache()
            if from_console:
                _use_cpu_cores(args)
            return cmd_train(args) if args.command == "train" else cmd_sweep(args)
        if args.command in ("evaluate", "predict"):
            return cmd_evaluate(args) if args.command == "evaluate" else cmd_predict(args)
        if args.command == "partition":
            return cmd_partition(args)
        if args.command == "info":
            return cmd_info(args)
        if args.command == "plot":
            return cmd_plot(args)
        return cmd_datasets(args)
    except ValueError as exc:
        from jaxgcn.train import TrainingDiverged

        code = EXIT_DIVERGED if isinstance(exc, TrainingDiverged) else EXIT_USAGE
        print(f"jaxgcn: error: {exc}", file=sys.stderr)
        return code
    except BrokenPipeError:  # stdout closed early (`jaxgcn ... | head`): stop quietly, as other tools do
        if from_console:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 1
    except OSError as exc:  # a file that failed between the checks and its use (disk full, I/O error, a race)
        print(f"jaxgcn: error: {_os_error(args, exc)}", file=sys.stderr)
        return EXIT_USAGE


def _os_error(args: argparse.Namespace, exc: OSError) -> str:
    """One line for an OSError: the flag whose path failed (when known), the path, the reason, the fix."""
    reason = exc.strerror or type(exc).__name__
    name = exc.filename
    if name is None:
        return f"{reason} while reading or writing a file; check the paths given, their permissions and free space"
    flag = next((f"{flag} " for flag, attr in (*INPUTS, *((f, a) for rows in OUTPUTS.values() for f, a, _ in rows))
                 if getattr(args, attr, None) is not None and os.path.realpath(str(getattr(args, attr))) in
                 (os.path.realpath(str(name)), os.path.dirname(os.path.realpath(str(name))))), "")
    return f"{flag}{name}: {reason}; check the path, its permissions and the free space of its disk"


if __name__ == "__main__":
    sys.exit(main())
