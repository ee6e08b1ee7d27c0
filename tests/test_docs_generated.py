"""docs/testing.md is generated from the tests (the mutation table, the bad-input cases): it must
be what scripts/testing_doc.py writes today, so the docs cannot claim what the tests no longer do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_testing_doc_is_generated_from_the_tests():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "testing_doc.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_mutation_table_rows_apply_to_the_code_as_it_is():
    """Every row's text occurs exactly once in its file (.ci/mutants.py --list checks it, without
    running any mutant), so a refactor that moves the guarded code breaks this test at once."""
    proc = subprocess.run([sys.executable, str(ROOT / ".ci" / "mutants.py"), "--list"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n    tests: ") >= 25
