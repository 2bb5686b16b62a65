"""Which modules autograph converts when a step is traced.

Autograph rewrites a traced function's Python control flow into TensorFlow's, and every
function it calls, module by module: TensorFlow's and Keras's never, anyone else's at every
trace. Graph code that branches on Python values only gains nothing from it and costs each
process its conversion at the first step: in a smoke run's first step (AVX2 machine, beside the
tests; autograph's converter wrapped and timed), 4.5 s of CPU, 3.1 s of it Horovod's functions
(TensorFlow 1's graph code) and 1.3 s the DeepDensity layer's (layers.py, kernels/).
TensorFlow reads its rules at each call (autograph/impl/conversion.py). Where a TensorFlow
keeps them elsewhere, nothing changes. A module left here that did branch on a tensor would
fail at its trace (a tensor used as a Python bool), not compute something else.
"""

from __future__ import annotations


def leave_to_graph_mode(module_prefix: str) -> None:
    """Autograph converts no function of the modules named `module_prefix...`; once."""
    try:
        from tensorflow.python.autograph.core import config as rules_module
    except ImportError:  # pragma: no cover - a TensorFlow that moved them
        return
    rules = getattr(rules_module, "CONVERSION_RULES", None)
    if rules is not None and not any(getattr(rule, "_prefix", None) == module_prefix for rule in rules):
        rules_module.CONVERSION_RULES = (rules_module.DoNotConvert(module_prefix), *rules)
