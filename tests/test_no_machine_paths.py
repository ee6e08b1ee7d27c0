"""No file of the repository names a path that exists only on one machine.

A home folder, a container's work folder or a developer's venv in a doc or a script works for its
author and nobody else. Generic examples (``/path/to/...``, ``/tmp``, ``~/.cache``, ``PATH``,
``<user>`` placeholders) are fine; relative paths are resolved from ``__file__`` instead.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Written so that this file does not match itself (hence ``hom[e]``).
MACHINE_PATH = re.compile(
    r"(?<![\w.~-])/(?:root|work|Users)/"  # root's home, a container's work folder, macOS homes
    r"|(?<![\w.~-])/hom[e]/[^/\s<>${}*]+/"  # Linux homes, but not the examples /home/<user>/, /home/$USER/
    r"|\b[A-Za-z]:[\\/]+Users[\\/]",  # Windows homes
    re.IGNORECASE,
)


def repository_files() -> list[Path]:
    """Tracked files plus new ones not yet committed (git's view; ignored files excluded)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an sdist or an installed copy)")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout
    return [ROOT / name for name in sorted(set(listed.decode().split("\0"))) if name]


def _text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):  # deleted in the work tree, or a submodule
        return None
    if b"\0" in data:
        return None  # binary (npz, images)
    return data.decode("utf-8", errors="replace")


def machine_paths(files: list[Path]) -> list[str]:
    """``file:line: text`` for every line naming a machine's absolute path."""
    found = []
    for path in files:
        text = _text(path)
        for number, line in enumerate(text.splitlines() if text else [], start=1):
            if MACHINE_PATH.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:160]}")
    return found


def test_no_machine_specific_paths() -> None:
    found = machine_paths(repository_files())
    assert not found, ("paths of one machine (use a path relative to __file__, an argument, or a generic "
                       "example such as /path/to/...):\n" + "\n".join(found))


@pytest.mark.parametrize("line, machine", [
    ("python " + "/" + "root/venv/bin/python x.py", True),
    ("data in " + "/" + "work/shared/datasets", True),
    ("cd " + "/" + "home/alice/jaxgcn", True),
    ("open " + "/" + "Users/bob/jaxgcn", True),
    ("C:" + "\\" + "Users\\carol\\jaxgcn", True),
    ("--pyg-python PATH", False),
    ("/path/to/graph.csv and /tmp/out", False),
    ("/home/<user>/jaxgcn or /home/$USER/jaxgcn", False),
    ("https://github.com/" + "work/repo", False),
    ("~/.cache/jaxgcn and .venv/bin/pip install .", False),
])
def test_pattern(line: str, machine: bool) -> None:
    assert bool(MACHINE_PATH.search(line)) is machine
