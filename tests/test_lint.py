"""The layering contract (import-linter, pyproject's [tool.importlinter]) and ruff, as tests, so the
README's one test command also keeps the modules importing downward and the code lint-clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]


def test_modules_import_downward_only():
    proc = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
                           "sys.exit(lint_imports())"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "2 kept, 0 broken" in proc.stdout  # the package's layers, and training/'s


def test_ruff_is_clean():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "tests", "benchmarks", "scripts", "examples"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
