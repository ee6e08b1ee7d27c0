"""Where jaxgcn keeps what it computes or fetches once, under one root folder:

- ``kernels/``: the fused CSR kernel, compiled for this CPU (:mod:`jaxgcn.native.kernel_build`);
- ``xla/``: JAX's persistent compilation cache of the command line (``--no-compile-cache`` turns it off);
- ``datasets/``: downloaded datasets and parsed files (``--data-root`` or ``$JAXGCN_DATA`` move only these).

The root is ``$JAXGCN_CACHE_DIR``, else the per-user cache folder (``platformdirs``:
``$XDG_CACHE_HOME/jaxgcn`` or ``~/.cache/jaxgcn`` on Linux, ``~/Library/Caches/jaxgcn`` on macOS).
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "JAXGCN_CACHE_DIR"


def root() -> Path:
    """jaxgcn's cache folder: ``$JAXGCN_CACHE_DIR`` (``~`` expanded), else the per-user cache folder."""
    env = os.environ.get(ENV)
    if env:
        return Path(env).expanduser()
    import platformdirs  # only here: most commands never ask

    return Path(platformdirs.user_cache_dir("jaxgcn"))
