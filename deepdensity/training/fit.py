"""One call of the fit loop with the run's callbacks, from a first epoch to the end of the
run (or, in elastic training, to the next change of workers).

`Training` is what every call needs, made once by the trainer and passed whole; what belongs
to one call alone comes beside it: the epoch it starts from and the checkpoint state it resumes."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Optional

import tensorflow as tf

from deepdensity.config import Config
from deepdensity.scaling import rules
from deepdensity.training import callbacks, interrupts, progress, watch
from deepdensity.training.feeds import Feeds
from deepdensity.training.kit import PolicyKit
from deepdensity.training.launch import Launch


@dataclass(frozen=True)
class Training:
    """One run's training. Elastic training fits again after every change of workers with the
    new N's launch and steps, and its commit callback (dataclasses.replace)."""

    cfg: Config
    run: Launch  # this process's part at the N that trains now
    model: tf.keras.Model  # the policy's training model, compiled (trainer._compiled_model)
    record: callbacks.RunRecord  # what the callbacks share, one for the whole run
    data: tuple  # (training cubes, validation cubes)
    ckpt: tf.train.Checkpoint
    steps: int  # steps per epoch at this N
    kit: PolicyKit  # what the policy's hooks build, one for the whole run
    verbose: bool
    commit: Optional[tf.keras.callbacks.Callback] = None  # elastic: callbacks.CommitEachEpoch


def fit(t: Training, initial_epoch: int, state: Optional[dict]) -> Optional[dict]:
    """Train from `initial_epoch` to the end; returns the last checkpoint's state (rank 0).
    `state`: the checkpoint state this fit resumes (state.json), None for a new run. Elastic
    training's `commit` callback comes after every callback that writes the folder, and its
    runs validate in a callback (callbacks.Validate)."""
    train_x, val_x = t.data
    feeds = Feeds(t.cfg, t.run, train_x, val_x, initial_epoch, t.model.grad_slices)
    cbs, shown, checkpoint = run_callbacks(t, feeds, state)
    try:
        feeds.fit(t.model, cbs, t.steps, t.record, validation=t.commit is None)
    except BaseException:
        # an interrupt or an error, which Keras tells no callback: the bar off the screen, no
        # section left held
        for cb in cbs:
            if isinstance(cb, (progress.EpochBar, TakeSignals)):
                cb.close()
        raise
    finally:
        # TensorBoard's event file closed however the fit ended (the process may end without
        # teardown); open until then, across adaptive's one Keras fit per epoch
        for cb in cbs:
            if isinstance(cb, watch.EpochSummaries):
                cb.close()
    shown.finish()
    return checkpoint.state if checkpoint else None


def run_callbacks(t: Training, feeds: Feeds, state: Optional[dict]) -> tuple:
    """(the callbacks in their order, the Progress callback, the Checkpoint callback or None)."""
    run, p, record = t.run, t.run.p, t.record
    validate = [callbacks.Validate(feeds.val)] if t.commit is not None else []
    # Horovod: only rank 0 holds a resumed run's history, so every worker stops when it says so
    # (Stopping takes rank 0's reason).
    cbs = [TakeSignals()] + validate
    cbs += run.backend.callbacks(broadcast_after_first_step=p.policy.broadcast_after_first_step)
    cbs += [callbacks.PolicyLR(p, t.steps)] + _pass_validation(t, feeds)
    cbs += p.policy.callbacks(t.kit, p, t.steps, feeds)
    cbs += [callbacks.EpochRow(record), callbacks.Stopping(record, run.ranks.from_chief)]
    checkpoint = None
    if run.writes:
        # Horovod: rank 0 alone writes the run folder and the TensorBoard logs (after EpochRow
        # puts the lr in the logs)
        checkpoint = callbacks.Checkpoint(record, run.out, t.ckpt, state)
        cbs += [callbacks.MetricsLog(record, run.out), checkpoint]
        cbs += watch.tensorboard_callbacks(run.out, t.data[1], t.cfg.tensorboard_images_every)
    shown = progress.Progress(record, run.say, run.tell, lines=t.verbose and run.is_chief)
    bar = [progress.EpochBar(f"{p.mode} N={p.workers}")] if t.verbose and run.is_chief and sys.stderr.isatty() else []
    cbs += ([t.commit] if t.commit is not None else []) + bar + [shown]
    return callbacks.check_order(cbs), shown, checkpoint


def _pass_validation(t: Training, feeds: Feeds) -> list:
    """Validation at every pass inside an epoch (validate_every_pass); not for a policy whose
    batch grows during the run, where a pass does not fall at a fixed step."""
    run = t.run
    if not t.cfg.validate_every_pass or run.p.policy.grows_batch:
        return []
    return [
        callbacks.PassValidation(
            t.record, feeds.val, rules.pass_length(feeds.n_train, run.p.base_batch), run.backend.average
        )
    ]


class TakeSignals(tf.keras.callbacks.Callback):
    """First in the list: where fit takes a Ctrl-C or SIGTERM (interrupts.py). Before and after
    every step and validation batch; at once during the first step and the first validation
    batch of a fit, which trace and compile for seconds (more than horovodrun's 5 s between its
    SIGTERM and SIGKILL), where an exception is as at home as a user's bug; never from the start
    of an epoch's end (Horovod's averaging, the stop the ranks decide together, the row and the
    checkpoint) to the start of the next epoch, so that every rank stops between the same two
    epochs and a run folder is never left between its row and its checkpoint."""

    def __init__(self):
        super().__init__()
        self.holding, self.opened, self.traced = False, False, set()

    def on_train_batch_begin(self, batch, logs=None):
        self._begin("train")

    def on_test_batch_begin(self, batch, logs=None):
        self._begin("test")

    def on_train_batch_end(self, batch, logs=None):
        self._end()

    def on_test_batch_end(self, batch, logs=None):
        self._end()

    def on_epoch_end(self, epoch, logs=None):
        if not self.holding:
            self.holding = True
            interrupts.hold()

    def on_epoch_begin(self, epoch, logs=None):
        self._release()

    def on_train_end(self, logs=None):
        self._release()

    def _begin(self, kind: str) -> None:
        interrupts.take_pending()
        if kind not in self.traced:
            self.traced.add(kind)
            self.opened = True
            interrupts.open_window()

    def _end(self) -> None:
        if self.opened:
            self.opened = False
            interrupts.close_window()
        interrupts.take_pending()

    def _release(self) -> None:
        if self.holding:
            self.holding = False
            interrupts.release()  # raises Interrupted for a signal held

    def close(self) -> None:
        """Fit ended in an exception: no window left open, no section left held."""
        if self.opened:
            self.opened = False
            interrupts.close_window()
        if self.holding:
            self.holding = False
            interrupts.unhold()
