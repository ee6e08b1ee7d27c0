"""The API reference (docs/api.md) builds from the docstrings with pdoc, warnings as errors.

A docstring pdoc cannot render, an annotation it cannot resolve, or a public name of
``jaxgcn.__all__`` without a docstring fails here, so it fails CI before it reaches the docs.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import warnings
from pathlib import Path

import pdoc  # the [test] extra
import pdoc.doc
import pdoc.extract
import pdoc.render
import pytest

import jaxgcn

# pdoc bug mitmproxy/pdoc#765 (open, pdoc 15-16): the __init__ that typing.NamedTuple generates
# has no module globals, so pdoc cannot resolve its postponed (``from __future__ import
# annotations``) field annotations and warns for every NamedTuple. Only that case is forgiven:
# the class must really be a NamedTuple, so the same warning for any other class still fails.
NAMEDTUPLE_INIT = re.compile(r"Error parsing type annotation .+ for (?P<cls>jaxgcn(?:\.\w+)+)\.__init__\. ")

# Names whose own docstring pdoc cannot show: __version__ is re-exported from jaxgcn.version, which
# documents it, and pdoc does not follow a re-exported variable to its docstring.
NO_DOCSTRING = {"__version__"}

MAIN_MODULES = ("jaxgcn", "jaxgcn.core.graph", "jaxgcn.core.layers", "jaxgcn.core.models", "jaxgcn.core.propagate",
                "jaxgcn.train",
                "jaxgcn.batched", "jaxgcn.sweep", "jaxgcn.native.csr", "jaxgcn.datasets", "jaxgcn.store.checkpoint",
                "jaxgcn.distributed", "jaxgcn.cli")


def documented_modules() -> list[str]:
    """Every module of the package. ``pdoc jaxgcn`` alone would stop at ``jaxgcn`` because pdoc
    only walks the submodules a package lists in ``__all__``. ``__main__`` modules are left out:
    importing ``jaxgcn.cli.__main__`` runs the CLI (``sys.exit(main())``). Importing the others has
    no side effect (no XLA_FLAGS, no device set-up): the CLI configures JAX inside ``main``."""
    subs = pkgutil.walk_packages(jaxgcn.__path__, "jaxgcn.")
    return ["jaxgcn", *sorted(m.name for m in subs if m.name.rpartition(".")[2] != "__main__")]


def _resolve(dotted: str) -> object:
    """The object a pdoc qualified name (``module.Class``) points to."""
    module, _, attr = dotted.rpartition(".")
    while module:
        try:
            return getattr(importlib.import_module(module), attr)
        except ModuleNotFoundError:
            module, _, outer = module.rpartition(".")
            attr = f"{outer}.{attr}"  # pragma: no cover - nested classes
    raise LookupError(dotted)


def _is_namedtuple_bug(message: str) -> bool:
    match = NAMEDTUPLE_INIT.search(message)
    if match is None:
        return False
    cls = _resolve(match["cls"])
    return isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields")


def _specs(modules: list[str]) -> list[str]:
    """The fewest pdoc module specs that cover ``modules``: pdoc walks a package's ``__all__``
    submodules itself (``jaxgcn.datasets`` lists ``synthetic``) and warns when a spec repeats one."""
    specs: list[str] = []
    covered: set[str] = set()
    for name in modules:
        if name not in covered:
            specs.append(name)
            covered.update(pdoc.extract.walk_specs([name]))
    return specs


def build(out: Path) -> list[str]:
    """Write the API reference into ``out``; return pdoc's warnings (minus the NamedTuple bug)."""
    import jaxgcn.datasets

    for face in (jaxgcn, jaxgcn.datasets):  # their names are imported on first use (PEP 562); pdoc reads the
        for name in face.__all__:          # module's dict, so look each up first
            getattr(face, name)
    pdoc.render.configure(docformat="google")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc(*_specs(documented_modules()), output_directory=out)
    return sorted({str(w.message) for w in caught if not _is_namedtuple_bug(str(w.message))})


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("api")
    errors = build(out)
    assert not errors, "pdoc warnings (fix the docstring or annotation):\n" + "\n".join(errors)
    return out


def test_main_modules_render(site: Path) -> None:
    assert (site / "index.html").is_file()
    for name in MAIN_MODULES:
        page = site / (name.replace(".", "/") + ".html")
        assert page.is_file(), f"no API page for {name}"
        assert "<html" in page.read_text(encoding="utf-8"), page


def test_public_names_documented(site: Path) -> None:
    page = (site / "jaxgcn.html").read_text(encoding="utf-8")
    module = pdoc.doc.Module(jaxgcn)
    missing, bare = [], []
    for name in jaxgcn.__all__:
        member = module.members.get(name)
        if member is None or f'id="{name}"' not in page:
            missing.append(name)
        elif not member.docstring.strip() and name not in NO_DOCSTRING:
            bare.append(name)
    assert not missing, f"in jaxgcn.__all__ but not in the API reference: {missing}"
    assert not bare, f"public names without a docstring: {bare}"


def test_module_list_skips_only_main() -> None:
    mods = documented_modules()
    assert "jaxgcn.cli.__main__" not in mods
    assert set(MAIN_MODULES) <= set(mods)


if __name__ == "__main__":  # python tests/test_api_docs.py [OUT]: build the site docs/api.md describes
    import sys

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "site/api")
    problems = build(target)
    print("\n".join(problems) or f"API reference written to {target / 'index.html'}")
    sys.exit(1 if problems else 0)
