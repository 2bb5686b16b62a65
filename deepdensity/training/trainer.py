"""One training run under one of the paper's four policies, on 1..N Horovod workers.

Everything a run leaves behind is in its output folder, written by rank 0 only and
each file atomically: config.json, metrics.jsonl, result.json, weights.h5, and a
checkpoint after every epoch so that `--resume` continues a killed run.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np
import tensorflow as tf

from deepdensity.training import dist
from deepdensity.scaling import rules
from deepdensity.training import watch
from deepdensity.config import Config, ConfigError
from deepdensity.data.cubes import DataError, load_cubes, to_density
from deepdensity.training.runs import RESUMABLE, START_AFRESH, DamagedRun, read_json, read_metrics, resume_changes, write_atomic


class RunError(ValueError):
    """A run that cannot start as asked (bad output folder, nothing to resume, ...)."""


def _check_out_dir(out: Path, resume: bool) -> Optional[dict]:
    """Make sure `out` is writable and says what it holds; returns the state to resume."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise RunError(f"cannot write to output folder {out} ({e.strerror}); pass another --out") from None
    state_path = out / "state.json"
    if resume:
        if not state_path.exists():
            return None
        state = read_json(state_path, "epoch to resume from")
        if not (isinstance(state.get("epoch"), int) and isinstance(state.get("elapsed_s"), (int, float))
                and isinstance(state.get("checkpoint"), str)):
            raise DamagedRun(f"{state_path} is damaged (no epoch, elapsed_s or checkpoint); {START_AFRESH}")
        return state
    if state_path.exists() or (out / "metrics.jsonl").exists():
        raise RunError(f"output folder {out} already holds a run; pass --resume to continue it, "
                       f"or choose another --out")
    return None


def _check_resume(out: Path, wanted: dict) -> None:
    """Refuse a resume that would change the optimisation path of the run in `out`."""
    saved = read_json(out / "config.json", "run's configuration")
    changes = resume_changes(saved, wanted, Config().to_dict())
    if changes:
        what = ", ".join(f"{key} {old!r} -> {new!r}" for key, old, new in changes)
        raise RunError(f"{out} holds a run with other settings ({what}); a resume continues the same "
                       f"optimisation path, so only {', '.join(RESUMABLE)} may change: start a new run "
                       f"with another --out")


def _restore(ckpt, out: Path, state: dict) -> None:
    """Load the checkpoint state.json names, or say plainly that it is damaged."""
    path = out / state["checkpoint"]
    if not Path(f"{path}.index").is_file():
        raise DamagedRun(f"the checkpoint {path} that {out / 'state.json'} names is missing; {START_AFRESH}")
    try:
        # write() saves no save_counter, so ask only that the model and optimizer matched.
        ckpt.restore(str(path)).assert_nontrivial_match()
    except (tf.errors.OpError, ValueError, AssertionError, IndexError) as e:  # IndexError: a cut .data file
        reason = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise DamagedRun(f"the checkpoint {path} is damaged ({reason}); {START_AFRESH}") from None


def _versions() -> dict:
    import platform

    v = {"python": platform.python_version(), "tensorflow": tf.__version__, "numpy": np.__version__,
         "machine": platform.machine(), "processor": platform.processor() or platform.machine(),
         "gpus": len(tf.config.list_physical_devices("GPU"))}
    try:
        import horovod
        v["horovod"] = horovod.__version__
    except ImportError:
        v["horovod"] = None
    return v


def train(cfg: Config, mode: str, out_dir: Optional[str] = None, resume: bool = False,
          emulate_workers: int = 1, verbose: bool = True) -> dict:
    """Train until the target, the epoch cap or divergence; returns result.json's content.

    A run refused before it wrote anything (bad data, a resume that does not match) leaves
    no empty output folder behind."""
    new_folder = Path(out_dir) if out_dir and not Path(out_dir).exists() else None
    try:
        return _train(cfg, mode, out_dir, resume, emulate_workers, verbose)
    except (ConfigError, DataError, RunError, DamagedRun):
        if new_folder is not None and new_folder.is_dir() and not any(new_folder.iterdir()):
            new_folder.rmdir()
        raise


def _train(cfg: Config, mode: str, out_dir: Optional[str], resume: bool, emulate_workers: int,
           verbose: bool) -> dict:
    from deepdensity.model.autoencoder import build_model, make_adam

    if emulate_workers < 1:
        raise ConfigError("--emulate-workers must be >= 1")
    # Horovod: init and pin (device and thread share) before any other TensorFlow work.
    backend, threads = dist.setup(cfg.intra_op_threads, cfg.horovod_cycle_ms)
    rank, processes = backend.rank(), backend.size()
    if emulate_workers > 1 and processes > 1:
        raise ConfigError("--emulate-workers is for one process; under horovodrun the workers are real")
    workers = emulate_workers if emulate_workers > 1 else processes
    is_chief = rank == 0
    say = print if (verbose and is_chief) else (lambda *a, **k: None)

    # Horovod: scale batch and lr by the policy (all arithmetic lives in rules.py).
    try:
        p = rules.plan(mode, workers, cfg.batch_size, cfg.base_lr, cfg.warmup_epochs, processes)
    except rules.PlanError as e:
        raise ConfigError(str(e)) from None

    out = Path(out_dir) if out_dir else None
    state = _check_out_dir(out, resume) if (out and is_chief) else None
    if resume and out and is_chief and state is None:
        say(f"nothing to resume in {out}; starting a new run there")
    if state:
        _check_resume(out, {**cfg.to_dict(), "mode": mode, "workers": workers, "world_size": processes})
    if _finished(state, cfg, backend, processes):
        say(f"{out} holds a finished run; nothing to do (see {out}/result.json)")
        return read_json(out / "result.json", "finished run's result") if is_chief else {}

    cubes, train_x, val_x = _training_data(cfg, say)
    try:
        steps = rules.steps_per_epoch(len(train_x), p, cfg.epoch_definition)
    except rules.PlanError as e:
        raise ConfigError(f"{cfg.data_path}: {e}") from None

    if cfg.deterministic:
        tf.config.experimental.enable_op_determinism()
    # Same seed on every worker: identical initial weights, so the first step is already
    # the sequential model's first step (the broadcast below only guarantees it).
    tf.keras.utils.set_random_seed(cfg.seed)
    model = _training_model(build_model(cfg, cubes.grid_size, cubes.ndim), p, cfg, backend)
    first_lr = rules.lr_at(p, 0, 0, steps)
    # Horovod: wrap the optimizer so gradients are averaged over workers (adaptive and local
    # average by hand in their training step, steps.py).
    optimizer = make_adam(cfg, first_lr)
    if mode not in rules.BEYOND_MODES:
        optimizer = backend.wrap_optimizer(optimizer, cfg.allreduce_groups)
    model.compile(optimizer=optimizer, loss=tf.keras.losses.MeanSquaredLogarithmicError(),
                  jit_compile=cfg.xla == "step")
    dist.create_slots(model, optimizer)

    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer)
    if state:
        _check_resume(out, {"n_train": len(train_x), "n_val": len(val_x)})
    initial_epoch, elapsed_before = _resume_point(ckpt, out, state, backend, processes)
    # Horovod: start every worker from rank 0's weights and optimizer state.
    backend.broadcast_state(model, optimizer)
    if mode == "local":
        model.start_workers()

    _describe(say, p, cfg, cubes, len(train_x), len(val_x), steps, threads, model.grad_slices)
    val_history = []
    if is_chief and out:
        val_history = _start_files(out, initial_epoch, {
            **cfg.to_dict(), "mode": mode, "world_size": processes, "workers": workers,
            "emulated": emulate_workers > 1, "global_batch": p.global_batch,
            "per_worker_batch": p.per_worker_batch, "per_process_batch": p.per_process_batch,
            "lr": p.peak_lr, "steps_per_epoch": steps, "n_train": len(train_x),
            "n_val": len(val_x), "threads_per_process": threads, "versions": _versions()})

    if initial_epoch >= cfg.max_epochs:
        raise RunError(f"the checkpoint in {out} is at epoch {initial_epoch}, max_epochs is "
                       f"{cfg.max_epochs}; raise max_epochs to train further")

    train_t = tf.constant(train_x[..., None])

    def batches_of(index: np.ndarray) -> tf.data.Dataset:
        return (tf.data.Dataset.from_tensor_slices(index.astype(np.int32))
                .map(lambda i: (tf.gather(train_t, i),) * 2, num_parallel_calls=1, deterministic=True)
                .prefetch(2))

    feed, mode_callbacks = None, []
    if mode == "adaptive":
        # The batch of each epoch is decided at the end of the one before, so every epoch
        # gets its own index stream (and its own call of fit, which fixes steps per epoch).
        feed = _AdaptiveFeed(len(train_x), p, cfg, rank, processes, initial_epoch,
                             _adaptive_start(out if is_chief else None, p, initial_epoch, backend, processes))
        mode_callbacks = [_AdaptiveBatch(feed, cfg, say)]
    else:
        # Data: one index stream for the whole run, so epochs follow each other without
        # re-creating iterators; the order depends on (seed, pass) only, never on the rank.
        orders = [rules.shard_of_batch(rules.epoch_order(len(train_x), p, e, cfg.seed, cfg.epoch_definition),
                                       rank, processes)
                  for e in range(initial_epoch, cfg.max_epochs)]
        train_ds = batches_of(np.concatenate(orders))
        if mode == "local":
            mode_callbacks = [_LocalSync(steps, cfg.local_steps)]
    lo, hi = rules.validation_shard(len(val_x), rank, processes)
    val_ds = tf.data.Dataset.from_tensor_slices((val_x[lo:hi, ..., None],) * 2).batch(
        p.per_process_batch // model.grad_slices)

    # Horovod: only rank 0 holds a resumed run's history, so every worker stops when it says so.
    agree = backend.allreduce_max if processes > 1 else float
    study = _StudyCallback(p, cfg, steps, out if is_chief else None, ckpt, elapsed_before, say,
                           progress=verbose and is_chief, val_history=val_history, agree=agree,
                           resumed_state=state)
    callbacks = backend.callbacks(broadcast_after_first_step=mode != "local") + [_PolicyLR(p, steps)] \
        + mode_callbacks + [study]
    if is_chief and out:    # Horovod: rank 0 alone writes TensorBoard logs (after `study` puts lr in the logs)
        callbacks += watch.tensorboard_callbacks(out, val_x, cfg.tensorboard_images_every)
    if feed is None:
        model.fit(train_ds, validation_data=val_ds, epochs=cfg.max_epochs, initial_epoch=initial_epoch,
                  steps_per_epoch=steps, callbacks=callbacks, verbose=0)
    else:
        while feed.epoch < cfg.max_epochs and study.status is None:
            model.fit(batches_of(feed.index()), validation_data=val_ds, epochs=feed.epoch + 1,
                      initial_epoch=feed.epoch, steps_per_epoch=feed.steps(), callbacks=callbacks, verbose=0)
    study.finish()
    result = study.result()
    if is_chief and out:
        tmp = out / "weights.tmp.h5"
        model.save_weights(str(tmp))
        os.replace(tmp, out / "weights.h5")
        write_atomic(out / "result.json", json.dumps(result, indent=2))
        write_atomic(out / "state.json", json.dumps({**study.state, "status": result["status"]}))
    return result


def _finished(state: Optional[dict], cfg: Config, backend, processes: int) -> bool:
    """Is the run in the folder final? A run stopped at the epoch cap is extended by a larger
    max_epochs; the others are final. Only rank 0 reads the folder; all workers agree."""
    finished = bool(state and (state.get("status") in ("reached_target", "diverged", "stalled") or
                               (state.get("status") == "max_epochs" and state["epoch"] + 1 >= cfg.max_epochs)))
    if processes > 1:
        finished = bool(backend.allreduce_max(float(finished)))
    return finished


def _resume_point(ckpt, out: Optional[Path], state: Optional[dict], backend, processes: int) -> tuple:
    """(first epoch to run, seconds already spent): restores the checkpoint of a resumed run."""
    initial_epoch, elapsed_before = 0, 0.0
    if state:
        _restore(ckpt, out, state)
        initial_epoch, elapsed_before = state["epoch"] + 1, state["elapsed_s"]
    if processes > 1:
        # Every worker must learn where rank 0 resumes (only rank 0 reads the folder).
        initial_epoch = int(backend.allreduce_max(initial_epoch))
        elapsed_before = backend.allreduce_max(elapsed_before)
    return initial_epoch, elapsed_before


def _training_data(cfg: Config, say) -> tuple:
    """(cubes file, training cubes, validation cubes) as the model sees them."""
    cubes = load_cubes(cfg.data_path)
    train_x, val_x = cubes.train, cubes.val
    if cfg.max_train_cubes:
        train_x = train_x[: cfg.max_train_cubes]
    if cfg.intensity_scaling == "density":
        train_x, empty_train = to_density(train_x)
        val_x, empty_val = to_density(val_x)
        if empty_train + empty_val:
            say(f"warning: {empty_train + empty_val} cubes hold no mass (all air); used a uniform density")
    return cubes, train_x, val_x


def _describe(say, p: rules.ScalingPlan, cfg: Config, cubes, n_train: int, n_val: int, steps: int, threads: int,
              grad_slices: int) -> None:
    """The run's arithmetic, printed at start-up (rank 0)."""
    say(p.describe())
    say(f"data: {cfg.data_path}  train {n_train} cubes  val {n_val}  cube {cubes.grid_size}^{cubes.ndim}")
    say(f"epoch ({cfg.epoch_definition}): {steps} steps of {p.global_batch} = "
        f"{steps * p.global_batch / rules.pass_length(n_train, p.base_batch):g} pass(es) of "
        f"{rules.pass_length(n_train, p.base_batch)} cubes")
    if p.mode == "adaptive":
        say(f"adaptive: the per-worker batch grows from {p.per_worker_batch} up to {cfg.batch_size} when the "
            f"gradient's noise exceeds theta^2 = {cfg.adaptive_theta:g}^2 times its squared norm")
    if p.mode == "local":
        say(f"local: {p.workers} workers average weights and Adam moments every {cfg.local_steps} steps "
            f"({rules.local_syncs_per_epoch(steps, cfg.local_steps)} allreduces per epoch instead of {steps})")
    say(f"threads per process: {threads}  Horovod cycle {dist.cycle_ms_in_effect():g} ms  target val_loss {cfg.target_loss:g}  cap {cfg.max_epochs} epochs")
    if grad_slices > 1:
        say(f"each step averages the gradients of {grad_slices} slices of "
            f"{p.per_process_batch // grad_slices} (max_pass_batch {cfg.max_pass_batch})")


def _start_files(out: Path, initial_epoch: int, run_config: dict) -> list:
    """A new run writes config.json and an empty metrics.jsonl; a resumed one drops the
    metrics lines of epochs its checkpoint does not cover. Returns the kept val_losses."""
    if initial_epoch == 0:
        write_atomic(out / "config.json", json.dumps(run_config, indent=2))
        (out / "metrics.jsonl").write_text("")
        return []
    kept = [m for m in read_metrics(out) if m["epoch"] <= initial_epoch]
    write_atomic(out / "metrics.jsonl", "".join(json.dumps(m) + "\n" for m in kept))
    return [math.inf if m["val_loss"] is None else m["val_loss"] for m in kept]


# Keys of metrics.jsonl that mode callbacks add to an epoch's row (through Keras's logs).
ROW_EXTRAS = ("global_batch", "steps", "allreduces", "grad_noise", "grad_sq", "next_global_batch")


def _training_model(model: tf.keras.Model, p: rules.ScalingPlan, cfg: Config, backend):
    """The model with the training step of its mode: the four policies' (slices of one
    synchronous step), adaptive's (also measures the gradient's noise), local's (one step
    per worker on its own weights)."""
    from deepdensity.model.autoencoder import for_training
    from deepdensity.model.steps import LocalStep, NoiseStep

    parts = p.workers // p.processes          # workers this process holds
    if p.mode not in rules.BEYOND_MODES:
        return for_training(model, rules.grad_slices(p.per_process_batch, cfg.max_pass_batch))
    trainable = (NoiseStep if p.mode == "adaptive" else LocalStep)(model.inputs, model.outputs, name=model.name)
    trainable.parts, trainable.workers = parts, p.workers
    trainable.average = backend.average       # Horovod: the allreduce these steps call by hand
    return trainable


def _adaptive_start(out: Optional[Path], p: rules.ScalingPlan, initial_epoch: int, backend, processes: int) -> int:
    """Adaptive's per-worker batch for the first epoch to run: the plan's at the start, on
    resume the batch the last finished epoch chose (rank 0 reads it; all workers agree)."""
    per_worker = p.per_worker_batch
    if out is not None and initial_epoch > 0:
        rows = [m for m in read_metrics(out) if m["epoch"] == initial_epoch]
        if rows and isinstance(rows[-1].get("next_global_batch"), int):
            per_worker = rows[-1]["next_global_batch"] // p.workers
    if processes > 1:
        per_worker = int(backend.allreduce_max(per_worker))
    return per_worker


class _AdaptiveFeed:
    """Adaptive's next epoch: its number and per-worker batch (set by `_AdaptiveBatch`)."""

    def __init__(self, n_train, p, cfg, rank, processes, epoch, per_worker_batch):
        self.n_train, self.p, self.cfg, self.rank, self.processes = n_train, p, cfg, rank, processes
        self.epoch, self.per_worker_batch = epoch, per_worker_batch

    def global_batch(self) -> int:
        return self.per_worker_batch * self.p.workers

    def steps(self) -> int:
        return rules.steps_per_epoch(self.n_train, self.p, self.cfg.epoch_definition, self.global_batch())

    def index(self) -> np.ndarray:
        """This process's share of every global batch of the epoch: (steps, per_process_batch)."""
        order = rules.epoch_order(self.n_train, self.p, self.epoch, self.cfg.seed, self.cfg.epoch_definition,
                                  self.global_batch())
        return rules.shard_of_batch(order, self.rank, self.processes)


class _AdaptiveBatch(tf.keras.callbacks.Callback):
    """De et al.'s big-batch test at the end of each epoch (rules.adaptive_batch) on the
    epoch's mean gradient statistics, which every worker holds alike after the allreduce;
    grows the per-worker batch for the next epoch, up to the base batch B (weak's)."""

    def __init__(self, feed: _AdaptiveFeed, cfg: Config, say):
        super().__init__()
        self.feed, self.cfg, self.say = feed, cfg, say

    def on_epoch_end(self, epoch, logs=None):
        logs = {} if logs is None else logs
        feed, n = self.feed, self.feed.p.workers
        noise = rules.gradient_noise(float(logs["grad_part_sq"]), float(logs["grad_sq"]), n)
        b = feed.per_worker_batch
        grown = rules.adaptive_batch(b, noise, float(logs["grad_sq"]), self.cfg.adaptive_theta,
                                     self.cfg.batch_size)
        logs.update(global_batch=b * n, steps=feed.steps(), allreduces=feed.steps(), grad_noise=noise,
                    next_global_batch=grown * n)
        if grown != b:
            self.say(f"epoch {epoch + 1}: gradient noise {noise:.3g} > theta^2 x {float(logs['grad_sq']):.3g}: "
                     f"global batch {b * n} -> {grown * n}")
        feed.per_worker_batch, feed.epoch = grown, epoch + 1


class _LocalSync(tf.keras.callbacks.Callback):
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
            logs["allreduces"] = rules.local_syncs_per_epoch(self.steps, self.local_steps) \
                if self.model.workers > 1 else 0


def _finite(x) -> Optional[float]:
    return float(x) if x is not None and math.isfinite(float(x)) else None


class _PolicyLR(tf.keras.callbacks.Callback):
    """Sets the lr of every batch from rules.lr_at: constant, or Horovod's warmup ramp.

    Written here rather than using hvd.callbacks.LearningRateWarmupCallback because the
    ramp must also run with emulated workers, where hvd.size() is 1.
    """

    def __init__(self, p: rules.ScalingPlan, steps: int):
        super().__init__()
        self.p, self.steps, self.epoch = p, steps, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        self._set(0)

    def on_train_batch_begin(self, batch, logs=None):
        if self.p.mode == "warmup" and self.epoch < self.p.warmup_epochs:
            self._set(batch)

    def _set(self, batch):
        tf.keras.backend.set_value(self.model.optimizer.lr, rules.lr_at(self.p, self.epoch, batch, self.steps))


class _StudyCallback(tf.keras.callbacks.Callback):
    """Stopping rules, time to target, metrics.jsonl, checkpoints and the progress line.

    Runs after MetricAverageCallback, so the losses it reads are the same on every
    worker and every worker takes the same decision to stop.
    """

    def __init__(self, p, cfg, steps, out, ckpt, elapsed_before, say, progress, val_history=(), agree=float,
                 resumed_state=None):
        super().__init__()
        self.p, self.cfg, self.steps, self.out, self.ckpt = p, cfg, steps, out, ckpt
        self.elapsed_before, self.say = elapsed_before, say
        self.val_history, self.agree = list(val_history), agree
        self.status, self.time_to_target_s, self.last = None, None, {}
        self.state = dict(resumed_state or {})   # its checkpoint is deleted once the next one is written
        self.bar = None
        self.progress = progress

    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.t0

    def on_train_begin(self, logs=None):
        if hasattr(self, "t0"):                # adaptive calls fit once per epoch: one run, one clock
            return
        self.t0 = time.perf_counter()          # start mark of time to target
        if self.progress and sys.stderr.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=self.cfg.max_epochs, initial=self.params.get("initial_epoch", 0) or 0,
                            desc=f"{self.p.mode} N={self.p.workers}", unit="epoch", file=sys.stderr)

    def on_epoch_end(self, epoch, logs=None):
        logs = {} if logs is None else logs   # the same dict the later callbacks get
        seconds = self.elapsed()              # stop mark: after this epoch's validation
        loss, val_loss = float(logs.get("loss", float("nan"))), float(logs.get("val_loss", float("nan")))
        # What the optimizer held for the epoch's last batch, read back, not recomputed.
        lr = float(tf.keras.backend.get_value(self.model.optimizer.lr))
        logs["lr"] = lr                       # for TensorBoard, which runs after this callback
        self.val_history.append(val_loss if math.isfinite(val_loss) else math.inf)
        reason = rules.stop_reason(epoch, loss, val_loss, self.cfg.target_loss, self.cfg.max_epochs,
                                   self.val_history, self.cfg.stall_patience)
        if self.cfg.stall_patience and self.agree(float(reason == "stalled")):
            reason = reason or "stalled"
        if reason == "reached_target":
            self.time_to_target_s = seconds
        self.last = {"epoch": epoch + 1, "loss": _finite(loss), "val_loss": _finite(val_loss),
                     "lr": lr, "seconds": seconds, **self._batch_facts(logs)}
        if self.out is not None:
            with open(self.out / "metrics.jsonl", "a") as f:
                f.write(json.dumps(self.last) + "\n")
                f.flush()
                os.fsync(f.fileno())
            path = self.ckpt.write(str(self.out / "ckpt" / f"epoch-{epoch + 1:04d}"))
            prev = self.state.get("checkpoint")
            self.state = {"epoch": epoch, "elapsed_s": seconds,
                          "checkpoint": os.path.relpath(path, self.out), "status": "running"}
            write_atomic(self.out / "state.json", json.dumps(self.state))
            if prev and prev != self.state["checkpoint"]:
                for f in (self.out / "ckpt").glob(Path(prev).name + ".*"):
                    f.unlink()
        line = (f"epoch {epoch + 1:4d}  loss {loss:.6g}  val_loss {val_loss:.6g}  lr {lr:.6g}  "
                f"{seconds:8.1f}s")
        if self.bar is not None:
            self.bar.set_postfix_str(f"loss {loss:.4g} val {val_loss:.4g}")
            self.bar.update(1)
        else:
            self.say(line)
        if reason:
            self.status = reason
            self.model.stop_training = True

    def _batch_facts(self, logs: dict) -> dict:
        """Global batch, steps and allreduces of the epoch (a mode's callback may have put
        its own in `logs`: adaptive's batch changes, local's allreduces are every H steps)."""
        facts = {"global_batch": self.p.global_batch, "steps": self.steps,
                 "allreduces": self.steps if self.p.workers > 1 else 0}
        facts.update({k: logs[k] if isinstance(logs[k], int) else float(logs[k]) for k in ROW_EXTRAS if k in logs})
        return facts

    def finish(self):
        """The run's last line (after the last call of fit)."""
        if self.bar is not None:
            self.bar.close()
        if self.status == "reached_target":
            what = f"reached target {self.cfg.target_loss:g} in {self.time_to_target_s:.1f} s"
        elif self.status == "diverged":
            what = "stopped: non-finite loss"
        elif self.status == "stalled":
            what = f"stopped: no new best val_loss in {self.cfg.stall_patience} epochs (stalled)"
        else:
            what = f"stopped at the epoch cap ({self.cfg.max_epochs})"
        self.say(f"{what} after {self.last.get('epoch')} epochs")

    def result(self) -> dict:
        return {"status": self.status or "max_epochs", "mode": self.p.mode, "workers": self.p.workers,
                "epochs": self.last.get("epoch"), "time_to_target_s": self.time_to_target_s,
                "final_val_loss": self.last.get("val_loss"), "final_loss": self.last.get("loss"),
                "seconds": self.last.get("seconds"), "target_loss": self.cfg.target_loss}
