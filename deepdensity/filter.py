"""`python -m deepdensity.filter`, kept for the commands users already run: the same as
`deepdensity filter` (deepdensity/tools/filter.py)."""

import sys

from deepdensity.tools.filter import main

if __name__ == "__main__":
    sys.exit(main())
