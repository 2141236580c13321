"""`python -m transformer_mt ...` runs the same CLI as the `tmt` console script."""

import sys

from transformer_mt.cli import main

if __name__ == "__main__":
    sys.exit(main())
