"""`python -m deepdensity.plot RUN ... --out curves.png`: the same as `deepdensity plot`
(deepdensity/tools/plot.py)."""

import sys

from deepdensity.tools.plot import main

if __name__ == "__main__":
    sys.exit(main())
