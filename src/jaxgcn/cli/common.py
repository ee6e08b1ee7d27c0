"""The checks every command runs before any work (flags, input files, output paths, whether the
run fits in memory) and the one-line messages of their failures.

This module imports no JAX: :func:`jaxgcn.cli.main` runs :data:`BEFORE_JAX` right after parsing,
so a value that needs no data (a range, a dataset name, an output folder) is refused in the time
a mistyped flag is, not after JAX has started."""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import re
import sys
from pathlib import Path
from typing import Callable

from jaxgcn.io import outputs
from jaxgcn.cli.records import CHECKPOINT_JSON
from jaxgcn.cli.values import INT32_MAX, STDOUT
from jaxgcn.datasets.base import check_own_files
from jaxgcn.datasets.catalogue import SEVERAL_SPLIT_PROTOCOLS, check_name, lookup, refuse_unsupported
from jaxgcn.io.progress import check_log
from jaxgcn.store.manifest import peek_manifest

# Every output of every command: (flag, attribute, kind). file: replaced atomically; append: --log;
# checkpoint/partitions: a directory jaxgcn owns (replaced only when it holds that kind of output); dir: any.
OUTPUTS = {
    "train": (("--json", "json", "file"), ("--save-split", "save_split", "file"), ("--log", "log", "append"),
              ("--save", "save", "checkpoint"), ("--tensorboard", "tensorboard", "dir")),
    "sweep": (("--json", "json", "file"), ("--csv", "csv", "file"), ("--save-split", "save_split", "file"),
              ("--save", "save", "sweep")),
    "evaluate": (("--json", "json", "file"),),
    "predict": (("--out", "out", "file"),),
    "plot": (("--out", "out", "file"),),
    "info": (("--json", "json", "file"), ("--save-split", "save_split", "file")),
    "partition": (("--out", "out", "partitions"), ("--save-split", "save_split", "file")),
}
# What a --save folder that jaxgcn replaces holds: one run's checkpoint, several runs' manifest, or a
# batch's resumable state; a finished sweep's report, or its progress
SAVE_MARKERS = {"checkpoint": (("checkpoint.json", "runs.json", "batch-state"), "a checkpoint to replace"),
                "sweep": (("sweep.json", "batch-state"), "a saved sweep to replace")}
INPUTS = (("--edges", "edges"), ("--features", "features"), ("--labels", "labels"), ("--split-file", "split_file"),
          ("--checkpoint", "checkpoint"), ("--sweep-json", "sweep_json"))
EXAMPLES = {"--json": "results.json", "--csv": "sweep.csv", "--save-split": "split.csv", "--log": "train.jsonl"}
F32_MAX = 3.4028234663852886e38
Say = Callable[[str], None]  # where a command's progress messages go (print, or nothing with --quiet)


def inputs(args: argparse.Namespace) -> list[tuple[str, Path]]:
    """The input files the arguments name (plot's --log is an input; --features is a count without --edges)."""
    found = [(flag, Path(getattr(args, attr))) for flag, attr in INPUTS if getattr(args, attr, None) is not None
             and (attr != "features" or args.edges is not None)]
    if args.command == "plot" and args.log is not None:
        found.append(("--log", args.log))
    return found


# what each input flag names, as the readers call it; and the command that writes it
READERS = {"--edges": "edges", "--features": "features", "--labels": "labels", "--split-file": "split"}
WRITTEN_BY = {"--log": "jaxgcn train --log", "--sweep-json": "jaxgcn sweep --json"}
SAVED_BY = "pass the folder that `jaxgcn train --save DIR` wrote (the one holding checkpoint.json)"


def check_inputs(args: argparse.Namespace) -> None:
    """Every input the arguments name is there (a file; ``--checkpoint``: a folder holding a checkpoint)
    and an existing file can be read (permissions, an I/O error), all before JAX is imported and any
    data read; a directory given for a file and wrong formats are for the readers to report."""
    for flag, path in inputs(args):
        if flag == "--checkpoint":
            check_checkpoint(path)
            continue
        if not os.path.exists(path):
            if flag in READERS:  # the readers' wording (jaxgcn.datasets.readers.check_file), named by its flag
                raise ValueError(f"{flag}: {READERS[flag]} file {path}: not found; check the path")
            raise ValueError(f"{flag} {path}: no such file; write it with `{WRITTEN_BY[flag]} {path}`")
        if not path.is_file():
            continue
        try:
            with open(path, "rb") as f:
                f.read(1)
        except OSError as err:
            raise ValueError(f"{flag} {path}: cannot be read ({err.strerror}); check that the file is readable "
                             "(its permissions, the disk)") from None


def check_checkpoint(path: Path) -> None:
    """``--checkpoint DIR``: a folder that holds one run's checkpoint (``checkpoint.json``) or a
    several-run save's ``runs.json``; whether they can be read is for the loader to say."""
    if not path.exists():
        raise ValueError(f"--checkpoint {path}: not a checkpoint directory (no such folder); {SAVED_BY}")
    if not path.is_dir():
        raise ValueError(f"--checkpoint {path}: a file, not a checkpoint directory; {SAVED_BY}")
    if not any((path / name).exists() for name in (CHECKPOINT_JSON[0], "runs.json")):
        raise ValueError(f"--checkpoint {path}: not a checkpoint directory (no {CHECKPOINT_JSON[0]}); {SAVED_BY}")


def check_resume(args: argparse.Namespace) -> None:
    """``--resume DIR``: a folder, and for ``train`` one with state to resume, refused before JAX is
    imported, any data prepared or a "logging to" line printed. A finished run's checkpoint (saved at
    its end: no run state, no batch state) has nothing to resume. A several-run save, a finished sweep
    and a damaged batch state are refused while parsing (:func:`jaxgcn.cli.records.refuse_nothing_to_resume`)."""
    resume = getattr(args, "resume", None)
    if resume is None:
        return
    resume = Path(resume)
    fix = ("give the folder that `jaxgcn train --save DIR --checkpoint-every K` wrote" if args.command == "train"
           else "give the folder of an interrupted `jaxgcn sweep --save DIR`")
    if not resume.exists():
        raise ValueError(f"--resume {resume}: no such folder, nothing to resume; {fix}")
    if not resume.is_dir():
        raise ValueError(f"--resume {resume}: a file, not a checkpoint directory; {fix}")
    if args.command != "train" or (resume / CHECKPOINT_JSON[1]).exists():
        return
    meta = peek_manifest(resume / CHECKPOINT_JSON[0])
    if meta is None and not (resume / CHECKPOINT_JSON[0]).exists() and not (resume / "runs.json").exists():
        raise ValueError(f"--resume {resume}: not a checkpoint directory (no {CHECKPOINT_JSON[0]}); {fix}")
    if meta is not None and not meta.get("state_file"):
        raise ValueError(f"--resume {resume}: holds no run state to resume (it was saved at the end of a finished "
                         f"run); score it with `jaxgcn evaluate --checkpoint {resume}`, or train again")


def _check_output(args: argparse.Namespace, flag: str, path: Path, kind: str) -> str:
    """One output path checked (see :mod:`jaxgcn.io.outputs`); returns where it will be written."""
    if kind in ("file", "append"):
        example = EXAMPLES.get(flag) or ("plot.png" if args.command == "plot" else "predictions.csv")
        target = outputs.check_file(flag, path, append=kind == "append", example=example)
        if kind == "append":
            check_new_log(args, flag, path, target)
        return target
    if kind in SAVE_MARKERS:
        marker, what = SAVE_MARKERS[kind]
        target = outputs.check_dir(flag, path, marker=marker, what=what)
        refuse_linked_folders(flag, path, target)
        return target
    if kind == "partitions":
        return outputs.check_dir(flag, path, marker="partitions.json", what="partitions to replace")
    return outputs.check_dir(flag, path)


def refuse_linked_folders(flag: str, path: Path, target: Path) -> None:
    """A save writes into folders of its own inside ``--save DIR`` (``run-NNN``, ``batch-state``): a
    link at such a name would send the writes (and the clean-up of old files) outside DIR. Refused
    before any work, as the save itself refuses it (:func:`jaxgcn.io.outputs.owned_dir`)."""
    try:
        entries = [e for e in os.scandir(target) if e.is_symlink()]
    except OSError:  # not there yet: nothing planted in it
        return
    for entry in entries:
        if entry.name == "batch-state" or re.fullmatch(r"run-\d{3,}", entry.name):
            raise ValueError(f"{flag} {path}: {entry.name} is a link (to {os.readlink(entry.path)}); jaxgcn writes "
                             "only into real folders it made inside its save folder: remove the link")


def check_new_log(args: argparse.Namespace, flag: str, path: Path, target: Path) -> None:
    """``--log`` adds to its file: one that already holds lines is another run's (every ``train`` is a
    run of its own) and is refused unless ``--log-append`` says to add to it, or ``--resume``
    continues the run that wrote it (`jaxgcn plot curves` would otherwise draw both as one); a file
    added to must hold ``--log`` lines only."""
    if getattr(args, "log_append", False) or getattr(args, "resume", None) is not None:
        check_log(target, f"{flag} {path}")  # added to: it must be a log, not any file
        return
    try:
        with open(target, "rb") as f:
            lines = sum(1 for line in f if line.strip())
    except OSError:  # not there yet, or unreadable: nothing of another run can be seen in it
        return
    if lines:
        raise ValueError(f"{flag} {path}: already holds {lines} line{'s' if lines != 1 else ''} of another run, and "
                         "--log adds to its file (`jaxgcn plot curves` would draw both runs as one); give another "
                         "path (one log per run), or --log-append to add this run to it")


def check_outputs(args: argparse.Namespace) -> None:
    """Every output path of the command, checked before any work (data loading, training), so a run
    never fails at its end for a path that was wrong from the start. Two outputs naming one file, or an
    output naming an input, are refused too."""
    if getattr(args, "save_split", None) is not None and args.command in ("evaluate", "predict", "plot"):
        raise ValueError(f"--save-split {args.save_split}: `jaxgcn {args.command}` draws no split to save; "
                         "write it with `jaxgcn train --save-split FILE`")
    seen: dict[str, str] = {}
    for flag, attr, kind in OUTPUTS.get(args.command, ()):
        path = getattr(args, attr, None)
        if path is None or (args.command == "predict" and str(path) == STDOUT):  # predict --out -: stdout
            continue
        key = os.path.realpath(_check_output(args, flag, path, kind))
        if key in seen:
            raise ValueError(f"{flag} {path} and {seen[key]} name the same path; give each output its own")
        seen[key] = f"{flag} {path}"
    for flag, path in inputs(args):
        if os.path.realpath(path) in seen:
            raise ValueError(f"{seen[os.path.realpath(path)]} would overwrite the {flag} input; give the output "
                             "another path")


def check_numbers(args: argparse.Namespace) -> None:
    """Float flags that training computes with in float32 must be finite and fit in it."""
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


def check_split_flags(args: argparse.Namespace) -> None:
    """Split flags that contradict each other or would be silently ignored are refused."""
    origin = getattr(args, "dataset_origin", None)
    if getattr(args, "edges", None) is not None and origin is not None:
        chosen = f"{origin} ({args.dataset})" if origin != "--dataset" else f"--dataset {args.dataset}"
        raise ValueError(f"{chosen} and --edges {args.edges} both choose the data (a named dataset, your own graph); "
                         "give one of them")
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
    if args.splits > 1 and args.split != "random" and not several_protocol_splits(args):
        raise ValueError(f"--splits {args.splits} needs --split random (the public split is one split)")


def several_protocol_splits(args: argparse.Namespace) -> bool:
    """Whether --splits K picks K of the dataset protocol's own splits (Shchur et al.'s per-class
    random splits, WikiCS's official ones): --split public on such a catalogue dataset, with no
    split given (:attr:`jaxgcn.app.data.DataRequest.several_protocol_splits`, without importing JAX)."""
    if args.edges is not None or args.data_dir is not None or args.split != "public" or args.split_file is not None \
            or args.train_frac is not None or args.dataset is None:
        return False
    entry = lookup(args.dataset)
    return entry is not None and entry.protocol in SEVERAL_SPLIT_PROTOCOLS


# flag, attribute, whether a value is in range, the range in words, an example
RANGES = (("--dropout", "dropout", lambda x: 0 <= x < 1, "the probability to drop must be in [0, 1)", "0.5"),
          ("--lr", "lr", lambda x: x > 0, "the learning rate must be positive", "0.01"),
          ("--weight-decay", "weight_decay", lambda x: x >= 0, "the L2 factor must be 0 or more", "5e-4"),
          ("--clip-norm", "clip_norm", lambda x: x > 0, "the clipping norm must be positive", "1.0"),
          ("--homophily", "homophily", lambda x: 0 <= x <= 1, "a probability must be in [0, 1]", "0.8"),
          ("--avg-degree", "avg_degree", lambda x: 0 <= x < math.inf, "a degree must be finite and 0 or more", "8"),
          *((f"--{k}-frac", f"{k}_frac", lambda x: 0 < x < 1, "a fraction must be in (0, 1)", e)
            for k, e in (("train", "0.6"), ("val", "0.2"), ("test", "0.2"))))


def check_ranges(args: argparse.Namespace) -> None:
    """Every number flag inside the range the library accepts (sweep's lists: each value), a
    synthetic graph's node count for its classes, and fractions that fit in the labelled nodes
    together."""
    for flag, attr, ok, rule, example in RANGES:
        values = getattr(args, attr, None)
        for value in values if isinstance(values, tuple) else (values,):
            if value is not None and not ok(value):
                raise ValueError(f"{flag} {value:g}: {rule}; give a value such as {example}")
    if str(getattr(args, "dataset", None)).lower() == "synthetic" and args.edges is None \
            and args.nodes < 2 * args.classes:  # the stochastic block model's floor (jaxgcn.datasets.synthetic)
        raise ValueError(f"--nodes {args.nodes} --classes {args.classes}: a synthetic graph needs at least 2 nodes "
                         f"per class; give --nodes {2 * args.classes} or more, or fewer --classes")
    if getattr(args, "train_frac", None) is not None:
        train, val, test = args.train_frac, args.val_frac or 0.1, args.test_frac or 0.2
        if train + val + test > 1.0 + 1e-9:
            raise ValueError(f"--train-frac {train:g} --val-frac {val:g} --test-frac {test:g}: together "
                             f"{train + val + test:g}, more than all the labelled nodes; give fractions that sum to "
                             "1 or less")


def check_dataset(args: argparse.Namespace) -> None:
    """A ``--dataset`` name that no loader takes (or a catalogue dataset that cannot be trained on),
    from the catalogue alone; ``--data-dir`` takes any name, ``--edges`` names no dataset."""
    name = getattr(args, "dataset", None)
    if name is None or getattr(args, "edges", None) is not None or getattr(args, "data_dir", None) is not None:
        return
    sharded = args.command == "train" and (getattr(args, "shard_graph", False) or getattr(args, "distributed", False))
    entry = check_name(name, partitions=sharded)
    if entry is not None:
        refuse_unsupported(entry)


def check_own_files_early(args: argparse.Namespace) -> None:
    """:func:`~jaxgcn.datasets.base.check_own_files` for the commands with data flags."""
    if hasattr(args, "edges"):
        check_own_files(args.edges, args.labels, args.features)


def check_outputs_early(args: argparse.Namespace) -> None:
    """The output paths, unless the run is a multi-process job: which process writes is known once
    JAX has joined the job (:func:`prelude` checks them then, on that process)."""
    if not getattr(args, "distributed", False):
        check_outputs(args)


def check_split_flags_early(args: argparse.Namespace) -> None:
    """:func:`check_split_flags` for the commands with split flags."""
    if hasattr(args, "split_file"):
        check_split_flags(args)


def check_sweep_save(args: argparse.Namespace) -> None:
    """``sweep``'s ``--checkpoint-every`` needs ``--save`` (or ``--resume``, which saves where it
    resumes); a ``--distributed`` sweep keeps no progress (its processes would each write it)."""
    if args.command != "sweep":
        return
    save = args.save if args.save is not None else args.resume
    if args.checkpoint_every is not None and save is None:
        raise ValueError("--checkpoint-every K needs --save DIR (where the sweep's progress goes)")
    if args.distributed and save is not None:
        flag = f"--save {args.save}" if args.save is not None else f"--resume {args.resume}"
        raise ValueError(f"{flag} with --distributed: a sweep's progress is kept by a one-process sweep only; drop "
                         "--distributed, or --save and --resume")


# What jaxgcn.cli.main checks right after parsing, before JAX is imported: each function takes the
# parsed arguments and raises a ValueError naming the flag. A check that needs no data belongs here.
BEFORE_JAX: list[Callable[[argparse.Namespace], None]] = [
    check_dataset, check_own_files_early, check_numbers, check_ranges, check_split_flags_early, check_inputs,
    check_resume, check_outputs_early, check_sweep_save]


def before_jax(args: argparse.Namespace) -> None:
    """Every check of :data:`BEFORE_JAX`, in order (the first failure is raised)."""
    for check in BEFORE_JAX:
        check(args)


def prelude(args: argparse.Namespace) -> None:
    """The checks every data command runs before any work: :data:`BEFORE_JAX` again (a caller may run
    a command without :func:`jaxgcn.cli.main`, and a file may have changed since), and a job's outputs
    on the process that writes them."""
    before_jax(args)
    if getattr(args, "distributed", False):
        from jaxgcn.cli.runtime import is_writer  # JAX has joined the job by now

        if is_writer():  # only process 0 of a job writes
            check_outputs(args)


def warn_tensorboard(args: argparse.Namespace) -> None:
    """--tensorboard without tensorboardX: say so even with --quiet (the user asked for files that will
    not appear), on stderr, once, before the run; the run goes on without event files."""
    if getattr(args, "tensorboard", None) is not None and importlib.util.find_spec("tensorboardX") is None:
        print(f"jaxgcn: warning: --tensorboard {args.tensorboard}: tensorboardX is not installed (pip install "
              "tensorboardX); no event files are written (--log FILE keeps the same metrics as JSON lines)",
              file=sys.stderr, flush=True)
        args.tensorboard = None


def os_error(args: argparse.Namespace, exc: OSError) -> str:
    """One line for an OSError: the flag whose path failed (when known), the path, the reason, the fix."""
    reason = exc.strerror or type(exc).__name__
    name = exc.filename
    if name is None:
        return f"{reason} while reading or writing a file; check the paths given, their permissions and free space"
    named = (*INPUTS, *((f, a) for rows in OUTPUTS.values() for f, a, _ in rows))
    failed = (os.path.realpath(str(name)), os.path.dirname(os.path.realpath(str(name))))
    flag = next((f"{flag} " for flag, attr in named
                 if getattr(args, attr, None) is not None and os.path.realpath(str(getattr(args, attr))) in failed), "")
    return f"{flag}{name}: {reason}; check the path, its permissions and the free space of its disk"
