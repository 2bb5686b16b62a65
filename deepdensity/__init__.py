"""deepdensity: Cunha et al. (HPML 2018), strong vs weak scaling of a 3D Gaussian-mixture
autoencoder, in tf.keras + Horovod. The layout: docs/layout.md."""

import os

# TensorFlow 2.15's x86 wheels turn oneDNN on by default only on CPUs with AVX-512-class
# features; elsewhere (an AVX2-only AMD EPYC, measured) Conv3D's backward pass falls back to
# a kernel that took 6.0 s instead of 8.3 ms for this model's first layer at batch 32, which
# made a training step 400 x slower. Set before TensorFlow is imported; ignored on GPUs'
# kernels; a user's own TF_ENABLE_ONEDNN_OPTS=0 still wins.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

# Keras 2, the API the paper's model is written in and the one Horovod's Keras callbacks work
# on: from TensorFlow 2.16, `tf.keras` is Keras 3 unless TF_USE_LEGACY_KERAS=1 is set before
# tf.keras is first used, and then it is the tf_keras package. Set wherever tf_keras is
# installed, and set, not defaulted: the project does not run on Keras 3 (utils/stack.py
# says so where tf.keras was used before this). Not set without tf_keras: TensorFlow 2.15, the
# paper-era stack, would then look for it, and its own tf.keras is Keras 2 already. Inherited
# by every process the project starts: horovodrun's ranks, the study's runs and probes, Slurm
# jobs. (find_spec finds a top-level package without importing it.)
from importlib.util import find_spec  # noqa: E402

if find_spec("tf_keras") is not None:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"

# TensorFlow's start-up lines (CPU feature notices, oneDNN banners) are not the run's output,
# nor is XLA's error-level "SetPriority unimplemented for this stream", harmless on CPUs and
# printed by every rank (level 2 let it through; 3 keeps C++ log lines off the console).
# Set once here, for every command and module, before any of them imports TensorFlow; errors
# still reach the user as Python exceptions. TF_CPP_MIN_LOG_LEVEL=0 shows everything again.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

# Horovod: a rank mpirun started (Horovod's MPI controller) yields its core while it waits for
# the others, and writes its lines whole, each with its rank's tag (launch/controllers.py).
from deepdensity.launch.controllers import under_mpirun  # noqa: E402

under_mpirun(os.environ)
