"""What a training run shows and records while it runs.

:class:`Progress` receives the events of :func:`jaxgcn.training.loop.fit` and
:func:`jaxgcn.training.runs.fit_batch` (``compiling()``, ``compiled(seconds)``, ``epochs(epoch,
history, elapsed)``, ``done()``) and

- on a terminal draws a tqdm bar with the current loss and validation accuracy (when tqdm is
  installed; plain lines otherwise), off a terminal (CI, log files) prints a plain line every
  ``every`` epochs, and prints nothing with ``quiet``; compiling is shown as its own phase;
- writes one JSON line per logged epoch and run to ``log_file`` (``--log``): ``run``, ``seed``,
  ``epoch``, ``loss``, ``train_acc``, ``val_loss``, ``val_acc``, ``elapsed`` (seconds since the
  first epoch started, measured when the chunk that ended at that epoch returned); with
  ``config`` (the run's settings) every line also has ``config_id`` (:func:`config_id` of them)
  and the run's first line is ``{"config_id", "settings"}``, so that runs of different settings
  appended to one file can be told apart (``jaxgcn plot curves`` refuses to draw them as one);
- writes TensorBoard scalars to ``tensorboard`` (``--tensorboard DIR``) when tensorboardX is
  installed, one sub-directory per run.

A history here is ``{"loss", "train_acc", "val_loss", "val_acc"}`` -> [epochs] arrays, or [runs,
epochs] for a batch (NaN where an epoch has not run).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
import time
from typing import IO, Any, Callable, NamedTuple

import numpy as np

KEYS = ("loss", "train_acc", "val_loss", "val_acc")


def epoch_line(epoch: int, loss: float, train_acc: float, val_acc: float) -> str:
    """THE progress line of one run: ``Epoch  20 | loss 1.2345 | train 0.9000 | val 0.7000``."""
    return f"Epoch {epoch:3d} | loss {loss:.4f} | train {train_acc:.4f} | val {val_acc:.4f}"


def runs_line(epoch: int, running: int, total: int, val_mean: float) -> str:
    """The progress line of a batch of runs: ``Epoch  20 | runs training 3/8 | val mean 0.7000``."""
    return f"Epoch {epoch:3d} | runs training {running}/{total} | val mean {val_mean:.4f}"


def tqdm_available() -> bool:
    try:
        import tqdm  # noqa: F401
    except ImportError:
        return False
    return True


def config_id(settings: dict[str, Any]) -> str:
    """A short stable id of a run's settings (8 hex digits of the SHA-256 of their sorted JSON).

    >>> config_id({"lr": 0.01, "seed": 0}) == config_id({"seed": 0, "lr": 0.01})
    True
    """
    text = json.dumps(settings, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def _clean(value: float) -> float | None:
    return None if not math.isfinite(value) else round(float(value), 6)


# --- reading a --log file back -------------------------------------------------------------------

MAX_NESTING = 32  # a log line's settings are a few levels deep; json.loads fails (RecursionError) near 1,000


class TooDeep(ValueError):
    """A ``--log`` line nested deeper than :data:`MAX_NESTING` levels."""


def nesting(value: Any) -> int:
    """How deeply lists and dicts nest in ``value`` (0 for a number), counted without recursion.

    >>> nesting(1), nesting({"a": [1, {"b": 2}]})
    (0, 3)
    """
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def log_record(line: str) -> Any:
    """One JSON line of a ``--log`` file, its nesting bounded (:data:`MAX_NESTING`): :class:`TooDeep`,
    never a RecursionError; a ValueError (JSONDecodeError) for a line that is not JSON."""
    try:
        rec = json.loads(line)
    except RecursionError:
        rec = None
    else:
        if nesting(rec) <= MAX_NESTING:
            return rec
    raise TooDeep(f"nested deeper than {MAX_NESTING} levels")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def log_line_problem(line: str) -> str | None:
    """Why ``line`` is not one that :class:`Progress` writes to a ``--log`` (a run's settings, an
    epoch's metrics, a run's early stop), or None when it is one."""
    try:
        rec = log_record(line)
    except ValueError as err:
        return str(err)
    if not isinstance(rec, dict):
        return "not a JSON object"
    if "settings" in rec:
        return None if isinstance(rec.get("config_id"), str) else "settings without a config_id"
    if "metric" in rec:
        return None if isinstance(rec["metric"], str) else "metric is not a name"
    if not _is_int(rec.get("run")):
        return "no run number"
    if "stopped_early_at" in rec:
        return None if _is_int(rec["stopped_early_at"]) else "stopped_early_at is not an epoch"
    if not _is_int(rec.get("epoch")):
        return "no epoch"
    bad = [k for k in KEYS if k in rec and not (rec[k] is None or _is_int(rec[k]) or isinstance(rec[k], float))]
    return f"{', '.join(bad)} not a number" if bad else None


def check_log(path: str | os.PathLike, shown: str) -> None:
    """Refuse a file to append to that holds a line :class:`Progress` does not write (``shown``: how
    the error names the file): appended to another kind of file, the runs would be lost to
    ``jaxgcn plot curves`` and the file damaged. A missing or empty file passes."""
    try:
        with open(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError:
                    problem: str | None = "not UTF-8 text"
                else:
                    problem = log_line_problem(line) if line.strip() else None
                if problem is not None:
                    raise ValueError(f"{shown}, line {number}: not a jaxgcn --log line ({problem}: "
                                     f"{raw.strip()[:40].decode('utf-8', 'replace')!r}); only a log that "
                                     "`jaxgcn train --log` wrote is added to: give a new path for this run's log")
    except OSError:  # not there yet, or unreadable: the output check says what is wrong with it
        return


class Progress:
    """Progress display plus the metrics log of one or several runs (see the module docstring).

    Args:
        total: epochs of the run (the bar's length).
        every: plain-line and log period in epochs.
        quiet: no display (the log files are still written).
        stream: where the display goes (default stdout).
        tty: draw a bar (default: ``stream.isatty()`` and tqdm installed).
        log_file: JSON-lines path (opened for appending; ``None``: no log).
        tensorboard: directory for TensorBoard event files (``None``: none).
        seeds: the seed of each run (for the log records).
        config: the settings of the run(s), recorded in the log (``None``: not recorded).
        say: where phase and notice lines go (default: print to ``stream`` unless quiet).
    """

    def __init__(self, total: int, *, every: int = 20, quiet: bool = False, stream: IO[str] | None = None,
                 tty: bool | None = None, log_file: str | os.PathLike | None = None,
                 tensorboard: str | os.PathLike | None = None, seeds: list[int] | None = None,
                 desc: str = "training", config: dict[str, Any] | None = None) -> None:
        self.total, self.every, self.quiet = total, max(1, every), quiet
        self.stream = stream if stream is not None else sys.stdout
        isatty = getattr(self.stream, "isatty", lambda: False)()
        self.tty = (isatty if tty is None else tty) and tqdm_available() and not quiet
        self.seeds = seeds or [0]
        self.desc = desc
        self.logged: dict[int, int] = {}  # run -> last epoch written
        self.shown = 0
        self.bar: Any = None
        self.log_file = log_file
        self.log = open(log_file, "a") if log_file is not None else None
        self.tag = {} if config is None else {"config_id": config_id(config)}
        if self.log is not None and config is not None:
            self.log.write(json.dumps({**self.tag, "settings": config}, default=str) + "\n")
        self.writers: list[Any] | None = None
        self.tensorboard = tensorboard
        self.compile_start = 0.0
        self.offset = 0
        self.since = 0  # the epoch the current runs resumed from (0: trained from the start)
        self.on_file: dict[int, int] | None = None  # run -> last epoch the --log already held (read on resuming)
        self.last_epoch: dict[int, int] = {}
        if tensorboard is not None:
            try:
                from tensorboardX import SummaryWriter
            except ImportError:
                self.say(f"--tensorboard {tensorboard}: tensorboardX is not installed (pip install tensorboardX); "
                         "no event files are written (--log FILE keeps the same metrics as JSON lines)")
            else:
                self.writers = [SummaryWriter(os.path.join(os.fspath(tensorboard), f"run-{i}-seed-{s}"))
                                for i, s in enumerate(self.seeds)]

    def say(self, message: str) -> None:
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.write(message, file=self.stream)
        else:
            print(message, file=self.stream, flush=True)

    # -- events ------------------------------------------------------------------------------------

    def start_slice(self, offset: int, label: str) -> None:
        """The next batch holds runs ``offset``, ``offset + 1``, ... (their epochs restart at 0)."""
        self.offset, self.shown, self.since = offset, 0, 0
        if self.bar is not None:
            self.bar.reset()
            self.bar.set_description(label)
        else:
            self.say(label)

    def resumed(self, epoch: int) -> None:
        """The current runs continue from ``epoch`` (a restored checkpoint): the epochs up to it are
        neither shown nor logged again (nor any the ``--log`` already holds of these settings: an
        interrupted run may have logged past its last checkpoint), and the bar starts at ``epoch``
        with its rate over the new epochs only."""
        if epoch <= 0:
            return
        self.since = self.shown = epoch
        if self.log is not None and self.on_file is None:
            self.on_file = self._logged_on_file()
        if self.bar is not None:
            self.bar.reset()  # restarts the bar's clock and its rate's averages
            self.bar.n = self.bar.initial = self.bar.last_print_n = epoch
            self.bar.refresh()

    def _logged_on_file(self) -> dict[int, int]:
        """The last epoch of each run that the log file holds for this run's ``config_id``."""
        last: dict[int, int] = {}
        with open(self.log_file, encoding="utf-8") as f:  # type: ignore[arg-type]
            for line in f:
                try:
                    rec = json.loads(line)
                    if rec.get("config_id") == self.tag.get("config_id") and "epoch" in rec:
                        last[int(rec["run"])] = int(rec["epoch"])
                except (ValueError, TypeError, KeyError, AttributeError):
                    continue  # not a line of this run: another writer's, or damaged
        return last

    def compiling(self) -> None:
        self.compile_start = time.perf_counter()
        if self.tty:
            print("compiling…", end="\r", file=self.stream, flush=True)

    def compiled(self, seconds: float) -> None:
        if seconds > 0:
            self.say(f"compiled in {seconds:.2f}s")
        elif self.tty:
            print(" " * 12, end="\r", file=self.stream, flush=True)
        if self.tty and self.bar is None:
            from tqdm import tqdm

            import shutil

            # a sizeless pseudo-terminal reports 0 x 0, which makes tqdm draw nothing: fall back to 100 x 24
            size = shutil.get_terminal_size((100, 24))
            self.bar = tqdm(total=self.total, desc=self.desc, unit="epoch", file=self.stream, leave=True,
                            ncols=min(max(size.columns, 60), 140), nrows=max(size.lines, 24), disable=False)

    def epochs(self, epoch: int, history: dict[str, Any], elapsed: float) -> None:
        """The runs have advanced to ``epoch`` (the largest epoch of any run)."""
        rows = {k: np.atleast_2d(np.asarray(history[k], np.float64)) for k in KEYS}
        self._write_log(rows, epoch, elapsed)
        latest = {k: self._latest(rows[k], epoch) for k in KEYS}
        running = int(np.sum(np.isfinite(rows["loss"][:, epoch - 1]))) if epoch >= 1 else 0
        if self.bar is not None:
            self.bar.update(epoch - self.bar.n)
            post = {"loss": f"{latest['loss']:.4f}", "val": f"{latest['val_acc']:.4f}"}
            if rows["loss"].shape[0] > 1:
                post["runs"] = f"{running}/{rows['loss'].shape[0]}"
            self.bar.set_postfix(post, refresh=True)
        elif not self.quiet:
            for e in range(self.shown + 1, epoch + 1):
                if e % self.every == 0:
                    i = e - 1
                    if rows["loss"].shape[0] == 1:
                        self.say(epoch_line(e, *(rows[k][0, i] for k in ("loss", "train_acc", "val_acc"))))
                    else:
                        val = rows["val_acc"][:, i]
                        live = int(np.sum(np.isfinite(val)))
                        self.say(runs_line(e, live, len(val), float(np.nanmean(val)) if live else float("nan")))
        self.shown = epoch

    def _seed(self, run: int) -> int:
        return int(self.seeds[run]) if run < len(self.seeds) else run

    def done(self, finished: bool = True, metric: str = "accuracy") -> None:
        """Close the bar and the files; the log gets one ``stopped_early_at`` line per run that ended
        before the last epoch (what ``jaxgcn plot curves`` marks), unless the runs did not finish
        (``finished`` False: interrupted, or failed), which stopped none of them early; and a line
        ``{"metric": ...}`` naming what ``train_acc``/``val_acc`` held when the task's metric is not
        accuracy (:attr:`jaxgcn.core.tasks.Task.metric`; ``plot curves`` labels its axis by it)."""
        if self.log is not None and finished and metric != "accuracy":
            self.log.write(json.dumps({"metric": metric, **self.tag}) + "\n")
        if self.log is not None and finished:
            for run, last in sorted(self.last_epoch.items()):
                if last < self.total:
                    self.log.write(json.dumps({"run": run, "seed": self._seed(run), "stopped_early_at": last,
                                               **self.tag}) + "\n")
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self.log is not None:
            self.log.close()
            self.log = None
        for w in self.writers or []:
            w.close()
        self.writers = None

    # -- internals ---------------------------------------------------------------------------------

    @staticmethod
    def _latest(values: np.ndarray, epoch: int) -> float:
        col = values[:, max(epoch - 1, 0)]
        col = col[np.isfinite(col)]
        return float(col.mean()) if col.size else float("nan")

    def _first_new(self, run: int) -> int:
        """The last epoch of ``run`` not to log again: 0, or on resuming the later of the resumed
        epoch and the last one the log file holds."""
        return max(self.since, (self.on_file or {}).get(run, 0)) if self.since else 0

    def _write_log(self, rows: dict[str, np.ndarray], epoch: int, elapsed: float) -> None:
        if self.log is None and self.writers is None:
            return
        for local in range(rows["loss"].shape[0]):
            run = self.offset + local
            trained = np.flatnonzero(np.isfinite(rows["loss"][local, :epoch]))
            if trained.size:  # also a run that stopped before the epoch it resumed from
                self.last_epoch[run] = int(trained[-1]) + 1
            start = self.logged.get(run, self._first_new(run))
            for e in range(start + 1, epoch + 1):
                i = e - 1
                if not np.isfinite(rows["loss"][local, i]):
                    continue  # this run had stopped
                last = e == epoch or not np.isfinite(rows["loss"][local, min(i + 1, epoch - 1)])
                if e % self.every and not last:
                    continue
                record = {"run": run, "seed": self._seed(run), "epoch": e,
                          **{k: _clean(rows[k][local, i]) for k in KEYS}, "elapsed": round(elapsed, 4), **self.tag}
                if self.log is not None:
                    self.log.write(json.dumps(record) + "\n")
                if self.writers is not None and run < len(self.writers):
                    for k in KEYS:
                        if record[k] is not None:
                            self.writers[run].add_scalar(k, record[k], e)
            self.logged[run] = epoch
        if self.log is not None:
            self.log.flush()


class Chunk(NamedTuple):
    """What the host sees after each compiled chunk of epochs (the argument of the hooks of
    :func:`jaxgcn.training.loop.drive`).

    Attributes:
        epoch: epochs done (by the furthest run).
        history: ``{"loss", "train_acc", "val_loss", "val_acc"}`` -> [epochs] or [runs, epochs] (NaN
            where a run has not, or no longer, trained).
        reason: [runs] why each run ended (``RUNNING`` while it trains); [1] for a single run.
        seconds: wall time since the first chunk started.
    """

    epoch: int
    history: dict[str, np.ndarray]
    reason: np.ndarray
    seconds: float


Hook = Callable[[Any, Chunk], None]  # (the device state after the chunk, what it shows)


def log_hook(log: Callable[[str], None], every: int, since: int = 0) -> Hook:
    """A hook that logs :func:`epoch_line` for every ``every``-th epoch of one run
    after epoch ``since`` (a resumed run's restored epochs are not logged again)."""
    shown = [since]

    def hook(_: Any, seen: Chunk) -> None:
        rows = seen.history
        for e in range(shown[0] + 1, seen.epoch + 1):
            if e % every == 0:
                log(epoch_line(e, *(float(rows[k][e - 1]) for k in ("loss", "train_acc", "val_acc"))))
        shown[0] = seen.epoch
    return hook


def progress_hook(progress: Any) -> Hook:
    """A hook that feeds a :class:`Progress` (bar or lines, ``--log``, TensorBoard)."""
    return lambda _, seen: progress.epochs(seen.epoch, seen.history, seen.seconds)
