"""`python -m deepdensity.data synth|prepare|synth-scans ...`: the data tools (see data/cli.py)."""

import sys

from deepdensity.data.cli import main

sys.exit(main())
