"""The one reader of jaxgcn's JSON manifests: a checkpoint's ``checkpoint.json``, a several-run
save's ``runs.json`` and a batch's ``batch-state/state.json``.

:func:`read_manifest` reads a manifest, checks that it is a JSON object of its kind's ``format``
(and whatever shape its owner asks), and refuses anything else with a :class:`ManifestError`, a
one-line ValueError naming the file, what is wrong and the fix; ``why`` holds the short reason
for a caller that words the refusal its own way (``train --resume``'s check at parse time).
:func:`peek_manifest` is the lenient read, for a look that must never fail (the options a save
records, which run folder holds which seed): the JSON object, or None. The module imports nothing
but the standard library, so the CLI can call it before JAX.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, NamedTuple


class Kind(NamedTuple):
    """One kind of manifest, and how a refusal of it reads.

    Attributes:
        format: the value of its ``"format"`` key.
        where: how a refusal names the file (``{path}`` is replaced).
        corrupted: the fix for a file that is not JSON.
        foreign: the fix for JSON that is not this manifest.
        fields: what the manifest must hold, named when one is refused (``"not a <format> manifest
            (<fields>)"``); empty: the refusal names the format found and the one expected.
        exact: a refusal quotes the JSON error itself (line and column), not only its type, and
            says that a file nested past Python's recursion limit was not written by jaxgcn.
    """

    format: str
    where: str
    corrupted: str
    foreign: str
    fields: str = ""
    exact: bool = False


CHECKPOINT = Kind("jaxgcn-checkpoint-1", "checkpoint {path}", corrupted="the file is corrupted",
                  foreign="it was not written by this jaxgcn", exact=True)
RUNS = Kind("jaxgcn-runs-1", "checkpoint {path}", corrupted="the file is corrupted, save the runs again",
            foreign="it was edited or not written by this jaxgcn: save the runs again",
            fields="format, best, and per run its dir, seed, split, val_acc and test_acc")
_TRAIN_AGAIN = "it was edited or not written by this jaxgcn: train again"
BATCH_STATE = Kind("jaxgcn-batch-state-1", "--resume {path}", corrupted=_TRAIN_AGAIN, foreign=_TRAIN_AGAIN,
                   fields="format, extra, data_sha256, and per slice its file, number, bytes, sha256 and epoch")


class ManifestError(ValueError):
    """A manifest that cannot be read or is not its kind's; ``why`` is the short reason ("missing",
    an OS error's text, the JSON error's type, "not a <format> manifest")."""

    def __init__(self, message: str, why: str):
        super().__init__(message)
        self.why = why


def _refuse(path: Path, kind: Kind, what: str, fix: str, why: str) -> ManifestError:
    return ManifestError(f"{kind.where.format(path=path)}: {what}; {fix}", why)


def manifest_text(path: str | Path, kind: Kind) -> str:
    """The text of the manifest at ``path``, refused where it cannot be read or is not UTF-8."""
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except OSError as err:
        said = err.strerror or type(err).__name__
        why = "missing" if isinstance(err, FileNotFoundError) else said
        raise _refuse(path, kind, f"cannot be read ({said})", "check its permissions", why) from None
    except UnicodeDecodeError as err:
        detail = str(err) if kind.exact else type(err).__name__
        raise _refuse(path, kind, f"unreadable JSON ({detail})", kind.corrupted, type(err).__name__) from None


def parse_manifest(text: str, path: str | Path, kind: Kind,
                   check: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """``text`` (the manifest at ``path``) as its JSON object, refused where it is not JSON, not an
    object of ``kind.format``, or (``check``) not of the shape its owner reads."""
    path = Path(path)
    try:
        manifest = json.loads(text)
    except json.JSONDecodeError as err:
        raise _refuse(path, kind, f"unreadable JSON ({err if kind.exact else type(err).__name__})", kind.corrupted,
                      type(err).__name__) from None
    except RecursionError:
        if kind.exact:
            raise _refuse(path, kind, "nested deeper than Python's recursion limit", "it was not written by jaxgcn",
                          "RecursionError") from None
        raise _refuse(path, kind, "unreadable JSON (RecursionError)", kind.corrupted, "RecursionError") from None
    found = manifest.get("format") if isinstance(manifest, dict) else None
    if found != kind.format or (check is not None and not check(manifest)):
        what = f"not a {kind.format} manifest ({kind.fields})" if kind.fields else \
            f"format {found!r}, expected {kind.format!r}"
        raise _refuse(path, kind, what, kind.foreign, f"not a {kind.format} manifest")
    return manifest


def read_manifest(path: str | Path, kind: Kind,
                  check: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """The manifest at ``path``, read and checked (:func:`manifest_text`, then :func:`parse_manifest`).

    >>> parse_manifest('{"format": "jaxgcn-runs-0"}', "save/runs.json", RUNS)
    Traceback (most recent call last):
    ...
    jaxgcn.store.manifest.ManifestError: checkpoint save/runs.json: not a jaxgcn-runs-1 manifest (format, ...); ...
    """
    return parse_manifest(manifest_text(path, kind), path, kind, check)


def peek_manifest(path: str | Path) -> dict[str, Any] | None:
    """The JSON object at ``path``, of any format; None where there is none (missing, unreadable, not
    JSON, not an object): for a look whose absence is no error, the reader that needs the manifest
    then refusing it with :func:`read_manifest`'s message.

    >>> peek_manifest("no/such/checkpoint.json") is None
    True
    """
    try:
        found = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    return found if isinstance(found, dict) else None
