"""`python -m deepdensity.encode`, kept for the commands users already run: the same as
`deepdensity encode` (deepdensity/tools/encode.py)."""

import sys

from deepdensity.tools.encode import main

if __name__ == "__main__":
    sys.exit(main())
