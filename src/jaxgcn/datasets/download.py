"""Downloads of catalogue datasets into a per-user cache: verified, locked, and only when asked.

Where files go: ``data_root()`` = the ``root`` argument (``--data-root``), else ``$JAXGCN_DATA``, else
``datasets`` in jaxgcn's cache folder (:mod:`jaxgcn.host.caches`: ``$JAXGCN_CACHE_DIR``, else the per-user
cache folder, ``platformdirs.user_cache_dir("jaxgcn")``). Each dataset has
its own folder ``<root>/<name>/`` holding the files under their catalogue names.

How a file is fetched: with pooch (streamed to a temporary file in the same folder, hash-checked,
then moved into place; retried on network errors), under a file lock per dataset folder so that
several processes starting together (SLURM array tasks) download once and never see a
half-written file. A file with a published SHA-256 must match it. A file without one has the hash
of its first download recorded beside it (``<file>.sha256``) once the dataset PARSES (``check``
of :func:`fetch`): an HTML error page, a captive portal's answer or a truncated file is never
recorded as the dataset's identity, and nothing of it is kept. A later download that differs from
the record is refused. Archives are listed and bounded before they are unpacked (members inside
the folder, at most :data:`MAX_EXPANSION` times the archive's size, and room on the disk).

``$JAXGCN_MIRROR`` (a base URL under which ``<name>/<filename>`` are served) replaces the
upstream addresses: a cluster's own mirror, or the test suite's local HTTP server.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import tempfile
import zipfile
from pathlib import Path

from typing import Callable

from jaxgcn.host import caches
from jaxgcn.datasets.catalogue import Dataset, Source
from jaxgcn.io.outputs import open_temp

ENV_ROOT = "JAXGCN_DATA"
ENV_MIRROR = "JAXGCN_MIRROR"
RETRIES = 2  # extra attempts after a failed download (network errors and hash mismatches)
TIMEOUT_SECONDS = 60  # to connect and between received bytes; a stalled server is a failed attempt
MAX_EXPANSION = 100  # an archive may unpack to this many times its size (OGB's hold gzip files: ~1-10x)
POOCH_TEMP = re.compile(r"^tmp[a-z0-9_]{8}$")  # tempfile.NamedTemporaryFile's names: pooch's partial downloads
HTML_STARTS = (b"<!doctype html", b"<html", b"<head", b"<body", b"<?xml")


class DownloadError(ValueError):
    """A dataset file could not be downloaded, or did not verify (the message says what to do)."""


def data_root(root: str | Path | None = None) -> Path:
    """The dataset cache folder: ``root``, else ``$JAXGCN_DATA``, else ``datasets`` in jaxgcn's cache
    folder (:func:`jaxgcn.host.caches.root`: ``$JAXGCN_CACHE_DIR`` or the per-user cache folder)."""
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get(ENV_ROOT)
    if env:
        return Path(env).expanduser()
    return caches.root() / "datasets"


def dataset_dir(entry: Dataset, root: str | Path | None = None) -> Path:
    """``<data root>/<name>``: where ``entry``'s files live."""
    return data_root(root) / entry.name


def source_url(entry: Dataset, source: Source) -> str:
    """Where ``source`` is fetched from: ``$JAXGCN_MIRROR/<name>/<filename>`` when set, else upstream."""
    mirror = os.environ.get(ENV_MIRROR)
    return f"{mirror.rstrip('/')}/{entry.name}/{source.filename}" if mirror else source.url


def _record(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _extracted(path: Path) -> Path:
    return path.with_name(path.name + ".extracted")


def _recorded(path: Path) -> tuple[str, int] | None:
    """``(sha256, size)`` written after ``path`` was downloaded and verified, or None."""
    try:
        digest, size = _record(path).read_text().split()
        return digest, int(size)
    except (OSError, ValueError):
        return None


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _write_atomic(path: Path, text: str) -> None:
    tmp, f = open_temp(path)
    with f:
        f.write(text.encode("utf-8"))
    os.replace(tmp, path)


def is_cached(entry: Dataset, root: str | Path | None = None) -> bool:
    """Whether every file of ``entry`` is in the cache, downloaded and verified (bundled: True)."""
    folder = dataset_dir(entry, root)
    for source in entry.sources:
        path = folder / source.filename
        record = _recorded(path)
        if record is None or not path.is_file() or path.stat().st_size != record[1]:
            return False
        if source.unzip and not _extracted(path).is_file():
            return False
    return True


def _offline_help(entry: Dataset, folder: Path) -> str:
    files = "; ".join(f"{source_url(entry, s)} -> {folder / s.filename}" for s in entry.sources)
    return (f"on a machine without internet, run `jaxgcn download {entry.name}` where there is one and copy "
            f"{folder} to the same place here (or point --data-root / ${ENV_ROOT} at the copy), or put the files "
            f"there yourself: {files}")


def _reason(err: Exception) -> str:
    """A network error in a few words: its type and, for an HTTP error, the status; else the
    innermost cause's message (urllib3 nests several), cut at a word."""
    response = getattr(err, "response", None)
    if response is not None:
        return f"HTTP {response.status_code} {response.reason}"
    inner: BaseException = err
    while inner.__cause__ is not None or inner.__context__ is not None:
        inner = inner.__cause__ or inner.__context__  # type: ignore[assignment]
    text = str(inner.args[-1] if inner.args else inner)
    return f"{type(err).__name__}: {text if len(text) <= 160 else text[:160].rsplit(' ', 1)[0] + ' ...'}"


def _html(path: Path) -> bool:
    """Whether ``path`` starts like an HTML (or XML) page: an error page, a login or captive portal."""
    with open(path, "rb") as f:
        return f.read(1024).lstrip().lower().startswith(HTML_STARTS)


def _fetch_one(entry: Dataset, source: Source, folder: Path, progress: bool) -> tuple[Path, str] | None:
    """Fetch ``source`` unless it is in place and verified; returns ``(path, sha256)`` of a file
    whose record is still to be written (after the dataset parses), or None."""
    import pooch
    import requests

    path = folder / source.filename
    record = _recorded(path)
    if record is not None and path.is_file() and path.stat().st_size == record[1]:
        return None  # downloaded and verified before: not hashed again at every load
    known = source.sha256 or (record[0] if record else None)
    url = source_url(entry, source)
    pooch.get_logger().setLevel("WARNING")
    fetcher = pooch.create(path=folder, base_url="", registry={source.filename: f"sha256:{known}" if known else None},
                           urls={source.filename: url}, retry_if_failed=RETRIES)
    bar = progress and importlib.util.find_spec("tqdm") is not None
    downloader = pooch.HTTPDownloader(progressbar=bar, timeout=TIMEOUT_SECONDS) if url.startswith("http") else None
    try:
        fetcher.fetch(source.filename, downloader=downloader)
    except requests.exceptions.RequestException as err:
        raise DownloadError(f"dataset {entry.name}: could not download {url} ({_reason(err)}); "
                            f"{_offline_help(entry, folder)}") from None
    except ValueError as err:
        if "hash" not in str(err).lower():
            raise
        raise DownloadError(f"dataset {entry.name}: {url} downloaded a file whose SHA-256 differs from the "
                            f"{'published' if source.sha256 else 'first download'}'s ({known}); nothing was kept "
                            f"at {path}. The upstream file changed or the transfer was altered: check the source, "
                            f"and if the new file is right delete {_record(path)} to accept it") from None
    if known is None and _html(path):
        path.unlink()
        raise DownloadError(f"dataset {entry.name}: {url} answered with an HTML page, not the dataset file (an "
                            "error page, a login or captive portal, a proxy?); nothing was kept: check the address "
                            f"(${ENV_MIRROR} when set) and the network, then run again")
    _extracted(path).unlink(missing_ok=True)  # a new archive is unpacked again, never an old copy used
    return path, known or file_sha256(path)


def _unzip(path: Path, folder: Path) -> None:
    """Extract ``path`` into ``folder`` (members must stay inside it, and may not expand beyond
    :data:`MAX_EXPANSION` times the archive or the free disk), then mark it extracted."""
    if _extracted(path).is_file():
        return
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise DownloadError(f"{path}: not a zip archive ({'an HTML page' if _html(path) else 'unreadable'}); "
                            "nothing was kept: run again to download it anew") from None
    with archive:
        for member in archive.namelist():
            target = (folder / member).resolve()
            if not target.is_relative_to(folder.resolve()):
                raise DownloadError(f"{path}: member {member!r} would be written outside {folder}; refusing the "
                                    "archive")
        total, size = sum(i.file_size for i in archive.infolist()), path.stat().st_size
        if total > MAX_EXPANSION * max(size, 2**20):
            raise DownloadError(f"{path}: its members expand to {total / 1e9:.2f} GB, {total / max(size, 1):.0f} times "
                                f"the archive's {size / 1e6:.1f} MB (a zip bomb?); refusing the archive")
        free = shutil.disk_usage(folder).free
        if total > free:
            raise DownloadError(f"{path}: unpacking needs {total / 1e9:.2f} GB and {folder} has {free / 1e9:.2f} GB "
                                "free; free some space or point --data-root at a larger disk")
        tmp = Path(tempfile.mkdtemp(prefix=".extract.tmp", dir=folder))  # a new folder, never a planted link
        try:
            archive.extractall(tmp)
        except (zipfile.BadZipFile, EOFError) as err:  # a member whose bytes do not match its header
            shutil.rmtree(tmp, ignore_errors=True)
            raise DownloadError(f"{path}: a member does not unpack ({err}); nothing was kept: run again to "
                                "download it anew") from None
    for item in tmp.iterdir():
        dest = folder / item.name
        if dest.exists():
            shutil.rmtree(dest) if dest.is_dir() else dest.unlink()
        os.replace(item, dest)
    tmp.rmdir()
    _write_atomic(_extracted(path), "ok\n")


def _discard(fresh: list[tuple[Path, str]]) -> None:
    for path, _ in fresh:
        path.unlink(missing_ok=True)
        _extracted(path).unlink(missing_ok=True)


def fetch(entry: Dataset, root: str | Path | None = None, *, progress: bool = True,
          check: Callable[[Path], object] | None = None) -> Path:
    """Download (if not cached) and verify every file of ``entry``; returns its folder.

    ``check(folder)`` parses what was fetched (:func:`jaxgcn.datasets.named.load_named` passes the
    format's reader): only then are the files' hashes recorded; a file that does not parse is
    removed with its unpacked copy, and the error says so. Pooch's partial files of a download that
    was killed are removed first. Safe to call from several processes at once: one downloads while
    the others wait on the folder's lock, then find the files in place.
    """
    from filelock import FileLock

    folder = dataset_dir(entry, root)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DownloadError(f"dataset {entry.name}: cannot create the cache folder {folder} ({err.strerror}); "
                            f"point --data-root or ${ENV_ROOT} at a writable folder") from None
    with FileLock(folder / ".lock"):
        for stale in folder.iterdir():  # under the lock no download is running here: these are leftovers
            if POOCH_TEMP.match(stale.name) and stale.is_file():
                stale.unlink()
        fresh: list[tuple[Path, str]] = []
        try:
            for source in entry.sources:
                pending = _fetch_one(entry, source, folder, progress)
                if pending is not None:
                    fresh.append(pending)
                if source.unzip:
                    _unzip(folder / source.filename, folder)
            if fresh and check is not None:
                check(folder)
        except DownloadError:
            _discard(fresh)
            raise
        except Exception as err:  # the fetched bytes did not parse: untrusted input, any reader's error
            _discard(fresh)
            reason = str(err).splitlines()[0][:300] if str(err) else type(err).__name__
            raise DownloadError(f"dataset {entry.name}: the downloaded {', '.join(p.name for p, _ in fresh)} did not "
                                f"parse ({reason}); nothing was kept: run again to download anew, or check the "
                                f"source ({source_url(entry, entry.sources[0])})") from None
        for path, digest in fresh:
            _write_atomic(_record(path), f"{digest} {path.stat().st_size}\n")
            # pooch's temporary file was private (0600): give the data the mode the record got from the umask
            os.chmod(path, _record(path).stat().st_mode & 0o777)
    return folder
