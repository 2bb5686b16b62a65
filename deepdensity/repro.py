"""`python -m deepdensity.repro`, kept for the commands users already run: the same as
`deepdensity repro` (deepdensity/study/repro.py)."""

import sys

from deepdensity.study.repro import main

if __name__ == "__main__":
    sys.exit(main())
