"""`python -m deepdensity.data synth|prepare|synth-scans ...`: the data tools (see cubes.main)."""
import sys

from deepdensity.data.cubes import main

sys.exit(main())
