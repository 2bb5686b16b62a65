#!/usr/bin/env python
"""Train the DeepDensity autoencoder: `python train.py --mode weak`, or under Horovod
`horovodrun -np 8 python train.py --mode weak`. The same as `deepdensity train`; the flags
are in deepdensity/training/cli.py (`python train.py --help`)."""

import sys

from deepdensity.training import interrupts

if __name__ == "__main__":
    # first, before the imports that take seconds: a Ctrl-C or SIGTERM from here on ends the run
    # in one line, at once while it imports (training/interrupts.py); then TensorFlow's C++ log
    # kept off the screen
    interrupts.hold_early(sys.argv[1:])
    from deepdensity.training import console

    console.start()
    from deepdensity.training.cli import main

    sys.exit(main())
