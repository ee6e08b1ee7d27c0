"""The argument definitions of every ``jaxgcn`` command; each subparser names its command's
``run`` with ``set_defaults(func=...)`` (and ``setup`` for the commands that start JAX's runtime)."""

from __future__ import annotations

import argparse
import copy
import importlib
import re
import sys
import textwrap
from typing import Any, Callable, Sequence

from jaxgcn import version
from jaxgcn.cli import records
from jaxgcn.cli.errors import PREPARED_AS_TRAINED, SPLIT_FLAGS, flags_of, unknown_flag
from jaxgcn.cli import values as v
from jaxgcn.datasets.catalogue import available
from jaxgcn.host.machine import REORDER_MIN_NODES
from jaxgcn.training.config import OPTIMIZERS

EXIT_USAGE = 2
ERROR_WIDTH = 100  # the longest line of an error message, in characters


def error_text(message: str, width: int = ERROR_WIDTH) -> str:
    """``jaxgcn: error: MESSAGE`` as every command prints it (without the final newline).

    A message whose one line fits in ``width`` characters, or that holds line breaks of its own, is
    kept as it is. A longer one is split after its first ``"; "`` into what went wrong (from
    ``jaxgcn: error:`` on, ending with the ``;``) and how to fix it (from the next line), and each
    part is wrapped at spaces into lines of at most ``width`` characters, every line after the first
    indented by two spaces. Nothing is broken inside a word, at a hyphen or elsewhere, nor inside a
    command in backquotes: a path, URL or flag longer than a line keeps a line of its own. Joining
    the lines' words with single spaces gives the message back.

    >>> print(error_text("--lr inf: not a finite number; give a value such as 0.01"))
    jaxgcn: error: --lr inf: not a finite number; give a value such as 0.01
    >>> print(error_text("--json out/r.json: no such folder; create out/ first or give --json another "
    ...                  "path in an existing folder", width=50))
    jaxgcn: error: --json out/r.json: no such folder;
      create out/ first or give --json another path
      in an existing folder
    """
    first = f"jaxgcn: error: {message}"
    if len(first) <= width or "\n" in message:
        return first
    glued = re.sub(r"`[^`\n]*`", lambda m: m.group(0).replace(" ", "\0"), message)  # `a command` is one word
    what, split, fix = glued.partition("; ")
    wrap = textwrap.TextWrapper(width, initial_indent="jaxgcn: error: ", subsequent_indent="  ",
                                break_long_words=False, break_on_hyphens=False)
    lines = wrap.wrap(what + split.strip())  # the prefix as the indent: a long first word stays beside it
    if fix:
        wrap.initial_indent = "  "
        lines += wrap.wrap(fix)
    return "\n".join(lines).replace("\0", " ")


class HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, "(default: X)"; None and False (an unset value, a
    switch that is off) add nothing, and a tuple default (sweep's lists) reads as a comma list."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (not action.option_strings or "%(default)" in text or action.default is None
                or action.default is False or action.default is argparse.SUPPRESS):
            return text
        return f"{text} (default: %(default)s)"

    def _split_lines(self, text: str, width: int) -> list[str]:
        # never break a flag or a form such as --data-dir at its hyphen
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _expand_help(self, action: argparse.Action) -> str:
        if isinstance(action.default, (tuple, list)):
            action = copy.copy(action)
            action.default = ",".join(map(str, action.default))
        return super()._expand_help(action)


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one line (no usage dump) and exits 2, and shows
    every option's default in ``--help``. A flag must be spelled in full (a prefix such as ``--hid``
    is refused: a later flag sharing it would change its meaning), an unknown one gets the closest
    flags of its command, and choices are case-insensitive, as dataset names are."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, error_text(f"{message} (see '{self.prog} --help')") + "\n")

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        value = super()._get_value(action, arg_string)
        return v.canonical_choice(action.choices, value)

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        command = self.commands().get(getattr(parsed, "command", None) or "")
        flags = [e for e in extras if e.startswith("--")]
        if command is not None and flags:  # argparse's "unrecognized arguments" would name no fix
            command.error(unknown_flag(command, self.commands(), flags[0]))
        return parsed, extras

    def commands(self) -> dict[str, argparse.ArgumentParser]:
        """The subcommands' parsers by name (none for a subcommand's own parser)."""
        sub = next((a for a in self._actions if isinstance(a, argparse._SubParsersAction)), None)
        return dict(sub.choices) if sub is not None else {}


class KindParser(Parser):
    """A command whose first argument picks a kind with flags of its own (``jaxgcn plot curves
    --log F``), as git's and pip's subcommands have: ``KIND --help`` lists that kind's flags and the
    common ones, ``--help`` the kinds, one line each, and a flag of another kind is a usage error
    naming the kind that takes it. One parser takes every kind's flags: the defaults that
    :func:`~jaxgcn.cli.records.parse_args` sets (a checkpoint's data) go to it, and a command line
    of one kind's flags parses, or fails, as with a single parser of all of them.

    ``kinds``: each kind's line of help; ``add_args(parser, kinds)`` adds the flags of ``kinds`` and
    those of every kind (for an empty tuple, only those, to an argument group).
    """

    def __init__(self, *, kinds: dict[str, str], add_args: Callable[[Any, tuple[str, ...]], None],
                 **kwargs: Any) -> None:
        super().__init__(add_help=False, **kwargs)
        self.kinds, self.add_args = kinds, add_args
        self.helps: dict[str | None, Parser] = {}  # help_parser's, built on first use
        self.add_argument("-h", "--help", action=_KindHelp, help="show this help message and exit")
        self.add_argument("kind", choices=tuple(kinds), help="the kind of output")  # help_parser(None) lists them
        add_args(self, tuple(kinds))

    def help_parser(self, kind: str | None) -> Parser:
        """The parser whose help ``jaxgcn plot KIND --help`` prints: the kind's own flags and the
        common ones (its prog ``jaxgcn plot KIND``); for None, the kinds and the common flags."""
        if kind not in self.helps:
            if kind is None:
                usage = f"{self.prog} {{{','.join(self.kinds)}}} [options]"
                epilog = f"`{self.prog} KIND --help` lists the flags of a kind."
                made = Parser(prog=self.prog, usage=usage, description=self.description, epilog=epilog,
                              add_help=False)
                listing = made.add_argument_group("kinds")  # shown first, then the common flags
                for name, text in self.kinds.items():
                    listing.add_argument(name, nargs="?", help=text)  # only shown: this parser parses nothing
                common = made.add_argument_group("options")
                common.add_argument("-h", "--help", action="help", help="show this help message and exit")
                self.add_args(common, ())
            else:
                made = Parser(prog=f"{self.prog} {kind}", description=self.kinds[kind])
                self.add_args(made, (kind,))
            self.helps[kind] = made
        return self.helps[kind]

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        given = list(sys.argv[1:] if args is None else args)
        parsed, extras = super().parse_known_args(given, namespace)
        if not extras and getattr(parsed, "kind", None) in self.kinds:  # else argparse's own error comes first
            self.refuse_other_kinds(parsed.kind, given)
        return parsed, extras

    def refuse_other_kinds(self, kind: str, given: list[str]) -> None:
        """A usage error for the first flag in ``given`` that ``kind`` does not take, naming the kinds
        that do (the kind's own parser parses ``given`` exactly as this one)."""
        _, foreign = self.help_parser(kind).parse_known_args(given)  # the kind itself is left over too
        flags = flags_of(self)
        for token in foreign:
            flag = token.split("=", 1)[0]  # --flag=value
            if token.startswith("-") and flag in flags:
                takers = [f"`{self.prog} {k}`" for k in self.kinds if flag in flags_of(self.help_parser(k))]
                self.help_parser(kind).error(f"argument {flag}: `{self.prog} {kind}` takes no {flag}; "
                                             f"{' and '.join(takers)} {'takes' if len(takers) == 1 else 'take'} it")


class _KindHelp(argparse.Action):
    """``-h``/``--help`` of a :class:`KindParser`: the help of the kind given before it, else the
    kinds'."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        assert isinstance(parser, KindParser)
        parser.help_parser(getattr(namespace, "kind", None)).print_help()
        parser.exit()


def command(module: str, name: str = "run") -> Callable[[argparse.Namespace], Any]:
    """``jaxgcn.cli.<module>.<name>``, imported when the command runs: building the parser imports
    no command module (and so no JAX), and ``--help``, ``--version`` and a mistyped flag answer at once."""
    def call(args: argparse.Namespace, *rest: Any) -> Any:
        return getattr(importlib.import_module(f"jaxgcn.cli.{module}"), name)(args, *rest)
    call.__qualname__ = call.__name__ = f"{module}.{name}"
    return call


def dataset_forms() -> list[str]:
    """Every form ``--dataset`` accepts, from the one list (:func:`jaxgcn.datasets.available`)."""
    return [form for form, _ in available()]


def _add_source_args(d: argparse._ArgumentGroup) -> None:
    """Where the graph comes from and how it is cleaned (the "data" group)."""
    d.add_argument("--dataset", default="cora",
                   help=f"the graph, one of: {', '.join(dataset_forms())}; `jaxgcn datasets` describes each")
    d.add_argument("--data-dir", type=v.path, help="folder with raw Planetoid files ind.<name>.*")
    add_data_root(d)
    d.add_argument("--edges", type=v.path, help="your graph: edge file (CSV src,dst[,weight] or 'src dst' lines); "
                   "with --labels FILE and optionally --features FILE")
    d.add_argument("--labels", type=v.path,
                   help="with --edges: CSV node,label (names or integers); several labels per node: node,labels "
                        "(a row per node and label) or node,<label1>,<label2>,... (1/0/empty cells)")
    d.add_argument("--features", type=v.count_or_path, default=None,
                   help="with --edges: the features file (node,f0,f1,... or node,feature,value CSV, .npy or "
                        ".npz; absent: one-hot ids); with --dataset synthetic: the feature count (default: "
                        "64)")
    d.add_argument("--ogb-split", default=None, help="with --dataset ogb:DIR, the split/<name> to use "
                   "(default: the only one)")
    d.add_argument("--feature-norm", choices=("row", "standardize", "none"), default="row",
                   help="feature preprocessing; row: each row divided by its sum, as in the paper")
    d.add_argument("--norm", choices=("sym", "row", "none"), default="sym",
                   help="adjacency normalization; sym: D^-1/2 (A+I) D^-1/2, as in the paper")
    d.add_argument("--no-symmetrize", action="store_true", help="keep directed edges one-way")
    d.add_argument("--reorder", choices=("auto", "rcm", "none"), default="auto",
                   help=f"renumber nodes for memory locality (reverse Cuthill-McKee); auto: rcm from "
                        f"{REORDER_MIN_NODES:,} nodes on (metrics do not depend on the numbering)")


def add_data_root(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument("--data-root", type=v.path, default=None,
                   help="where named datasets are downloaded and parsed files cached (default: $JAXGCN_DATA, "
                        "else the per-user cache folder)")


def _add_synthetic_args(s: argparse._ArgumentGroup) -> None:
    s.add_argument("--nodes", type=v.positive_int, default=2000, help="number of nodes")
    s.add_argument("--classes", type=v.positive_int, default=5, help="number of classes (blocks)")
    s.add_argument("--avg-degree", type=float, default=8.0, help="expected degree of a node")
    s.add_argument("--homophily", type=float, default=0.8,
                   help="probability that an edge's target is drawn from its source's class (else uniformly), 0..1")


def _add_split_args(d: argparse._ArgumentGroup) -> None:
    d.add_argument("--split", choices=("public", "random"), default="public",
                   help="public: the dataset's own protocol (`jaxgcn datasets` names it: the Planetoid public "
                        "split, Shchur et al.'s 20/30 per class random splits, WikiCS's or OGB's official ones); "
                        "random: Planetoid-style random splits")
    d.add_argument("--splits", type=v.runs, default=1,
                   help="number of splits: random ones (--split random), or those of a protocol that has "
                        "several (per-class random splits; WikiCS's 20 official ones)")
    d.add_argument("--train-per-class", type=v.positive_int, default=20,
                   help="train nodes per class of a random split")
    d.add_argument("--val", type=v.positive_int, default=500, help="validation nodes of a random split")
    d.add_argument("--test", type=v.positive_int, default=1000, help="test nodes of a random split")
    d.add_argument("--data-seed", type=v.data_seed, default=0,
                   help="seed of the synthetic graph and of random split k (data seed + k); --seed "
                        "only seeds training, so --seeds N equals N runs of --seed s")
    d.add_argument("--train-frac", type=float, default=None,
                   help="stratified random split by fractions (with --val-frac, --test-frac)")
    d.add_argument("--val-frac", type=float, default=None, help="with --train-frac (default: 0.1)")
    d.add_argument("--test-frac", type=float, default=None, help="with --train-frac (default: 0.2)")
    d.add_argument("--split-file", type=v.path, help="CSV node,split (train/val/test) naming the split")
    d.add_argument("--save-split", type=v.path, help="write the split used as CSV node,split (for --split-file)")


def add_data_args(p: argparse.ArgumentParser) -> None:
    """Arguments that name the data and its split (train, sweep, evaluate, predict, ...)."""
    _add_source_args(p.add_argument_group("data"))
    _add_split_args(p.add_argument_group("split"))
    _add_synthetic_args(p.add_argument_group("synthetic graph (--dataset synthetic)"))


GRID_FLAGS = ("--hidden", "--layers", "--dropout", "--lr", "--optimizer", "--weight-decay")


def _comma(text: str, grid: bool, example: str) -> dict[str, str]:
    """``help`` (and ``metavar``) of a flag that sweep takes as a comma list."""
    return {"help": f"{text}; comma list, e.g. {example}", "metavar": "LIST"} if grid else {"help": text}


def _add_model_args(p: argparse.ArgumentParser, grid: bool) -> None:
    m = p.add_argument_group("model (defaults: the paper's)")
    m.add_argument("--hidden", type=v.list_of(int, "integers", v.positive_int) if grid else v.positive_int,
                   default=(16,) if grid else 16, **_comma("hidden units per layer", grid, "16,32,64"))
    m.add_argument("--layers", type=v.list_of(int, "integers", v.layers) if grid else v.layers,
                   default=(2,) if grid else 2, **_comma("GCN layers, the output layer included", grid, "2,3"))
    m.add_argument("--dropout", type=v.list_of(float, "numbers") if grid else float, default=(0.5,) if grid else 0.5,
                   **_comma("probability to DROP", grid, "0.3,0.5"))
    m.add_argument("--bias", action="store_true", help="add a bias per layer (the reference has none)")
    m.add_argument("--residual", action="store_true", help="hidden layers add their input (through a linear "
                   "projection where the widths differ)")
    m.add_argument("--layer-norm", action="store_true", help="layer normalization before each hidden activation")


PRECISIONS = ("auto", "default", "high", "highest")  # jaxgcn.core.models.PRECISIONS (no JAX import here)
PRECISION_HELP = ("float32 matmul precision, which matters on a TPU/GPU only (the CPU computes in float32 "
                  "whatever it says): default: XLA's (one bfloat16 pass on a TPU), high: 3 bfloat16 passes, "
                  "highest: full float32; auto: highest on a TPU/GPU (the CPU's answers), default on the CPU")


def _add_execution_args(e: argparse._ArgumentGroup) -> None:
    e.add_argument("--backend", choices=("auto", "dense", "segment", "bcoo", "csr", "gather"),
                   default="auto", help="how A.H is computed; auto: dense for small dense graphs, else csr (the fused "
                   "kernel) where it builds, else segment; gather: scatter-free neighbour lists (for accelerators)")
    e.add_argument("--precision", choices=PRECISIONS, default="auto", help=PRECISION_HELP)
    e.add_argument("--chunk-edges", type=v.positive_int, default=None,
                   help="segment backend: propagate in blocks of N edges (bounds the message buffer)")
    e.add_argument("--aggregate-first", choices=("auto", "on", "off"), default="auto",
                   help="first layer as (A X) W instead of A (X W) for dense features; auto: when 2 x "
                        "features < 3 x hidden (cheaper: no propagation in its backward pass)")
    e.add_argument("--dropout-rng", choices=("hash", "jax"), default="hash",
                   help="dropout masks from a fast counter hash or jax.random.bernoulli")
    e.add_argument("--debug", action="store_true",
                   help="check the first training step with jax_debug_nans and checkify index/NaN checks")
    e.add_argument("--no-compile-cache", action="store_true",
                   help="do not use JAX's persistent compilation cache (~/.cache/jaxgcn/xla on Linux, or "
                        "$JAXGCN_CACHE_DIR/xla when that is set)")


def _add_training_args(p: argparse.ArgumentParser, grid: bool) -> None:
    floats = v.list_of(float, "numbers") if grid else float
    t = p.add_argument_group("training (defaults: the paper's)")
    t.add_argument("--seed", type=v.seed, default=0, help="training seed (initialization, dropout) of the first run")
    t.add_argument("--seeds", type=v.runs, default=1, help="number of seeds: seed, seed+1, ...")
    t.add_argument("--epochs", type=v.epochs, default=200, help="most epochs to train")
    t.add_argument("--lr", type=floats, default=(0.01,) if grid else 0.01,
                   **_comma("learning rate", grid, "0.01,0.05"))
    optimizers = ", ".join(OPTIMIZERS)
    if grid:
        t.add_argument("--optimizer", type=v.list_of(str, "names", v.choice_of(OPTIMIZERS)), default=("adam",),
                       **_comma(f"optimizers to sweep, from {optimizers}", grid, "adam,sgd"))
    else:
        t.add_argument("--optimizer", choices=OPTIMIZERS, default="adam",
                       help="adam (the paper's), adamw (weight decay decoupled from the loss), sgd (p - lr * g) "
                            "or momentum (SGD with momentum 0.9)")
    t.add_argument("--weight-decay", type=floats, default=(5e-4,) if grid else 5e-4,
                   **_comma("L2 factor added to the loss", grid, "5e-4,1e-3"))
    t.add_argument("--l2", choices=("first", "all"), default="first", help="layers the L2 covers")
    t.add_argument("--clip-norm", type=float, default=None, help="global-norm gradient clipping (default: none)")
    t.add_argument("--early-stopping", choices=("kipf", "patience", "none"), default="kipf",
                   help="kipf: stop when the validation loss exceeds the mean of the previous --window "
                        "epochs'; patience: stop --patience epochs after the best validation accuracy")
    t.add_argument("--task", choices=("auto", "multiclass", "multilabel", "multilabel-f1"), default="auto",
                   help="what the runs learn: auto (the labels decide: one class id per node is multiclass, "
                        "scored by accuracy; several 0/1 labels per node multilabel, scored by ROC-AUC), or "
                        "multilabel-f1 (scored by micro-F1, PPI's metric)")
    t.add_argument("--window", type=v.epochs, default=10, help="Kipf's early-stopping window in epochs")
    t.add_argument("--patience", type=v.epochs, default=50, help="epochs without a better validation accuracy "
                   "(--early-stopping patience)")


def _add_output_args(o: argparse._ArgumentGroup, grid: bool) -> None:
    o.add_argument("--json", type=v.path, help="write the results to this JSON file")
    _add_save_args(o, grid)
    o.add_argument("--quiet", action="store_true", help="only the final summary (no bar, no progress lines)")
    if not grid:
        o.add_argument("--verbose", action="store_true",
                       help="also print where the time went: start-up, imports, devices and kernel, data, "
                            "compile, train")
    o.add_argument("--log-every", type=v.positive_int, default=20,
                   help="period in epochs of the progress lines" + ("" if grid else " and of --log records"))
    if not grid:
        o.add_argument("--log", type=v.path, default=None,
                       help="write one JSON line per logged epoch and run (epoch, loss, train/val accuracy, "
                            "val loss, elapsed seconds) to this file, a new or empty one unless --log-append; "
                            "`jaxgcn plot curves` draws it")
        o.add_argument("--log-append", action="store_true",
                       help="let --log add this run to a file that already holds lines (each line records its "
                            "run's config_id; `jaxgcn plot curves --config-id` picks one)")
        o.add_argument("--tensorboard", type=v.path, default=None,
                       help="also write TensorBoard event files here (needs tensorboardX)")


# --save, --overwrite, --checkpoint-every and --resume of train (False) and sweep (True)
SAVE_HELP = {
    False: ("save the trained model as a checkpoint directory",
            "with --save: replace the model of another run (other settings or data) that the directory holds "
            "(without it such a directory is refused)",
            "with --save: also save the whole run state every K epochs (for --resume)",
            "continue an interrupted --checkpoint-every run from its checkpoint directory"),
    True: ("keep the sweep's progress in this directory (each finished group's results; with --checkpoint-every, "
           "the state of the runs in training) for --resume; at the end it holds sweep.json and sweep.csv",
           "with --save: replace the save of another run or sweep that the directory holds (without it such a "
           "directory is refused)",
           "with --save: also save the state of the runs in training every K epochs",
           "continue an interrupted --save sweep from its directory: finished groups are not trained again, "
           "started runs go on from their last checkpoint"),
}


def _add_save_args(o: argparse._ArgumentGroup, grid: bool) -> None:
    save, overwrite, every, resume = SAVE_HELP[grid]
    o.add_argument("--save", type=v.path, help=save)
    o.add_argument("--overwrite", action="store_true", help=overwrite)
    o.add_argument("--checkpoint-every", type=v.positive_int, default=None, help=every)
    o.add_argument("--resume", type=v.checkpoint_path, default=None, help=resume)


def _add_job_args(g: argparse._ArgumentGroup, grid: bool) -> None:
    g.add_argument("--devices", type=v.positive_int, default=None,
                   help="devices to shard the run axis (or, with --shard-graph, the graph's rows) over "
                        "(default: all visible)")
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
    g.add_argument("--coordinator", type=v.host_port, default=None, metavar="HOST:PORT",
                   help="with --distributed: process 0's address (default: detected, e.g. from SLURM)")
    g.add_argument("--num-processes", type=v.positive_int, default=None,
                   help="with --distributed: processes in the job (default: detected)")
    g.add_argument("--process-id", type=v.int_in(0, v.INT32_MAX), default=None,
                   help="with --distributed: this process's index from 0 (default: detected)")
    g.add_argument("--join-timeout", type=v.positive_float, default=120.0, metavar="SECONDS",
                   help="with --distributed: how long a process waits for every process of the job to "
                        "join before it stops with a message naming the missing ones")


def add_train_args(p: argparse.ArgumentParser, grid: bool = False) -> dict[str, argparse._ArgumentGroup]:
    """Arguments shared by ``train`` and ``sweep``; with ``grid`` the swept ones take lists.
    Returns the "execution" and "output" groups, for a command's own additions."""
    add_data_args(p)
    _add_model_args(p, grid)
    _add_training_args(p, grid)
    execution = p.add_argument_group("execution (how the runs are computed)")
    _add_execution_args(execution)
    _add_job_args(p.add_argument_group("devices and processes (docs/distributed.md)"), grid)
    output = p.add_argument_group("output")
    _add_output_args(output, grid)
    records.add_file_args(p.add_argument_group("defaults from a file (docs/reproducibility.md)"))
    return {"execution": execution, "output": output}


def _add_train_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a GCN and report test accuracy")
    add_train_args(p)
    p.set_defaults(func=command("train"), setup=command("runtime", "setup"))


def _add_sweep_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="a hyperparameter grid x seeds x splits in few compiled programs",
                       description=f"The grid is every combination of the values of {', '.join(GRID_FLAGS)}, "
                                   "each a comma list (e.g. --lr 0.01,0.05 --hidden 16,32), times --seeds "
                                   "seeds and --splits random splits.")
    groups = add_train_args(p, grid=True)
    groups["execution"].add_argument("--memory-budget", type=v.byte_size, default=None,
                           help="split groups into chunks that fit (e.g. 4G; default: half the available memory)")
    groups["output"].add_argument("--csv", type=v.path, help="write one row per configuration to this CSV file")
    p.set_defaults(func=command("sweep"), setup=command("runtime", "setup"))


def _add_partition_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("partition", help="split a dataset into per-device row blocks on disk, so each "
                       "process of a --distributed job reads only its own (--dataset partitioned:DIR)")
    add_data_args(p)
    p.add_argument("--parts", type=v.positive_int, required=True, help="devices of the job that will train")
    p.add_argument("--exchange", choices=("auto", "all_gather", "halo"), default="auto",
                   help="the exchange the blocks are laid out for (auto: halo when it receives fewer rows)")
    p.add_argument("--out", type=v.path, required=True, help="the directory to write")
    p.set_defaults(func=command("partition"))


PLOT_KINDS = {  # one line each in `jaxgcn plot --help`
    "curves": "loss and accuracy per epoch, from a train --log file",
    "embeddings": "the nodes' last hidden layer in 2-D, from train --save",
    "sweep": "a heatmap of a sweep --json file over two hyperparameters",
}


def _add_plot_args(p: Any, kinds: tuple[str, ...]) -> None:
    """The flags of ``jaxgcn plot`` KINDS to the parser ``p`` (an argument group for no kind): --out
    and --title, and each kind's own (:class:`KindParser`)."""
    p.add_argument("--out", type=v.path, required=True, help="the PNG file to write")
    if "curves" in kinds:
        p.add_argument("--log", type=v.path, help="a file written by train --log")
        p.add_argument("--config-id", default=None, help="plot only the runs of this configuration (the "
                       "config_id of the --log lines) when the file holds several (train --log-append)")
    if "embeddings" in kinds:
        p.add_argument("--checkpoint", type=v.checkpoint_path, help="a directory written by train --save")
        p.add_argument("--run", type=v.run_index, default=None, help=RUN_HELP)
        p.add_argument("--method", choices=("pca", "tsne"), default="pca",
                       help="2-D projection (tsne needs scikit-learn)")
        p.add_argument("--label", metavar="NAME_OR_INDEX", help="a multi-label model: colour the nodes by this "
                       "label (its name, or its column from 0): has it, has it not, missing")
    if "sweep" in kinds:
        p.add_argument("--sweep-json", type=v.path, help="a file written by sweep --json")
        p.add_argument("--x", default="lr", help="hyperparameter on the x axis")
        p.add_argument("--y", default="hidden", help="hyperparameter on the y axis")
        p.add_argument("--fix", type=v.name_value, action="append", default=None, metavar="NAME=VALUE",
                       help="hold another swept hyperparameter at one value, e.g. dropout=0.5 (repeatable); "
                       "where others still vary, each cell is the best over them and the plot says so")
    p.add_argument("--title", default=None, help="the figure's title (default: one naming what is plotted)")
    if "embeddings" in kinds:
        add_data_args(p)
        checkpoint_dataset(p)


def _add_plot_command(sub: argparse._SubParsersAction) -> None:
    text = "PNG figures: training curves (--log), node embeddings (--checkpoint), a sweep heatmap (--sweep-json)"
    sub.add_parser("plot", help=text)  # its line in `jaxgcn --help`; the parser is the one below
    p = sub.choices["plot"] = KindParser(prog="jaxgcn plot", description=text, kinds=PLOT_KINDS,
                                         add_args=_add_plot_args)
    p.set_defaults(func=command("plot"))


def _add_info_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="a dataset's statistics: size, cleaning, degrees, classes, features, "
                       "memory estimate")
    add_data_args(p)
    p.add_argument("--hidden", type=v.positive_int, default=16, help="hidden units, for the memory estimate")
    p.add_argument("--json", type=v.path, help="also write the statistics to this JSON file")
    p.set_defaults(func=command("info"))


def drop_flags(p: argparse.ArgumentParser, flags: Sequence[str]) -> None:
    """Take ``flags`` out of ``p`` (and its ``--help``), their defaults kept in the namespace: the
    data request reads every data flag, and one that cannot apply is refused (:func:`unknown_flag`)
    rather than silently ignored."""
    for action in [a for a in p._actions if set(a.option_strings) & set(flags)]:
        p._remove_action(action)
        for group in p._action_groups:
            if action in group._group_actions:
                group._group_actions.remove(action)
        for flag in action.option_strings:
            del p._option_string_actions[flag]
        p.set_defaults(**{action.dest: action.default})


def checkpoint_dataset(p: argparse.ArgumentParser) -> None:
    """``--dataset`` of a command that reads a ``--checkpoint``: not given (nor ``--edges``), the data
    the checkpoint records (:func:`jaxgcn.cli.records.checkpoint_defaults`), so its default is None."""
    action = next(a for a in p._actions if a.dest == "dataset")
    action.default = None
    action.help = f"{action.help} (default: the dataset the --checkpoint was trained on)"


RUN_HELP = ("which run of a checkpoint saved with --seeds N / --splits K (0-based; default: the run with the "
            "best validation accuracy)")


def _add_checkpoint_commands(sub: argparse._SubParsersAction) -> None:
    """``evaluate`` and ``predict``: a saved model on a dataset."""
    for name, text in (("evaluate", "metrics of a saved model on a dataset's split"),
                       ("predict", "a saved model's predicted labels for every node (its class, or a "
                                   "multi-label model's labels), written as CSV")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--checkpoint", type=v.checkpoint_path, required=True,
                       help="a directory written by train --save")
        p.add_argument("--run", type=v.run_index, default=None, help=RUN_HELP)
        add_data_args(p)
        # evaluate scores on a split (the model's own, or one the flags draw); predict labels every node
        drop_flags(p, (*PREPARED_AS_TRAINED, *(SPLIT_FLAGS if name == "predict" else ("--save-split",))))
        checkpoint_dataset(p)
        if name == "predict":
            p.add_argument("--out", type=v.path, required=True,
                           help="CSV node,label,prob_<class>... ('-': to standard output, the notes to stderr)")
        else:
            p.add_argument("--on", choices=("test", "val", "train", "labelled"), default="test",
                           help="the nodes to score")
            p.add_argument("--json", type=v.path, help="write the metrics to this JSON file")
        p.add_argument("--precision", choices=PRECISIONS, default=None,
                       help=f"{PRECISION_HELP} (default: the precision the checkpoint was trained in; auto for a "
                            "checkpoint that records none)")
        p.add_argument("--threshold", type=v.probability, default=None,
                       help="a multi-label model's labels are those whose probability is above this (default 0.5)"
                            + ("; its precision, recall and F1 are scored there" if name == "evaluate" else ""))
        p.set_defaults(func=command(name))


def build_parser() -> argparse.ArgumentParser:
    """The ``jaxgcn`` parser: one subcommand per module of :mod:`jaxgcn.cli`."""
    parser = Parser(prog="jaxgcn", description="Graph Convolutional Networks in JAX (Kipf & Welling 2017).")
    parser.add_argument("--version", action="version", version=f"jaxgcn {version.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    _add_train_command(sub)
    _add_sweep_command(sub)
    _add_partition_command(sub)
    _add_plot_command(sub)
    _add_info_command(sub)
    p = sub.add_parser("datasets", help="list the datasets --dataset accepts, with source, size, protocol and "
                       "whether each is bundled, cached or to download")
    add_data_root(p)
    p.set_defaults(func=command("datasets"))
    p = sub.add_parser("download", help="fetch catalogue datasets into the cache now (e.g. before a job on "
                       "compute nodes without internet)")
    p.add_argument("names", nargs="+", metavar="NAME", help="catalogue names (`jaxgcn datasets`)")
    add_data_root(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=command("datasets", "download"))
    _add_checkpoint_commands(sub)
    return parser
