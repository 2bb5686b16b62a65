"""`python -m deepdensity.generate`, kept for the commands users already run: the same as
`deepdensity generate` (deepdensity/tools/generate.py)."""

import sys

from deepdensity.tools.generate import main

if __name__ == "__main__":
    sys.exit(main())
