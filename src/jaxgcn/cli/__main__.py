"""``python -m jaxgcn.cli``: the ``jaxgcn`` console script."""

import sys

from jaxgcn.cli import main

sys.exit(main())
