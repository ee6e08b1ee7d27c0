"""``python -m jaxgcn.cli``: the ``jaxgcn`` console script. Python imports :mod:`jaxgcn.cli` (light:
the parser comes later) before this module runs; :func:`jaxgcn.cli.main` installs the Ctrl-C handler
before anything heavy, as :mod:`jaxgcn.console` does for ``jaxgcn`` and ``python -m jaxgcn``."""

import sys

from jaxgcn.cli import main

sys.exit(main())
