"""Run records and config files: ``--from-record FILE`` and ``--config FILE`` set a command's
option defaults from a mapping (flags given on the command line still win), ``--json``'s
``record`` key is built from the parsed options, and a re-run says whether it matches its record.

One mechanism serves both files: :func:`file_defaults` reads them into ``{dest: value}`` and
:func:`to_defaults` checks every name and value against the command's parser (its types and
choices, exactly as the flags are checked) before ``set_defaults``. docs/reproducibility.md
describes the record.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import tomllib
from pathlib import Path
from typing import Any, Sequence

from jaxgcn.cli import values
from jaxgcn.store.manifest import BATCH_STATE, ManifestError, peek_manifest, read_manifest


# Options that are not the run's configuration: the files that set defaults, and what a re-run must
# not take over from its record (where it writes, which checkpoint it resumes, how a job's processes
# find each other; give them again on the re-run's command line when wanted).
FILE_OPTIONS = ("from_record", "config")
NOT_REPLAYED = ("json", "csv", "save", "overwrite", "save_split", "log", "tensorboard", "checkpoint_every", "resume",
                "coordinator", "num_processes", "process_id")
NOT_OPTIONS = ("command", "func", "setup", "argv", "dataset_origin")  # namespace entries, not options
# A checkpoint records its command's options too (``extra``'s ``options``). ``train --resume DIR``
# takes them as its defaults except how this process reports; the run goes on saving into DIR as
# often as it did and logging its new epochs to its --log, and a flag given that differs from the
# recorded value is refused, except the outputs and the files the data is read from (the data's
# SHA-256, checked on resuming, judges those).
# How a process shows its run, not what it trains (neither resumed nor part of a --log's config_id).
DISPLAY = ("quiet", "verbose", "log_every", "log_append", "no_compile_cache", "debug")
NOT_RESUMED = (*DISPLAY, "join_timeout")
RESUMED_FREE = ("save", "checkpoint_every", "log", "data_root", "data_dir", "edges", "features", "labels",
                "split_file", "json", "csv", "save_split", "tensorboard")
# What a resumed run keeps writing as the run did: its --log and --tensorboard (the resumed run adds
# its new epochs) and the files the interrupted command would have written at its end (--json,
# sweep's --csv, --save-split); another path given with --resume takes them instead.
RESUMED_OUTPUTS = ("checkpoint_every", "log", "json", "csv", "save_split", "tensorboard")
# the outputs written at the end, named by a resumed run's note (resumed_notes)
END_OUTPUTS = (("--json", "json"), ("--csv", "csv"), ("--save-split", "save_split"))
# evaluate, predict and plot --checkpoint DIR without --dataset or --edges: the recorded options that
# choose the graph (the split is the one the checkpoint saved; normalizations come from it too)
DATA_CHOICE = ("dataset", "data_dir", "ogb_split", "features", "nodes", "classes", "avg_degree", "homophily",
               "data_seed", "no_symmetrize")
# where a checkpoint's JSON lives: jaxgcn.store.checkpoint.META and jaxgcn.store.batch_state's FOLDER/MANIFEST
# (named here, not imported: parsing the flags imports no JAX)
CHECKPOINT_JSON = ("checkpoint.json", "batch-state/state.json")
# where a --save folder's model records its options: one run's checkpoint, a batch's state, or its first run
SAVED_JSON = (CHECKPOINT_JSON[0], CHECKPOINT_JSON[1], "run-000/checkpoint.json")
# The data options that apply to one source only (jaxgcn.app.data.DataRequest.source): a run's record,
# checkpoint and --log settings name its own source's, not the parser's defaults for the others (an
# own-files run is no --dataset cora run, nor a synthetic graph of 2000 --nodes, on the public --split)
NAMED_ONLY = ("dataset", "data_dir", "ogb_split")
SYNTHETIC_ONLY = ("nodes", "classes", "avg_degree", "homophily")
FILES_ONLY = ("edges", "labels")
SWEEP_JSON = "sweep.json"  # a finished `sweep --save DIR`'s report (jaxgcn.app.sweep.REPORT), its record inside
# options that do not make another model: outputs, display, the files that set defaults, where data is cached
NOT_COMPARED = (*NOT_REPLAYED, *NOT_RESUMED, *FILE_OPTIONS, "data_root")


def add_file_args(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--config`` and ``--from-record``, for the commands that write a record (train, sweep)."""
    p.add_argument("--config", type=values.path, default=None,
                   help="TOML (.toml) or JSON file of option defaults, by the flags' names (e.g. lr = 0.01, "
                        "weight-decay = 5e-4); flags given on the command line win; docs/reproducibility.md")
    p.add_argument("--from-record", type=values.path, default=None,
                   help="re-run the configuration recorded in a --json report (its options become the "
                        "defaults; flags given win) and say whether the versions and the data match it")


def _command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def _read_json(flag: str, path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{flag} {path}: no such file; give the path of an existing file") from None
    except OSError as err:
        raise ValueError(f"{flag} {path}: cannot be read ({err.strerror}); check the path and its permissions") \
            from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{flag} {path}: not valid JSON ({err}); give a JSON file") from None
    except RecursionError:
        raise ValueError(f"{flag} {path}: nested deeper than Python's recursion limit; an options file is a flat "
                         "table of option = value") from None


def _strings(value: Any, missing: bool = False) -> bool:
    """A dict of strings to strings (``missing``: or to None, a package that was not installed)."""
    return isinstance(value, dict) and all(
        isinstance(k, str) and (isinstance(v, str) or (missing and v is None)) for k, v in value.items())


def _check_record(record: dict[str, Any], path: Path) -> None:
    """The fields a re-run reads besides the options, of the types ``jaxgcn --json`` writes."""
    devices = record.get("devices")
    listed = devices.get("devices") if isinstance(devices, dict) else None
    for key, ok in (("command", isinstance(record.get("command", "train"), str)),
                    ("versions", record.get("versions") is None or _strings(record["versions"], missing=True)),
                    ("data_sha256", record.get("data_sha256") is None or _strings(record["data_sha256"])),
                    ("devices", devices is None or (isinstance(listed, list) and all(
                        _strings({k: d.get(k) for k in ("platform", "kind", "name")}) if isinstance(d, dict)
                        else False for d in listed)))):
        if not ok:
            raise ValueError(f"--from-record {path}: its \"record\" has a {key!r} of the wrong type "
                             f"({type(record.get(key)).__name__}); give a file written by `jaxgcn train --json`")


def read_record(path: Path) -> dict[str, Any]:
    """The ``record`` of a report written by ``train/sweep --json`` (``--from-record``)."""
    report = _read_json("--from-record", path)
    record = report.get("record") if isinstance(report, dict) else None
    if not isinstance(record, dict) or not isinstance(record.get("options"), dict):
        raise ValueError(f"--from-record {path}: holds no \"record\" with \"options\"; give a file written by "
                         "`jaxgcn train --json` (or sweep --json)")
    _check_record(record, path)
    return record


def read_config(path: Path) -> dict[str, Any]:
    """The mapping of a ``--config`` file: TOML (``.toml``) or JSON (``.json``), by suffix."""
    if path.suffix.lower() == ".json":
        table = _read_json("--config", path)
    elif path.suffix.lower() == ".toml":
        try:
            with open(path, "rb") as f:
                table = tomllib.load(f)
        except FileNotFoundError:
            raise ValueError(f"--config {path}: no such file; give the path of an existing file") from None
        except OSError as err:
            raise ValueError(f"--config {path}: cannot be read ({err.strerror}); check the path") from None
        except (UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
            raise ValueError(f"--config {path}: not valid TOML ({err})") from None
        except RecursionError:
            raise ValueError(f"--config {path}: nested deeper than Python's recursion limit; an options file is "
                             "a flat table of option = value") from None
    else:
        raise ValueError(f"--config {path}: unknown suffix {path.suffix or '(none)'!r}; name a TOML file *.toml "
                         "or a JSON file *.json")
    if not isinstance(table, dict):
        raise ValueError(f"--config {path}: holds {type(table).__name__}, not a table of option = value")
    return table


def _text(value: Any) -> str:
    """A config value as the flag's text: lists (sweep's grids) as a comma list."""
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _convert(source: str, key: str, action: argparse.Action, value: Any) -> Any:
    """``value`` checked and converted as the flag ``action`` would be (``source`` names the file)."""
    flag = action.option_strings[-1]
    if action.nargs == 0:  # a switch (store_true)
        if not isinstance(value, bool):
            raise ValueError(f"{source}: {key} = {value!r}: {flag} is a switch; give true or false")
        return value
    if value is None:
        if action.default is None:  # the flag's own "not given"
            return None
        raise ValueError(f"{source}: {key} = null: {flag} needs a value such as {_text(action.default)!r} (leave "
                         "the key out for the default)")
    if isinstance(value, (dict, bool)) or (isinstance(value, (list, tuple)) and any(
            isinstance(v, (dict, list, tuple, bool)) or v is None for v in value)):
        raise ValueError(f"{source}: {key} = {value!r}: {flag} takes a value such as {_text(action.default)!r}")
    text = _text(value)
    try:
        converted = action.type(text) if action.type is not None else text
    except (argparse.ArgumentTypeError, TypeError, ValueError) as err:
        raise ValueError(f"{source}: {key} = {value!r}: invalid {flag} value ({err})") from None
    converted = values.canonical_choice(action.choices, converted)  # case-insensitive, as on the command line
    if action.choices is not None and converted not in action.choices:
        raise ValueError(f"{source}: {key} = {value!r}: {flag} takes one of {', '.join(map(str, action.choices))}")
    return converted


def to_defaults(parser: argparse.ArgumentParser, mapping: dict[str, Any], source: str) -> dict[str, Any]:
    """``{dest: value}`` for ``parser.set_defaults`` from ``mapping`` (names as the flags', hyphens or
    underscores, with or without ``--``); an unknown name or a bad value is a ValueError naming
    ``source``, the key and the closest valid names."""
    actions = {a.dest: a for a in parser._actions
               if a.option_strings and a.dest not in (argparse.SUPPRESS, "help", *FILE_OPTIONS)}
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        dest = str(key).lstrip("-").replace("-", "_")
        if dest not in actions:
            names = sorted(d.replace("_", "-") for d in actions)
            close = difflib.get_close_matches(str(key).lstrip("-").replace("_", "-"), names, n=3)
            hint = f"did you mean {', '.join(close)}?" if close else f"valid names: {', '.join(names)}"
            raise ValueError(f"{source}: unknown option {key!r} for `jaxgcn {parser.prog.split()[-1]}`; {hint}")
        out[dest] = _convert(source, key, actions[dest], value)
    return out


def file_defaults(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """The defaults ``--from-record`` and then ``--config`` set (the config's win over the record's),
    and which file chose the dataset (``{"dataset": "--config FILE"}``; a record of a run on own
    files only records the default dataset: it chose none)."""
    command = _command_parser(parser, args.command)
    defaults: dict[str, Any] = {}
    origins: dict[str, str] = {}
    if getattr(args, "from_record", None) is not None:
        record = read_record(args.from_record)
        if record.get("command", args.command) != args.command:
            raise ValueError(f"--from-record {args.from_record}: records a `jaxgcn {record['command']}` run; re-run "
                             f"it with `jaxgcn {record['command']} --from-record {args.from_record}`")
        replayed = {k: v for k, v in record["options"].items() if k not in NOT_REPLAYED}
        defaults.update(to_defaults(command, replayed, f"--from-record {args.from_record}"))
        if "dataset" in defaults and defaults.get("edges") is None:
            origins["dataset"] = f"--from-record {args.from_record}"
    if getattr(args, "config", None) is not None:
        configured = to_defaults(command, read_config(args.config), f"--config {args.config}")
        defaults.update(configured)
        if "dataset" in configured:
            origins["dataset"] = f"--config {args.config}"
    return defaults, origins


def _checkpoint_json(directory: Path, names: Sequence[str]) -> dict[str, Any] | None:
    """The first of ``names`` in ``directory`` that reads as a JSON object; None where none does (the
    command that loads the checkpoint then says why)."""
    return next((meta for name in names if (meta := peek_manifest(directory / name)) is not None), None)


def recorded_options(meta: dict[str, Any] | None) -> dict[str, Any] | None:
    """The command options a checkpoint's metadata records (None: none, e.g. an older jaxgcn's)."""
    extra = meta.get("extra") if isinstance(meta, dict) else None
    found = extra.get("options") if isinstance(extra, dict) else None
    return found if isinstance(found, dict) else None


def _resume_defaults(command: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Any]:
    """``train --resume DIR``: the options its checkpoint (or a batch's state) records, as defaults."""
    resume = Path(args.resume)
    meta = _checkpoint_json(resume, CHECKPOINT_JSON[::-1])  # a batch's (or a sweep's) state first
    if isinstance(meta, dict) and meta.get("single_run") is True:  # one run's state: its model's record rules
        meta = _checkpoint_json(resume, CHECKPOINT_JSON[:1]) or meta
    refuse_other_command(f"--resume {resume}", meta, args.command, f"resume it with `jaxgcn {{}} --resume {resume}`")
    options = recorded_options(meta)
    if options is None:
        refuse_nothing_to_resume(resume)
        return {}
    kept = {k: v for k, v in options.items()
            if k in RESUMED_OUTPUTS or k not in (*NOT_REPLAYED, *NOT_RESUMED, *FILE_OPTIONS)}
    return {**to_defaults(command, kept, f"--resume {resume}"), "save": args.resume}


def resumed_notes(args: argparse.Namespace) -> list[str]:
    """``--resume DIR``: a line per file the resumed command writes at its end (restored from the
    interrupted command's record, as its --log is, or given again), so that none goes unsaid."""
    if getattr(args, "resume", None) is None:
        return []
    return [f"{flag} {getattr(args, dest)}: the resumed {args.command} writes it at its end"
            for flag, dest in END_OUTPUTS if getattr(args, dest, None) is not None]


def saved_command(meta: dict[str, Any] | None) -> str:
    """The command whose save ``meta`` (a checkpoint's or a batch state's JSON) is: a sweep's state
    says so (``extra``'s ``command``); every other save is train's."""
    extra = meta.get("extra") if isinstance(meta, dict) else None
    command = extra.get("command") if isinstance(extra, dict) else None
    return command if isinstance(command, str) else "train"


def refuse_other_command(flag: str, meta: dict[str, Any] | None, command: str, fix: str) -> None:
    """A folder holding another command's save (a train batch's state given to ``sweep``, a sweep's
    to ``train``) is refused; ``fix`` names what to do, ``{}`` standing for the other command."""
    other = saved_command(meta)
    if meta is not None and other != command:
        what = "a sweep" if other == "sweep" else f"a `jaxgcn {other}` run"
        raise ValueError(f"{flag}: holds the save of {what}, not of a `jaxgcn {command}` one; {fix.format(other)}")


def refuse_nothing_to_resume(resume: Path) -> None:
    """``--resume DIR`` whose checkpoint records no options: where DIR holds no ``checkpoint.json``,
    say what it holds instead (a finished several-run save, a damaged batch state) rather than
    leave the one-run reader to say it is no checkpoint at all. Readable state of an older jaxgcn
    (no options recorded) passes: the flags given say what to resume."""
    flag, state = f"--resume {resume}", resume / CHECKPOINT_JSON[1]
    if (resume / CHECKPOINT_JSON[0]).exists():  # a one-run checkpoint: its reader names any damage
        return
    if (resume / SWEEP_JSON).exists() and not state.parent.exists():
        raise ValueError(f"{flag}: holds a finished sweep ({SWEEP_JSON}, sweep.csv, no batch state): nothing to "
                         f"resume; its results are in {resume / SWEEP_JSON}, or re-run it with `jaxgcn sweep "
                         f"--from-record {resume / SWEEP_JSON}`")
    if state.parent.is_symlink() or (state.parent.exists() and not state.parent.is_dir()):
        raise ValueError(f"{flag}: {state.parent.name} is {'a link' if state.parent.is_symlink() else 'a file'}, not "
                         "the folder jaxgcn keeps a batch's state in; nothing to resume: remove it and train again")
    if state.parent.is_dir():
        try:  # the format only: the batch's reader (jaxgcn.store.batch_state, after JAX) checks the rest
            read_manifest(state, BATCH_STATE)
        except ManifestError as err:
            raise ValueError(f"{flag}: {CHECKPOINT_JSON[1]} is damaged ({err.why}), so the batch cannot be resumed; "
                             "train again") from None
        return
    runs = _checkpoint_json(resume, ("runs.json",))
    if runs is not None and isinstance(runs.get("runs"), list):
        entries = [r for r in runs["runs"] if isinstance(r, dict)]
        splits = len({r.get("split") for r in entries})
        how = f"--seeds {len(entries) // max(splits, 1)}" + (f" --splits {splits}" if splits > 1 else "")
        raise ValueError(f"{flag}: holds a finished {how} save ({len(entries)} runs in runs.json, no batch state): "
                         f"nothing to resume; score it with `jaxgcn evaluate --checkpoint {resume}`, or train again")


def own_files(options: dict[str, Any]) -> str:
    """The file flags of a run on its own files, as given (``--edges E --labels L [--features F]``)."""
    return " ".join(f"--{k} {options[k]}" for k in ("edges", "features", "labels") if options.get(k) is not None)


def _checkpoint_data(command: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, Any]:
    """evaluate, predict, plot embeddings ``--checkpoint DIR`` given no ``--dataset`` or ``--edges``:
    the data options the checkpoint records (an older checkpoint: its catalogue dataset), as defaults."""
    from jaxgcn.store.checkpoint_runs import resolve_run  # here: only when a checkpoint's data is looked up
    from jaxgcn.datasets.catalogue import lookup

    try:
        directory, _ = resolve_run(args.checkpoint, args.run)
    except ValueError:
        return {}  # the command reports it, before it reads any data
    meta = _checkpoint_json(directory, CHECKPOINT_JSON[:1])
    if meta is None:
        return {}
    options = recorded_options(meta)
    source = f"--checkpoint {args.checkpoint}"
    if options is not None and options.get("edges") is not None:
        raise ValueError(f"{source}: the model was trained on your own files ({own_files(options)}); pass them "
                         "again (or files in the same feature space) with --edges, --labels and --features")
    if options is not None:
        return to_defaults(command, {k: options[k] for k in DATA_CHOICE if k in options}, source)
    name = meta.get("dataset")
    if not isinstance(name, str) or lookup(name) is None:
        raise ValueError(f"{source}: records its data as {name!r}, which --dataset cannot name (files, or a "
                         "checkpoint of an older jaxgcn); pass the data it was trained on with --dataset NAME or "
                         "--edges FILE --labels FILE [--features FILE]")
    return to_defaults(command, {"dataset": name}, source)


def checkpoint_defaults(parser: argparse.ArgumentParser, args: argparse.Namespace) \
        -> tuple[dict[str, Any], dict[str, str]]:
    """The defaults a checkpoint sets (``train --resume DIR``; ``--checkpoint DIR`` of a command that
    reads data, given no ``--dataset``/``--edges``) and which option chose the dataset."""
    command = _command_parser(parser, args.command)
    if getattr(args, "resume", None) is not None:
        defaults, flag = _resume_defaults(command, args), f"--resume {args.resume}"
    elif (getattr(args, "checkpoint", None) is not None and hasattr(args, "edges") and args.dataset is None
          and args.edges is None and getattr(args, "kind", "embeddings") == "embeddings"):
        defaults, flag = _checkpoint_data(command, args), f"--checkpoint {args.checkpoint}"
    else:
        return {}, {}
    chose = "dataset" in defaults and defaults.get("edges") is None
    return defaults, ({"dataset": flag} if chose else {})


def _flag_text(action: argparse.Action, value: Any) -> str:
    flag = action.option_strings[-1]
    if value is None or value is False:
        return f"no {flag}"
    return flag if action.nargs == 0 else f"{flag} {_text(value)}"


def refuse_resume_changes(parser: argparse.ArgumentParser, args: argparse.Namespace,
                          restored: dict[str, Any]) -> None:
    """``--resume DIR`` with an option whose value differs from the one its checkpoint records is
    refused, naming both values and the fix."""
    actions = {a.dest: a for a in _command_parser(parser, args.command)._actions if a.option_strings}
    differ = [d for d in restored if d not in RESUMED_FREE and getattr(args, d) != restored[d]]
    if differ:
        was = ", ".join(_flag_text(actions[d], restored[d]) for d in differ)
        now = ", ".join(_flag_text(actions[d], getattr(args, d)) for d in differ)
        flags = ", ".join(actions[d].option_strings[-1] for d in differ)
        raise ValueError(f"--resume {args.resume}: the checkpoint was trained with {was}; this command gives {now} "
                         f"(drop {flags} to resume, or train afresh without --resume)")


def refuse_another_runs_model(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``train --save DIR`` where DIR holds the model of a run with other settings or data (a Cora
    model, this run CiteSeer) is refused, naming what differs, unless ``--overwrite``; a re-run of
    the same command, and a resumed run saving into its own folder, replace it as before."""
    save = getattr(args, "save", None)
    if save is None or getattr(args, "overwrite", True) or (
            args.resume is not None and Path(args.resume).resolve() == Path(save).resolve()):
        return
    meta = _checkpoint_json(Path(save), SAVED_JSON) or _finished_sweep(Path(save))
    if meta is None:
        return  # no model there (a folder of something else is for the output checks to judge)
    refuse_other_command(f"--save {save}", meta, args.command, "give another folder, or --overwrite to replace it")
    # every option of this run, defaults of other sources included: a model saved on own files (which
    # records no --dataset) is another run's for a --dataset run (no --edges), whose --edges is None
    recorded, mine = recorded_options(meta), options(args, applied=False)
    actions = {a.dest: a for a in _command_parser(parser, args.command)._actions if a.option_strings}
    differ = [] if recorded is None else sorted(
        d for d in mine if d in recorded and d in actions and d not in NOT_COMPARED and recorded[d] != mine[d])
    if recorded is not None and not differ:
        return
    fix = "give another folder, or --overwrite to replace it"
    if recorded is None:
        raise ValueError(f"--save {save}: holds a model whose settings are not recorded (an older jaxgcn's); {fix}")
    was = ", ".join(_flag_text(actions[d], recorded[d]) for d in differ)
    now = ", ".join(_flag_text(actions[d], mine[d]) for d in differ)
    raise ValueError(f"--save {save}: holds the model of another run, trained with {was}; this run gives {now} "
                     f"({fix})")


def _finished_sweep(directory: Path) -> dict[str, Any] | None:
    """A finished saved sweep's record as a checkpoint's metadata reads (``extra``: its command and
    options), or None."""
    report = _checkpoint_json(directory, (SWEEP_JSON,))
    record = report.get("record") if report is not None else None
    if not isinstance(record, dict):
        return None
    return {"extra": {"command": record.get("command", "sweep"), "options": record.get("options")}}


_UNSET = object()


def _on_command_line(parser: argparse.ArgumentParser, command: str, given: list[str], dest: str) -> bool:
    """Whether the command line itself sets ``dest`` (in any spelling argparse accepts)."""
    sub = _command_parser(parser, command)
    saved = sub.get_default(dest)
    sub.set_defaults(**{dest: _UNSET})
    try:
        return getattr(parser.parse_args(given), dest) is not _UNSET
    finally:
        sub.set_defaults(**{dest: saved})


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse ``argv``; with ``--from-record``/``--config`` (and a checkpoint's recorded options:
    :func:`checkpoint_defaults`, the lowest) parse again with the files' values as the command's
    defaults, so the flags given still win. ``args.argv`` keeps the command line as given."""
    given = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(given)
    restored, origins = checkpoint_defaults(parser, args)
    files, file_origins = file_defaults(parser, args) if hasattr(args, "from_record") else ({}, {})
    defaults = {**restored, **files}
    origins.update(file_origins)
    if defaults:
        _command_parser(parser, args.command).set_defaults(**defaults)
        args = parser.parse_args(given)
    if getattr(args, "resume", None) is not None:
        refuse_resume_changes(parser, args, restored)
    if args.command in ("train", "sweep"):
        refuse_another_runs_model(parser, args)
    if hasattr(args, "edges"):  # which option chose the dataset, if any (own files conflict with it)
        args.dataset_origin = ("--dataset" if _on_command_line(parser, args.command, given, "dataset")
                               else origins.get("dataset"))
    args.argv = [sys.argv[0] if argv is None else parser.prog, *given]
    return args


def _json_value(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [_json_value(v) for v in value]
    return value


def not_applied(given: dict[str, Any]) -> tuple[str, ...]:
    """The data options of ``given`` (a command's options) that did not apply to its data: another
    source's, and ``--split`` (the dataset's protocol or random splits) where the split is given
    (own files, ``--split-file``, ``--train-frac``). A command that reads no data: none.

    >>> not_applied({"edges": "e.csv", "dataset": "cora"})
    ('dataset', 'data_dir', 'ogb_split', 'nodes', 'classes', 'avg_degree', 'homophily', 'split')
    >>> not_applied({"edges": None, "dataset": "cora", "split_file": None, "train_frac": None})
    ('edges', 'labels', 'features', 'nodes', 'classes', 'avg_degree', 'homophily')
    """
    if "edges" not in given:
        return ()
    if given["edges"] is not None:
        return (*NAMED_ONLY, *SYNTHETIC_ONLY, "split")
    split = ("split",) if given.get("split_file") is not None or given.get("train_frac") is not None else ()
    if given.get("dataset") == "synthetic":  # --features is its feature count
        return (*FILES_ONLY, "data_dir", "ogb_split", *split)
    return (*FILES_ONLY, "features", *SYNTHETIC_ONLY, *split)


def options(args: argparse.Namespace, *, applied: bool = True) -> dict[str, Any]:
    """Every option of the parsed command that applied to its run, by its parser name
    (``weight_decay``), as JSON values: not the data options of another source (:func:`not_applied`;
    ``applied=False``: those too)."""
    every = {k: _json_value(v) for k, v in sorted(vars(args).items()) if k not in (*NOT_OPTIONS, *FILE_OPTIONS)}
    drop = not_applied(every) if applied else ()
    return {k: v for k, v in every.items() if k not in drop}


def record(args: argparse.Namespace, data: Any | None) -> dict[str, Any]:
    """This run's ``record`` (:func:`jaxgcn.io.reports.run_record`); ``data``: the prepared
    :class:`~jaxgcn.core.data.TrainData` whose fingerprint it holds (None: not on this host)."""
    from jaxgcn.io import reports
    from jaxgcn.store import checkpoint  # here: parsing the flags imports neither (nor JAX)

    fingerprint = checkpoint.data_fingerprint(data) if data is not None else None
    return reports.run_record(args.command, getattr(args, "argv", [args.command]), options(args), fingerprint)


def match_line(args: argparse.Namespace, here: dict[str, Any]) -> str | None:
    """With ``--from-record``: one line saying whether the versions and the data match the record,
    naming what differs (None without ``--from-record``)."""
    if getattr(args, "from_record", None) is None:
        return None
    from jaxgcn.io import reports

    differ = reports.record_differences(read_record(args.from_record), here)
    parts = ["versions match" if not differ["versions"] else "versions differ: " + "; ".join(differ["versions"])]
    parts.append("data matches" if not differ["data"] else
                 f"data differs: {', '.join(differ['data'])} (SHA-256 of the prepared arrays)")
    if differ["devices"]:
        parts.append("devices differ: " + differ["devices"][0])
    return f"record {args.from_record}: " + "; ".join(parts)


def for_run(args: argparse.Namespace, data: Any | None) -> dict[str, Any] | None:
    """The run's record when ``--json`` writes it or ``--from-record`` compares it (None otherwise:
    the fingerprint reads every array of the data); with ``--from-record`` the match line is printed."""
    if getattr(args, "json", None) is None and getattr(args, "from_record", None) is None:
        return None
    here = record(args, data)
    matched = match_line(args, here)
    if matched:
        print(matched)
    return here
