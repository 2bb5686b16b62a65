"""training/dist.py, the one module that imports Horovod: what it sets on import."""

import pytest


@pytest.mark.medium
def test_autograph_leaves_horovods_functions_to_graph_mode_and_converts_ours():
    """TensorFlow's own test of whether a traced step converts a function (what converted_call
    asks): Horovod's graph code no longer, the project's still; the rule is added once."""
    from tensorflow.python.autograph.core import config as autograph_rules
    from tensorflow.python.autograph.impl import conversion

    from deepdensity.model import layers
    from deepdensity.training import dist

    if dist.hvd is None:
        pytest.skip("Horovod is not installed")
    assert conversion.is_allowlisted(dist.hvd_tf.grouped_allreduce)
    assert conversion.is_allowlisted(dist.hvd.DistributedOptimizer)
    assert not conversion.is_allowlisted(layers.covariance_cholesky)
    rules = autograph_rules.CONVERSION_RULES
    dist.leave_horovod_to_graph_mode()
    assert autograph_rules.CONVERSION_RULES == rules
    assert sum(getattr(rule, "_prefix", None) == "horovod" for rule in rules) == 1
