"""The modules' old addresses, for one release: ``import jaxgcn.graph`` is ``jaxgcn.core.graph``.

The flat modules moved into packages (``core``, ``native``, ``store``, ``host``, ``io``). Code
written against the old names keeps working: the old name imports THE SAME module object (so a
``monkeypatch`` of either name patches both) and warns once, naming the new address. Nothing in
the package imports an old name (tests/test_layout.py holds that).

This runs at ``import jaxgcn``, before the console's Ctrl-C handler, so it imports nothing itself.
"""

from __future__ import annotations

PACKAGES = {
    "core": ("graph", "data", "propagate", "models", "layers", "ops", "hyper", "validate", "diagnostics", "native_ops"),
    "native": ("csr", "fused", "kernel_build"),
    "store": ("checkpoint", "checkpoint_runs", "batch_state", "manifest"),
    "host": ("memory", "machine", "caches", "compiler", "interrupt"),
    "io": ("outputs", "reports", "plots", "progress", "metrics"),
}
NEW_NAME = {f"jaxgcn.{module}": f"jaxgcn.{package}.{module}" for package, modules in PACKAGES.items()
            for module in modules}


class OldNames:
    """A meta-path finder and loader that answers an old module name with the moved module."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):  # noqa: ANN001, ANN206 - the finder protocol
        if name not in NEW_NAME:
            return None
        import importlib.util

        return importlib.util.spec_from_loader(name, cls)

    @staticmethod
    def create_module(spec):  # noqa: ANN001, ANN205
        import importlib
        import warnings

        new = NEW_NAME[spec.name]
        warnings.warn(f"{spec.name} moved to {new}; import it from there (the old name goes in the next release)",
                      DeprecationWarning, stacklevel=2)
        module = importlib.import_module(new)
        spec.loader_state = module.__spec__  # the import system sets __spec__ to the old name's: put it back
        return module

    @staticmethod
    def exec_module(module):  # noqa: ANN001, ANN205
        module.__spec__ = module.__spec__.loader_state


def install(meta_path: list) -> None:
    """Put the finder on ``sys.meta_path`` (once)."""
    if OldNames not in meta_path:
        meta_path.append(OldNames)
