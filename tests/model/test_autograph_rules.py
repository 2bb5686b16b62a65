"""model/autograph_rules.py: which modules a traced step converts, as TensorFlow itself decides
(conversion.is_allowlisted, what autograph's converted_call asks of each function)."""

import pytest


@pytest.mark.medium
def test_horovods_functions_and_the_layers_are_left_to_graph_mode_and_the_rest_converted():
    from tensorflow.python.autograph.core import config as rules_module
    from tensorflow.python.autograph.impl import conversion

    from deepdensity.model import autoencoder, kernels, layers
    from deepdensity.model.autograph_rules import leave_to_graph_mode
    from deepdensity.training import dist

    assert conversion.is_allowlisted(layers.covariance_cholesky)
    assert conversion.is_allowlisted(layers.DeepDensity.call)
    assert conversion.is_allowlisted(kernels.render_on_grid)
    assert not conversion.is_allowlisted(autoencoder.build_model), "the rest of the model is converted"
    if dist.hvd is not None:
        assert conversion.is_allowlisted(dist.hvd_tf.grouped_allreduce)
        assert conversion.is_allowlisted(dist.hvd.DistributedOptimizer)
    rules = rules_module.CONVERSION_RULES
    leave_to_graph_mode("horovod")
    assert rules_module.CONVERSION_RULES == rules, "a rule is added once"
    assert sum(getattr(rule, "_prefix", None) == "deepdensity.model.layers" for rule in rules) == 1
