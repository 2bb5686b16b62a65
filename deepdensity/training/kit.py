"""What a policy's training hooks build from (scaling/policies.py decides, this builds): the
TensorFlow parts live here so that the policies themselves import no framework.

One kit per run, made by the trainer before the model: it holds what stays the same while the
run trains, the settings and the backend whose allreduce the hand-averaging steps call. What
belongs to one call of fit (in elastic training, one per N) is an argument of the hook that
needs it: the fit's feeds, to `callbacks`, whose adaptive callback grows the feed's batch."""

from __future__ import annotations

from deepdensity.config import Config
from deepdensity.model.autoencoder import for_training
from deepdensity.model.steps import LocalStep, NoiseStep
from deepdensity.scaling import rules
from deepdensity.training import adaptive, callbacks


class PolicyKit:
    """The parts a policy may ask for, for one run."""

    def __init__(self, cfg: Config, backend):
        self.cfg, self.backend = cfg, backend

    def synchronous_step(self, model, p):
        """The paper's step: one update of the averaged gradient, in slices of at most
        max_pass_batch samples (Horovod's DistributedOptimizer averages across processes)."""
        return for_training(model, rules.grad_slices(p.per_process_batch, self.cfg.max_pass_batch))

    def noise_step(self, model, p):
        """A synchronous step that also measures the gradient's noise (adaptive)."""
        return self._by_hand(NoiseStep, model, p)

    def local_step(self, model, p):
        """One step per worker on its own weights (local SGD)."""
        return self._by_hand(LocalStep, model, p)

    def _by_hand(self, step_class, model, p):
        # parts: the workers this process holds; Horovod: `average` is the allreduce these
        # steps call by hand
        return step_class(
            model.inputs,
            model.outputs,
            name=model.name,
            parts=p.workers // p.processes,
            workers=p.workers,
            average=self.backend.average,
        )

    def adaptive_batch(self, feeds):
        """De et al.'s big-batch test at the end of every epoch, growing the batch of this fit's
        feed (feeds.Feeds; it prints on the fit's launch's rank 0)."""
        return adaptive.AdaptiveBatch(feeds.adaptive, self.cfg, feeds.run.say)

    def local_sync(self, steps: int):
        """Average the workers' weights every local_steps steps."""
        return callbacks.LocalSync(steps, self.cfg.local_steps)
