"""``python -m jaxgcn``: the ``jaxgcn`` console script."""

import sys

from jaxgcn.cli import main

if __name__ == "__main__":
    sys.exit(main())
