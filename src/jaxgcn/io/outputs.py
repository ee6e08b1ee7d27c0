"""Output files and directories: checked before any work, written atomically, nothing left behind.

Every file jaxgcn writes goes through :class:`Staged` (or :func:`write_atomic`, one file): the
bytes go to ``.<name>.tmp<PID>`` in the target's folder (created exclusively, never through a link
planted at that name: :func:`open_temp`), are flushed and fsynced, and only then
renamed over the target; on an error every temporary file is removed, so a failure leaves
neither a half-written output nor a stray temporary. A process killed in the middle of a write
(SIGKILL, power loss) cannot clean up: the next write into that folder removes the temporaries of
processes that are gone (:func:`remove_stale_temps`).

Targets that are not regular files:

- a symlink the user names (``--json latest.json``) is written *through*: the link stays and the
  file it points to gets the new content (the temporary file is made next to that file, so the
  rename stays on one filesystem). A user who links ``latest.json`` to a file means that file;
  replacing the link by a regular file would silently cut it;
- a name jaxgcn chooses inside a folder it owns (a checkpoint's files, ``runs.json``, a batch's
  ``state.json``, a partition's blocks: ``follow=False``) is never followed: a link planted there
  is replaced by the new file (the rename replaces the link itself), and the file it pointed to,
  possibly outside the folder, stays untouched. A folder jaxgcn makes inside one it owns
  (``run-000``, ``batch-state``) must be a real folder (:func:`owned_dir`), never a link;
- devices (``/dev/full``, ``/dev/null``), named pipes and sockets are refused: renaming over them
  would replace the node with a regular file (what ``--json /dev/full`` used to do), and writing
  into them cannot be made atomic or checked before the run.

A checkpoint directory being written is locked (:func:`locked_dir`, the ``filelock`` library), so
a second process saving into it is refused at once instead of interleaving its files.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator

TEMP = re.compile(r"^\.(?P<name>.+)\.tmp(?P<pid>\d+)$")
LOCK_NAME = ".jaxgcn.lock"  # inside a locked directory; never part of its content


def temp_path(target: Path) -> Path:
    """Where a write of ``target`` goes before the rename: ``.<name>.tmp<PID>`` beside it."""
    return target.with_name(f".{target.name}.tmp{os.getpid()}")


def open_temp(target: Path) -> tuple[Path, BinaryIO]:
    """Create ``target``'s temporary file (:func:`temp_path`) and open it for writing, exclusively
    (``O_CREAT | O_EXCL | O_NOFOLLOW``): never through whatever already has that name. A symlink
    planted there would otherwise send the write to the file it points to; a leftover (a killed
    write of a process whose PID this one now has, or a planted link) is removed, the link itself
    and never its target, and the file is created anew. Returns the path and the open file.

    >>> d = Path(tempfile.mkdtemp()); victim = d / "victim"; _ = victim.write_text("keep")
    >>> os.symlink(victim, temp_path(d / "out.json"))
    >>> tmp, f = open_temp(d / "out.json")
    >>> with f:
    ...     _ = f.write(b"new")
    >>> victim.read_text(), os.path.islink(tmp), tmp.read_text()
    ('keep', False, 'new')
    >>> shutil.rmtree(d)
    """
    tmp = temp_path(target)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(tmp, flags, 0o666)
    except FileExistsError:
        os.unlink(tmp)  # a link is removed itself; a folder of that name raises (reported by the caller)
        fd = os.open(tmp, flags, 0o666)  # exclusive again: a name recreated meanwhile fails, not followed
    return tmp, os.fdopen(fd, "wb")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    except (OverflowError, ValueError):
        return False
    return True


def remove_stale_temps(folder: str | os.PathLike, name: str | None = None) -> list[Path]:
    """Remove ``.<name>.tmp<PID>`` files in ``folder`` (of any name when ``name`` is None) whose
    process is gone: what a write killed before its rename leaves. Returns the removed paths.

    >>> import tempfile, subprocess, sys
    >>> d = Path(tempfile.mkdtemp())
    >>> gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
    ...                       capture_output=True, text=True).stdout.strip()
    >>> _ = (d / f".r.json.tmp{gone}").write_text("half")
    >>> [p.name for p in remove_stale_temps(d, "r.json")] == [f".r.json.tmp{gone}"]
    True
    >>> shutil.rmtree(d)
    """
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        m = TEMP.match(entry.name)
        if m is None or (name is not None and m["name"] != name) or _alive(int(m["pid"])):
            continue
        if not entry.is_file(follow_symlinks=False):
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(entry.path)
            removed.append(Path(entry.path))
    return removed


def resolve(path: str | os.PathLike) -> Path:
    """The file a write of ``path`` lands on: a symlink is followed (written through)."""
    path = Path(path)
    return Path(os.path.realpath(path)) if os.path.islink(path) else path


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def _shown(flag: str, path: Path, target: Path) -> str:
    return f"{flag} {path}" + (f" (a link to {target})" if target != path else "")


def _check_folder(shown: str, folder: Path) -> None:
    """The folder exists, is a folder, and this process can create files in it."""
    try:
        mode = os.stat(folder).st_mode
    except FileNotFoundError:
        raise ValueError(f"{shown}: folder {folder} does not exist; create it first") from None
    except NotADirectoryError:
        raise ValueError(f"{shown}: {folder} is not a folder (a part of the path is a file); give a path "
                         "in an existing folder") from None
    except OSError as err:
        raise ValueError(f"{shown}: folder {folder} cannot be used ({err.strerror}); choose another folder") from None
    if not stat.S_ISDIR(mode):
        raise ValueError(f"{shown}: {folder} is a file, not a folder; give a path in an existing folder")
    try:  # a real probe (root ignores permission bits; read-only mounts and ACLs do not show in st_mode)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise ValueError(f"{shown}: cannot write in folder {folder} ({err.strerror}); choose a writable "
                         "folder") from None


def _target(flag: str, path: str | os.PathLike) -> tuple[Path, Path, str, int | None]:
    """The path as given, where it lands (links followed), how messages show it, and its mode
    (None when it does not exist yet)."""
    path = Path(path)
    target = resolve(path)
    shown = _shown(flag, path, target)
    try:
        mode: int | None = os.stat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):  # the folder check names the problem
        mode = None
    except OSError as err:
        raise ValueError(f"{shown}: cannot be used ({err.strerror}); give another path") from None
    return path, target, shown, mode


def check_file(flag: str, path: str | os.PathLike, *, append: bool = False, example: str = "out") -> Path:
    """Refuse, before any work, an output file that cannot be written; return where it lands.

    ``append``: the file is appended to (``--log``), not replaced. ``example``: a file name the
    message suggests when ``path`` is a directory.
    """
    path, target, shown, mode = _target(flag, path)
    if mode is not None and stat.S_ISDIR(mode):
        raise ValueError(f"{shown}: is a directory; give a file name, e.g. {path / example}")
    if mode is not None and not stat.S_ISREG(mode):
        raise ValueError(f"{shown}: is {_kind(mode)}, not a regular file; jaxgcn writes a temporary file and "
                         "renames it into place, which would replace it; give a regular file path")
    _check_folder(shown, target.parent)
    if append and mode is not None:
        try:
            with open(target, "ab"):
                pass
        except OSError as err:
            raise ValueError(f"{shown}: cannot be appended to ({err.strerror}); check its permissions or give "
                             "another file") from None
    return target


def check_dir(flag: str, path: str | os.PathLike, *, marker: str | tuple[str, ...] | None = None,
              what: str = "") -> Path:
    """Refuse, before any work, an output directory that cannot be written. With ``marker`` (a file
    name, e.g. ``checkpoint.json``, or several: any of them) an existing non-empty directory must
    hold it: jaxgcn replaces its own output (``what`` names it) but never writes into a folder of
    other files."""
    path, target, shown, mode = _target(flag, path)
    if mode is None:
        _check_folder(shown, target.parent)
        return target
    if not stat.S_ISDIR(mode):
        raise ValueError(f"{shown}: is {'a file' if stat.S_ISREG(mode) else _kind(mode)}, not a folder; {flag} needs "
                         f"a directory: a new or empty one{f', or {what}' if what else ''}")
    markers = (marker,) if isinstance(marker, str) else marker or ()
    if markers and not any((target / m).exists() for m in markers):
        others = sorted(e.name for e in os.scandir(target) if e.name != LOCK_NAME and not TEMP.match(e.name))
        if others:
            raise ValueError(f"{shown}: holds other files ({others[0]}{', ...' if len(others) > 1 else ''}) and no "
                             f"{' or '.join(markers)}; give a new or empty folder{f', or {what}' if what else ''}")
    _check_folder(shown, target)
    return target


class Staged:
    """Outputs that appear together or not at all.

    Each :meth:`add` writes its temporary file at once; leaving the ``with`` block normally renames
    every one into place, leaving it with an exception removes them all (nothing new appears and
    nothing old is touched).

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> try:
    ...     with Staged() as out:
    ...         _ = out.add(d / "a.json", "{}")
    ...         raise KeyboardInterrupt
    ... except KeyboardInterrupt:
    ...     pass
    >>> list(d.iterdir())
    []
    >>> with Staged() as out:
    ...     _ = out.add(d / "a.json", "{}")
    >>> [p.name for p in d.iterdir()]
    ['a.json']
    >>> shutil.rmtree(d)
    """

    def __init__(self) -> None:
        self._pending: list[tuple[Path, Path]] = []

    def __enter__(self) -> "Staged":
        return self

    def add(self, path: str | os.PathLike, data: bytes | str, *, label: str | None = None,
            follow: bool = True) -> Path:
        """Write ``data`` (text as UTF-8) to ``path``'s temporary file; returns ``path``.
        ``follow=False``: ``path`` is a name jaxgcn owns, and a link there is replaced, not followed."""
        target = resolve(path) if follow else Path(path)
        with contextlib.suppress(FileNotFoundError):
            mode = (os.stat if follow else os.lstat)(target).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):  # checked before the run too; guards library callers
                raise ValueError(f"{label or path}: is {_kind(mode)}, not a regular file; refusing to replace it")
        remove_stale_temps(target.parent, target.name)
        tmp = temp_path(target)
        self._pending.append((tmp, target))
        blob = data.encode("utf-8") if isinstance(data, str) else data
        try:
            tmp, f = open_temp(target)
            with f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
        except OSError as err:
            raise ValueError(f"{label or path}: writing failed ({err.strerror}); check the free space and "
                             "permissions of its folder") from None
        return Path(path)

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        pending, self._pending = self._pending, []
        try:
            while exc_type is None and pending:
                tmp, target = pending[0]
                os.replace(tmp, target)
                pending.pop(0)
        finally:
            for tmp, _ in pending:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


def write_atomic(path: str | os.PathLike, data: bytes | str, *, label: str | None = None,
                 follow: bool = True) -> Path:
    """Write one file atomically (see :class:`Staged`; ``follow=False``: a name jaxgcn owns, where
    a planted link is replaced, never written through)."""
    with Staged() as out:
        out.add(path, data, label=label, follow=follow)
    return Path(path)


def owned_dir(path: str | os.PathLike) -> Path:
    """Create (if needed) a folder jaxgcn makes inside a folder it owns (``run-000``,
    ``batch-state``) and return it; a link or a file at that name is refused (ValueError): writing
    into a linked folder would overwrite, and clearing old files delete, files outside the output.

    >>> d = Path(tempfile.mkdtemp()); os.symlink(tempfile.gettempdir(), d / "run-000")
    >>> owned_dir(d / "run-001").is_dir()
    True
    >>> owned_dir(d / "run-000")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ValueError: .../run-000: is a link (to ...); jaxgcn writes only into a real folder it made there: remove the link
    >>> shutil.rmtree(d)
    """
    path = Path(path)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path)
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        raise ValueError(f"{path}: is a link (to {os.readlink(path)}); jaxgcn writes only into a real folder it "
                         "made there: remove the link")
    if not stat.S_ISDIR(mode):
        raise ValueError(f"{path}: is {_kind(mode) if not stat.S_ISREG(mode) else 'a file'}, not a folder; jaxgcn "
                         "keeps its own folder under that name: remove it or save elsewhere")
    return path


@contextlib.contextmanager
def locked_dir(flag: str, path: str | os.PathLike, *, remove_on_error: bool = True) -> Iterator[Path]:
    """Create ``path`` if needed and hold its lock for the ``with`` block; a directory another
    process holds is refused at once (ValueError), never waited for.

    A directory this call created is removed again when the block fails: always when nothing was
    written into it, and with everything in it when the block raised an Exception (or Ctrl-C) and
    ``remove_on_error`` (a failed run leaves no partial output folder; pass False when the folder may
    hold state worth keeping, such as resumable checkpoints)."""
    from filelock import FileLock, Timeout

    path = resolve(path)
    created = not os.path.lexists(path)
    try:
        path.mkdir(exist_ok=True)
    except OSError as err:
        raise ValueError(f"{flag} {path}: cannot create the folder ({err.strerror}); choose another path") from None
    lock_file = path / LOCK_NAME
    lock = FileLock(lock_file, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise ValueError(f"{flag} {path}: {path} is being written by another jaxgcn process (lock {lock_file}); "
                         "wait for it to finish or save somewhere else") from None
    failed = wipe = False
    try:
        yield path
    except BaseException as exc:
        # Ctrl-C too: an interrupted final save leaves no half-written folder
        failed, wipe = True, isinstance(exc, (Exception, KeyboardInterrupt)) and remove_on_error and created
        raise
    finally:
        if wipe:  # emptied while still locked, so no other writer can have started in it
            for entry in list(os.scandir(path)):
                if entry.name == LOCK_NAME:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
        lock.release()
        if failed and created and {e.name for e in os.scandir(path)} <= {LOCK_NAME}:
            with contextlib.suppress(OSError):
                os.unlink(lock_file)
            with contextlib.suppress(OSError):
                os.rmdir(path)
