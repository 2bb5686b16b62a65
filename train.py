#!/usr/bin/env python
"""Train the DeepDensity autoencoder: `python train.py --mode weak`, or under Horovod
`horovodrun -np 8 python train.py --mode weak`. The same as `deepdensity train`; the flags
are in deepdensity/training/cli.py (`python train.py --help`)."""
import sys

from deepdensity.training.cli import main

if __name__ == "__main__":
    sys.exit(main())
