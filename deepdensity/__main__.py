"""`python -m deepdensity <command> [args]`: see deepdensity/cli.py."""

import sys

from deepdensity.cli import main

sys.exit(main())
