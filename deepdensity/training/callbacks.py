"""The training run's Keras callbacks, one concern each (as Horovod's own are split).

Order in a run (fit.run_callbacks): Horovod's broadcast and metric averaging, `PolicyLR`,
a policy's own (adaptive.py's `AdaptiveBatch`, `LocalSync`), then the run's record: `EpochRow` (the
epoch's row), `Stopping` (the paper's stopping rules), and on rank 0 alone `MetricsLog`,
`Checkpoint` and `EpochSummaries` (TensorBoard, watch.py); `Progress` last (progress.py).
They share one `RunRecord`, and run after Horovod's MetricAverageCallback, so the losses they
read are the same on every worker and every worker takes the same decision to stop. What each
reads from another's work is the table `MUST_FOLLOW`, and `check_order` refuses a list that
breaks it.
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Optional

import tensorflow as tf

from deepdensity.scaling import rules
from deepdensity.scaling.policy import ScalingPlan
from deepdensity.scaling.rules import RunStatus
from deepdensity.utils.files import write_atomic

# Keys of metrics.jsonl that mode callbacks add to an epoch's row (through Keras's logs).
ROW_EXTRAS = ("global_batch", "steps", "allreduces", "grad_noise", "grad_sq", "next_global_batch")

# {callback class name: the callbacks that, when in the same list, must come before it}, each
# because it reads in its on_epoch_end what they write in theirs.
MUST_FOLLOW = {
    "MetricAverageCallback": ("Validate",),  # averages the val_loss Validate puts in logs
    "EpochRow": (
        "MetricAverageCallback",
        "Validate",  # the losses, averaged over workers
        "AdaptiveBatch",
        "LocalSync",
    ),  # a policy's batch facts, put in logs
    "Stopping": ("EpochRow",),  # the epoch's losses
    "MetricsLog": ("EpochRow", "Stopping"),  # the row, final for the epoch
    "Checkpoint": ("MetricsLog",),  # state.json never ahead of metrics.jsonl
    "EpochSummaries": ("EpochRow",),  # the lr EpochRow puts in logs (TensorBoard)
    "CommitEachEpoch": ("Stopping", "MetricsLog", "Checkpoint"),  # the epoch, written, then committed
    "Progress": ("EpochRow", "Stopping", "Checkpoint", "CommitEachEpoch"),  # how the epoch ended
}
# Callbacks that read the run record and so need EpochRow in the list at all.
NEEDS_EPOCH_ROW = ("Stopping", "MetricsLog", "Checkpoint", "CommitEachEpoch", "Progress")


def check_order(cbs: list) -> list:
    """`cbs` unchanged, or ValueError naming the first callback placed before one it reads from."""
    names = [type(cb).__name__ for cb in cbs]
    for i, name in enumerate(names):
        late = [m for m in MUST_FOLLOW.get(name, ()) if m in names[i + 1 :]]
        if late:
            raise ValueError(
                f"callback {name} at {i} must come after {', '.join(late)}: it reads what they "
                f"write at the end of an epoch (callbacks.MUST_FOLLOW); order: {', '.join(names)}"
            )
        if name in NEEDS_EPOCH_ROW and "EpochRow" not in names[:i]:
            raise ValueError(
                f"callback {name} reads the epoch's row: put EpochRow before it; order: {', '.join(names)}"
            )
    return cbs


def _finite(x) -> Optional[float]:
    return float(x) if x is not None and math.isfinite(float(x)) else None


class RunRecord:
    """What the run's callbacks share: the run's clock (time to target starts at the first
    fit and stops after each epoch's validation), the validation history, the last epoch's
    row, and how the run ended."""

    def __init__(self, p: ScalingPlan, cfg, steps: int, elapsed_before: float = 0.0, val_history=()):
        self.p, self.cfg, self.steps = p, cfg, steps
        self.elapsed_before, self.t0 = elapsed_before, None
        self.val_history = list(val_history)
        self.status, self.time_to_target_s = None, None
        self.row, self.losses = {}, (math.nan, math.nan)
        self.elastic = False  # elastic rows also say how many workers trained them
        self.pass_losses = []  # [passes, val_loss] validated inside this epoch
        self.epoch_seconds = None  # the last epoch's own seconds, from its start (the epoch line's)

    def snapshot(self) -> dict:
        """What an elastic commit keeps of the record (the clock keeps running: time lost to a
        failure is wall time the run took)."""
        return {
            "val_history": list(self.val_history),
            "status": self.status,
            "time_to_target_s": self.time_to_target_s,
            "row": dict(self.row),
            "losses": self.losses,
        }

    def restore(self, snapshot: dict, p: ScalingPlan, steps: int) -> None:
        """Back to a committed snapshot, under the plan of the workers there are now."""
        self.p, self.steps = p, steps
        self.val_history, self.status = list(snapshot["val_history"]), snapshot["status"]
        self.time_to_target_s, self.row = snapshot["time_to_target_s"], dict(snapshot["row"])
        self.losses = tuple(snapshot["losses"])

    def start_clock(self) -> None:
        if self.t0 is None:  # adaptive calls fit once per epoch: one run, one clock
            self.t0 = time.perf_counter()

    def elapsed(self, now: Optional[float] = None) -> float:
        return self.elapsed_before + (time.perf_counter() if now is None else now) - self.t0

    def final_line(self) -> str:
        """The run's last line, whatever ended it."""
        if self.status == RunStatus.REACHED:
            what = f"reached target {self.cfg.target_loss:g} in {self.time_to_target_s:.1f} s"
        elif self.status == RunStatus.DIVERGED:
            what = "stopped: non-finite loss"
        elif self.status == RunStatus.COLLAPSED:
            what = (
                f"stopped: val_loss at the collapse level {self.cfg.collapse_loss:g} for "
                f"{self.cfg.collapse_patience} epochs (collapsed)"
            )
        elif self.status == RunStatus.STALLED:
            near = self.cfg.stall_near and min(self.val_history, default=math.inf) <= self.cfg.target_loss * (
                1 + self.cfg.stall_near
            )
            what = (
                f"stopped: no new best val_loss in "
                f"{self.cfg.stall_near_patience if near else self.cfg.stall_patience} epochs (stalled)"
            )
        else:
            what = f"stopped at the epoch cap ({self.cfg.max_epochs})"
        epochs = self.row.get("epoch")
        return f"{what} after {epochs} epoch{'' if epochs == 1 else 's'}"

    def result(self) -> dict:
        """result.json's content."""
        return {
            "status": self.status or RunStatus.CAPPED,
            "mode": self.p.mode,
            "workers": self.p.workers,
            "epochs": self.row.get("epoch"),
            "time_to_target_s": self.time_to_target_s,
            "final_val_loss": self.row.get("val_loss"),
            "final_loss": self.row.get("loss"),
            "seconds": self.row.get("seconds"),
            "target_loss": self.cfg.target_loss,
        }


class EpochRow(tf.keras.callbacks.Callback):
    """The epoch's row of metrics.jsonl: losses, the lr the optimizer held for the epoch's
    last batch (read back, not recomputed), the run's clock, the seconds from the epoch's start
    to its last step's end (`steps_seconds`: the rest of the epoch is its validation and the
    callbacks' epoch-end work), and the epoch's batch facts. Also the epoch's own seconds, from
    its start to this mark (validation included), for the epoch line (`RunRecord.epoch_seconds`)."""

    def __init__(self, record: RunRecord):
        super().__init__()
        self.record = record
        self.epoch_start, self.last_step_end = None, None

    def on_train_begin(self, logs=None):
        self.record.start_clock()  # start mark of time to target

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch_start, self.last_step_end = time.perf_counter(), None

    def on_train_batch_end(self, batch, logs=None):
        self.last_step_end = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        logs = {} if logs is None else logs  # the same dict the later callbacks get
        r = self.record
        now = time.perf_counter()
        seconds = r.elapsed(now)  # stop mark: after this epoch's validation
        r.epoch_seconds = now - self.epoch_start if self.epoch_start is not None else None
        loss, val_loss = float(logs.get("loss", math.nan)), float(logs.get("val_loss", math.nan))
        lr = float(tf.keras.backend.get_value(self.model.optimizer.lr))
        logs["lr"] = lr  # for TensorBoard (watch.py), which runs after this callback
        r.losses = (loss, val_loss)
        steps_seconds = (
            self.last_step_end - self.epoch_start
            if self.epoch_start is not None and self.last_step_end is not None
            else None
        )
        r.row = {
            "epoch": epoch + 1,
            "loss": _finite(loss),
            "val_loss": _finite(val_loss),
            "lr": lr,
            "seconds": seconds,
            "steps_seconds": steps_seconds,
            **self._batch_facts(logs),
        }
        if r.pass_losses:
            r.row["pass_val_losses"], r.pass_losses = r.pass_losses, []

    def _batch_facts(self, logs: dict) -> dict:
        """Global batch, steps and allreduces of the epoch (a mode's callback may have put
        its own in `logs`: adaptive's batch changes, local's allreduces are every H steps)."""
        p, steps = self.record.p, self.record.steps
        facts = {"global_batch": p.global_batch, "steps": steps, "allreduces": steps if p.workers > 1 else 0}
        if self.record.elastic:
            facts["workers"] = p.workers
        facts.update({k: logs[k] if isinstance(logs[k], int) else float(logs[k]) for k in ROW_EXTRAS if k in logs})
        return facts


class CommitEachEpoch(tf.keras.callbacks.Callback):
    """Elastic training: after every epoch (and after the callbacks that write the run
    folder) commit the weights, the optimizer and the record to memory, so that a change of
    workers goes back to the end of the last whole epoch. Counts the steps taken since, which
    a failure throws away."""

    def __init__(self, state, record: RunRecord, workers: int):
        super().__init__()
        self.state, self.record, self.workers = state, record, workers
        self.steps_since_commit = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.steps_since_commit = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps_since_commit += 1

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch, self.state.workers = epoch + 1, self.workers
        self.state.record = self.record.snapshot()
        self.steps_since_commit = 0
        # Horovod: raises HostsUpdatedInterrupt here when workers are about to join or leave
        self.state.commit()


class Validate(tf.keras.callbacks.Callback):
    """The validation loss of every epoch, put in the logs as Keras' fit puts it with
    validation_data. For elastic training: a fit that a change of workers ends keeps Keras'
    validation data, and the next fit would validate on the old shard; evaluating here makes
    a new one each epoch. First in the list, before Horovod averages the logs."""

    def __init__(self, val):
        super().__init__()
        self.val = val

    def on_epoch_end(self, epoch, logs=None):
        results = self.model.evaluate(self.val, verbose=0, return_dict=True)
        if logs is not None:
            logs.update({f"val_{k}": v for k, v in results.items()})


class PassValidation(tf.keras.callbacks.Callback):
    """The validation loss each time the global model has seen the training set once more
    (a pass of `pass_length` samples) inside an epoch; the epoch's end has its own. It only
    reads the weights (no update, no optimizer or random state), so the training path is the
    one without it; and it does not use model.evaluate, which would reset the epoch's running
    training loss. The mean over this rank's validation shard, then over the ranks (`average`,
    Horovod's allreduce), as Horovod averages the epoch's val_loss."""

    def __init__(self, record: RunRecord, val, pass_length: int, average):
        super().__init__()
        self.record, self.val, self.pass_length, self.average = record, val, pass_length, average
        self.samples, self.last_step, self.loss_of = 0, 0, None

    def on_epoch_begin(self, epoch, logs=None):
        p, steps = self.record.p, self.record.steps
        self.samples, self.last_step = epoch * steps * p.global_batch, steps - 1

    def on_train_batch_end(self, batch, logs=None):
        before, self.samples = self.samples, self.samples + self.record.p.global_batch
        if batch < self.last_step and self.samples // self.pass_length > before // self.pass_length:
            self.record.pass_losses.append([round(self.samples / self.pass_length, 6), self._validate()])

    def _validate(self) -> Optional[float]:
        if self.loss_of is None:
            model = self.model
            self.loss_of = tf.function(lambda x, y: model.loss(y, model(x, training=False)))
        total, count = 0.0, 0
        for x, y in self.val:
            n = int(x.shape[0])
            total, count = total + float(self.loss_of(x, y)) * n, count + n  # a batch's loss is its mean
        mean = self.average([tf.constant(total / max(count, 1), tf.float32)])[0]
        return _finite(float(mean))


class Stopping(tf.keras.callbacks.Callback):
    """The stopping rules (rules.StoppingRules): the target, a non-finite loss, a collapse, a
    stall, the cap. `agree` makes the decision the same on every worker: only rank 0 holds a
    resumed run's history, so every rank takes rank 0's reason (agree.Ranks.from_chief)."""

    def __init__(self, record: RunRecord, agree=lambda reason: reason):
        super().__init__()
        self.record, self.agree = record, agree

    def on_epoch_end(self, epoch, logs=None):
        r, cfg = self.record, self.record.cfg
        loss, val_loss = r.losses
        r.val_history.append(val_loss if math.isfinite(val_loss) else math.inf)
        reason = self.agree(rules.StoppingRules.of(cfg).reason(epoch, loss, val_loss, r.val_history))
        if reason == RunStatus.REACHED:
            r.time_to_target_s = r.row["seconds"]
        if reason:
            r.status = reason
            self.model.stop_training = True


class MetricsLog(tf.keras.callbacks.Callback):
    """Appends each epoch's row to metrics.jsonl, flushed to disk before the next epoch
    (rank 0 only)."""

    def __init__(self, record: RunRecord, out: Path):
        super().__init__()
        self.record, self.path = record, out / "metrics.jsonl"

    def on_epoch_end(self, epoch, logs=None):
        with open(self.path, "a") as f:
            f.write(json.dumps(self.record.row) + "\n")
            f.flush()
            os.fsync(f.fileno())


class Checkpoint(tf.keras.callbacks.Callback):
    """A checkpoint after every epoch and state.json naming it, so `--resume` continues a
    killed run; the previous checkpoint goes once the new one is written (rank 0 only)."""

    def __init__(self, record: RunRecord, out: Path, ckpt: tf.train.Checkpoint, resumed_state: Optional[dict]):
        super().__init__()
        self.record, self.out, self.ckpt = record, out, ckpt
        self.state = dict(resumed_state or {})

    def on_epoch_end(self, epoch, logs=None):
        name = f"epoch-{epoch + 1:04d}"
        try:
            path = self.ckpt.write(str(self.out / "ckpt" / name))
        except tf.errors.OpError as e:
            if "No space left on device" not in str(e):
                raise
            for f in (self.out / "ckpt").glob(name + "[._]*"):  # this epoch's partial files; the last one stays
                shutil.rmtree(f) if f.is_dir() else f.unlink()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.out / "ckpt")) from None
        prev = self.state.get("checkpoint")
        self.state = {
            "epoch": epoch,
            "elapsed_s": self.record.row["seconds"],
            "checkpoint": os.path.relpath(path, self.out),
            "status": "running",
        }
        write_atomic(self.out / "state.json", json.dumps(self.state))
        if prev and prev != self.state["checkpoint"]:
            for f in (self.out / "ckpt").glob(Path(prev).name + ".*"):
                f.unlink()


class PolicyLR(tf.keras.callbacks.Callback):
    """Sets the lr of every batch from the policy's lr_at: constant, or Horovod's warmup ramp.

    Written here rather than using hvd.callbacks.LearningRateWarmupCallback because the
    ramp must also run with emulated workers, where hvd.size() is 1.
    """

    def __init__(self, p: ScalingPlan, steps: int):
        super().__init__()
        self.p, self.steps, self.epoch = p, steps, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        self._set(0)

    def on_train_batch_begin(self, batch, logs=None):
        if self.p.policy.lr_moves_within(self.p, self.epoch):
            self._set(batch)

    def _set(self, batch):
        tf.keras.backend.set_value(self.model.optimizer.lr, self.p.lr_at(self.epoch, batch, self.steps))


class LocalSync(tf.keras.callbacks.Callback):
    """Local SGD's communication: average the workers' weights and moments after every H-th
    step and after an epoch's last (before Keras validates the epoch)."""

    def __init__(self, steps: int, local_steps: int):
        super().__init__()
        self.steps, self.local_steps = steps, local_steps

    def on_train_batch_end(self, batch, logs=None):
        if rules.is_sync_step(batch, self.steps, self.local_steps):
            self.model.average_workers()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["allreduces"] = (
                rules.local_syncs_per_epoch(self.steps, self.local_steps) if self.model.workers > 1 else 0
            )
