"""The layering contract (import-linter, pyproject's [tool.importlinter]) and ruff, as tests, so the
README's one test command also keeps the modules importing downward and the code lint-clean."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]


def test_modules_import_downward_only():
    proc = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
                           "sys.exit(lint_imports())"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    # the package's layers, the two aliases' limits (train/batched, inference), training/'s and app/'s
    assert "5 kept, 0 broken" in proc.stdout


def test_ruff_is_clean():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "tests", "benchmarks", "scripts", "examples"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


# --- the package's shape (issue 24): small modules and functions, modules that keep to their layer ---

SRC = ROOT / "src" / "jaxgcn"


def _python_modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_no_module_is_longer_than_600_lines():
    long = {str(p.relative_to(SRC)): n for p in _python_modules() if (n := len(p.read_text().splitlines())) > 600}
    assert not long, long


def test_no_function_of_the_training_engine_is_longer_than_60_lines():
    long = {}
    for path in sorted((SRC / "training").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 > 60:
                long[f"{path.name}:{node.name}"] = node.end_lineno - node.lineno + 1
    assert not long, long


CLI_BELOW = ("jaxgcn.native.csr", "jaxgcn.host.memory", "jaxgcn.datasets.named")


def test_no_private_name_is_imported_from_another_module_and_the_cli_asks_the_plan():
    private, cli_low = [], []
    for path in _python_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxgcn"):
                private += [f"{path.relative_to(SRC)}: {node.module}.{a.name}" for a in node.names
                            if a.name.startswith("_") and a.name != "__version__"]
                names = [node.module] + [f"jaxgcn.{a.name}" for a in node.names if node.module == "jaxgcn"]
                if path.parent.name == "cli":
                    cli_low += [f"{path.name}: {name}" for name in names if name in CLI_BELOW]
    assert not private, private
    # the kernel and memory decisions are the plan's (jaxgcn.plan), the catalogue is looked up once by
    # the data request (jaxgcn.app.data): the CLI parses, calls the application layer and prints
    assert not cli_low, cli_low


FACES = ("jaxgcn.train", "jaxgcn.batched", "jaxgcn.inference")  # the compatibility aliases: for users, never the
# package's own path
FACE_FILES = tuple(face.removeprefix("jaxgcn.") + ".py" for face in FACES)


def _modules_named(path: Path, tree: ast.AST) -> list[str]:
    """Every module an import of ``path`` names (relative imports resolved, ``from jaxgcn import train``
    read as ``jaxgcn.train``), and every string that is a module name (``import_module("jaxgcn.train")``)."""
    package = ["jaxgcn", *path.relative_to(SRC).parent.parts]  # what `from . import x` is relative to
    named = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            named += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join([*package[:len(package) - node.level + 1], *filter(None, [node.module])]) \
                if node.level else node.module
            named += [base, *(f"{base}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("jaxgcn."):
            named.append(node.value)
    return named


def faces_imported_inside() -> list[str]:
    """``file: face`` for each module of the package, other than the faces themselves, that names a face."""
    found = []
    for path in _python_modules():
        if path.relative_to(SRC).as_posix() in FACE_FILES:
            continue
        named = _modules_named(path, ast.parse(path.read_text()))
        found += [f"{path.relative_to(SRC).as_posix()}: {face}" for face in FACES
                  if any(m == face or m.startswith(face + ".") for m in named)]
    return found


def test_no_module_of_the_package_imports_the_compatibility_faces():
    # jaxgcn.train and jaxgcn.batched re-export jaxgcn.training, jaxgcn.inference jaxgcn.app.inference, for
    # users; inside, every name has one address (jaxgcn.training.*, jaxgcn.app.*), so the import contract
    # needs no line of its own for the faces
    assert faces_imported_inside() == []


def test_the_face_scan_sees_every_spelling_of_an_import(tmp_path, monkeypatch):
    spellings = {"a.py": "from jaxgcn.train import fit\n", "b.py": "import jaxgcn.batched\n",
                 "c.py": "from jaxgcn import train\n", "d.py": "from . import batched\n",
                 "e.py": "import importlib\nimportlib.import_module('jaxgcn.train')\n",
                 "sub/f.py": "from ..train import TrainConfig\n", "sub/g.py": "from jaxgcn.training import loop\n",
                 "train.py": "from jaxgcn.training.loop import fit\n", "h.py": "from jaxgcn import inference\n",
                 "app/i.py": "from . import inference\nfrom jaxgcn.app.inference import logits\n",
                 "app/j.py": "from .. import inference\n", "inference.py": "from jaxgcn.app.inference import logits\n"}
    for name, text in spellings.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    assert faces_imported_inside() == ["a.py: jaxgcn.train", "app/j.py: jaxgcn.inference", "b.py: jaxgcn.batched",
                                       "c.py: jaxgcn.train", "d.py: jaxgcn.batched", "e.py: jaxgcn.train",
                                       "h.py: jaxgcn.inference", "sub/f.py: jaxgcn.train"]


def test_the_faces_are_aliases_that_define_nothing():
    # an alias that grew its own function or constant would be a second address with its own behaviour
    for name in FACE_FILES:
        tree = ast.parse((SRC / name).read_text())
        assert ast.get_docstring(tree).startswith("An alias, for users' code"), name
        defined = [ast.unparse(node)[:60] for node in tree.body[1:] if not isinstance(node, ast.ImportFrom)]
        assert defined == [], (name, defined)
