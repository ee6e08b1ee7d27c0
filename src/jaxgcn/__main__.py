"""``python -m jaxgcn``: the ``jaxgcn`` console script (:func:`jaxgcn.console.main`)."""

import sys

from jaxgcn.console import main

if __name__ == "__main__":
    sys.exit(main())
