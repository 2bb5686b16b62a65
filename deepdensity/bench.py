"""`python -m deepdensity.bench`, kept for the commands users already run: the same as
`deepdensity bench` (deepdensity/perf/bench.py)."""

import sys

from deepdensity.perf.bench import main

if __name__ == "__main__":
    sys.exit(main())
