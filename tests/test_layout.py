"""The package layout (issue 44): the packages the import contract names, and the old flat names."""

from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys
import tomllib

from jaxgcn import moved

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "jaxgcn"


def test_every_moved_module_lives_in_its_package_and_not_at_its_old_address():
    for old, new in moved.NEW_NAME.items():
        package, name = new.split(".")[1:]
        assert (SRC / package / f"{name}.py").is_file(), new
        assert not (SRC / f"{name}.py").exists(), old


def test_an_old_name_imports_the_moved_module_itself_and_says_where_it_went():
    # in a fresh interpreter: the old names must not linger in this one's sys.modules
    script = """if True:
        import importlib, json, warnings
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            import jaxgcn.graph as old
            from jaxgcn import csr
        import jaxgcn.core.graph as new
        print(json.dumps({"same": old is new and csr is importlib.import_module("jaxgcn.native.csr"),
                          "spec": new.__spec__.name, "csr_spec": csr.__spec__.name,
                          "warnings": [f"{w.category.__name__}: {w.message}" for w in seen]}))
    """
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    got = json.loads(out.splitlines()[-1])
    assert got["same"] is True
    assert (got["spec"], got["csr_spec"]) == ("jaxgcn.core.graph", "jaxgcn.native.csr")
    assert got["warnings"] == [
        "DeprecationWarning: jaxgcn.graph moved to jaxgcn.core.graph; import it from there (the old name goes in the "
        "next release)",
        "DeprecationWarning: jaxgcn.csr moved to jaxgcn.native.csr; import it from there (the old name goes in the "
        "next release)"]


def _imported(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            if node.module == "jaxgcn":
                names.update(f"jaxgcn.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_nothing_here_imports_a_module_by_its_old_name():
    offenders = {}
    for folder in ("src", "tests", "benchmarks", "scripts"):
        for path in (ROOT / folder).rglob("*.py"):
            old = {name for name in _imported(path)
                   if any(name == o or name.startswith(o + ".") for o in moved.NEW_NAME)}
            if old:
                offenders[path.relative_to(ROOT).as_posix()] = sorted(old)
    assert offenders == {}


def test_the_layer_contract_places_every_top_level_module_in_at_most_twelve_lines():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = next(c for c in config["tool"]["importlinter"]["contracts"]
                    if c["name"] == "jaxgcn layers import downward only")
    assert len(contract["layers"]) <= 12
    listed = {name.strip().removeprefix("jaxgcn.") for line in contract["layers"] for name in line.split("|")}
    top = {p.stem for p in SRC.glob("*.py")} | {p.parent.name for p in SRC.glob("*/__init__.py")}
    assert listed == top - {"__init__", "__main__"}
