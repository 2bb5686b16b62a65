"""One training run under one of the paper's four policies, on 1..N Horovod workers.

Everything a run leaves behind is in its output folder, written by rank 0 only and
each file atomically: config.json, metrics.jsonl, result.json, weights.h5, and a
checkpoint after every epoch so that `--resume` continues a killed run.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
import tensorflow as tf

from deepdensity.training import dist
from deepdensity.scaling import rules
from deepdensity.training import callbacks, runs, watch
from deepdensity.config import Config, ConfigError
from deepdensity.data import synth
from deepdensity.data.cubes import DataError, load_cubes, to_density
from deepdensity.training.runs import RESUMABLE, START_AFRESH, DamagedRun, read_json, read_metrics, resume_changes
from deepdensity.utils.errors import UserError
from deepdensity.utils.files import atomic_path, write_atomic


class RunError(UserError):
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


def _same_on_every_rank(run, settings: dict) -> None:
    """Every rank must train with the same settings and data: ranks started with other ones
    (a wrapper script, a stale config on one host) would otherwise train silently apart,
    crash deep in TensorFlow or hang. All ranks stop here with one line naming the difference."""
    if run.processes == 1:
        return
    every = run.backend.gather(settings)
    differ = sorted({k for other in every for k in set(settings) | set(other)
                     if other.get(k) != every[0].get(k)})
    if differ:
        shown = "; ".join(f"{k}: " + ", ".join(f"rank {r} {s.get(k)!r}" for r, s in enumerate(every)) for k in differ)
        raise ConfigError(f"the {run.processes} ranks were started with different settings ({shown}); "
                          f"start every rank with the same command, config and data")


def _resume_identity(cfg: Config, mode: str, run) -> dict:
    """What a resume must keep: the settings, the mode, elastic or not, and N, except in an
    elastic run, which goes on at any N as it does when workers leave."""
    same = {**cfg.to_dict(), "mode": mode, "elastic": run.elastic}
    return same if run.elastic else {**same, "workers": run.workers, "world_size": run.processes}


def _check_resume(out: Path, wanted: dict) -> None:
    """Refuse a resume that would change the optimisation path of the run in `out`."""
    saved = read_json(out / "config.json", "run's configuration")
    changes = resume_changes(saved, wanted, {**Config().to_dict(), "elastic": False})
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
    v["horovod"] = dist.horovod_version()
    return v


def train(cfg: Config, mode: str, out_dir: Optional[str] = None, resume: bool = False,
          emulate_workers: int = 1, verbose: bool = True, elastic: bool = False) -> dict:
    """Train until the target, the epoch cap or divergence; returns result.json's content.

    A run refused before it wrote anything (bad data, a resume that does not match) leaves
    no empty output folder behind. `elastic`: under an elastic horovodrun, go on when workers
    leave (rules.elastic_problem says which runs can)."""
    run = _launch(cfg, mode, out_dir, emulate_workers, verbose, elastic)
    new_folder = run.out if run.out and not run.out.exists() else None
    # rank 0 alone writes the run folder, so it alone holds its lock and alone removes the
    # folder it made for a run refused before it wrote anything (two ranks removing it raced:
    # the second one's rmdir failed with "No such file or directory" instead of the real error)
    with runs.locked(run.out) if (run.out and run.is_chief) else contextlib.nullcontext():
        try:
            return _train_in(cfg, mode, run, resume, emulate_workers, verbose)
        except (ConfigError, DataError, RunError, DamagedRun):
            if run.is_chief and new_folder is not None and new_folder.is_dir() and not any(new_folder.iterdir()):
                new_folder.rmdir()
            raise


@dataclass
class _Launch:
    """Who this process is in the run and what the policy asks of it."""
    backend: object                  # dist.Horovod, or dist.Single without Horovod
    threads: int
    rank: int
    processes: int                   # Horovod's world size
    workers: int                     # N: the world size, or the emulated N
    p: rules.ScalingPlan
    out: Optional[Path]
    say: object                      # print on rank 0 unless quiet, else nothing
    tell: object                     # print on rank 0, quiet or not (how the run ended)
    elastic: bool = False            # N may change between epochs (Horovod elastic)

    @property
    def is_chief(self) -> bool:
        return self.rank == 0


def _launch(cfg: Config, mode: str, out_dir: Optional[str], emulate_workers: int, verbose: bool,
            elastic: bool = False) -> _Launch:
    if emulate_workers < 1:
        raise ConfigError("--emulate-workers must be >= 1")
    problem = rules.elastic_problem(mode, cfg.epoch_definition, emulate_workers) if elastic else None
    if problem:
        raise ConfigError(problem)
    # Horovod: init and pin (device and thread share) before any other TensorFlow work.
    backend, threads = dist.setup(cfg.intra_op_threads, cfg.horovod_cycle_ms)
    processes = backend.size()
    if emulate_workers > 1 and processes > 1:
        raise ConfigError("--emulate-workers is for one process; under horovodrun the workers are real")
    if elastic and not backend.elastic_launched():
        raise ConfigError("--elastic needs an elastic launch: horovodrun -np N --min-np M --max-np N "
                          "--host-discovery-script SCRIPT ... (docs/cluster.md)")
    workers = emulate_workers if emulate_workers > 1 else processes
    return _as_launch(cfg, mode, backend, threads, workers, Path(out_dir) if out_dir else None, verbose, elastic)


def _as_launch(cfg: Config, mode: str, backend, threads: int, workers: int, out: Optional[Path], verbose: bool,
               elastic: bool) -> _Launch:
    """This process's part in the run at the world size Horovod reports now."""
    rank, processes = backend.rank(), backend.size()
    # Horovod: scale batch and lr by the policy (all arithmetic lives in rules.py).
    try:
        p = rules.plan(mode, workers, cfg.batch_size, cfg.base_lr, cfg.warmup_epochs, processes, uneven=elastic)
    except rules.PlanError as e:
        raise ConfigError(str(e)) from None
    silent = lambda *a, **k: None  # noqa: E731
    say = print if (verbose and rank == 0) else silent
    tell = print if rank == 0 else silent
    return _Launch(backend, threads, rank, processes, workers, p, out, say, tell, elastic)


def _train_in(cfg: Config, mode: str, run: _Launch, resume: bool, emulate_workers: int, verbose: bool) -> dict:
    out, p = run.out, run.p
    state = _check_out_dir(out, resume) if (out and run.is_chief) else None
    if resume and out and run.is_chief and state is None:
        run.say(f"nothing to resume in {out}; starting a new run there")
    if state:
        _check_resume(out, _resume_identity(cfg, mode, run))
    if _finished(state, cfg, run.backend, run.processes):
        run.say(f"{out} holds a finished run; nothing to do (see {out}/result.json)")
        return read_json(out / "result.json", "finished run's result") if run.is_chief else {}

    _make_default_data(cfg.data_path, run)
    # the data by its content, not its path (hosts may keep their copies in other places)
    _same_on_every_rank(run, {**{k: v for k, v in cfg.to_dict().items() if k != "data_path"}, "mode": mode,
                              "emulate_workers": emulate_workers, "data_fingerprint":
                              runs.data_fingerprint(cfg.data_path) if Path(cfg.data_path).is_file() else None})
    cubes, train_x, val_x = _training_data(cfg, run.say)
    try:
        steps = rules.steps_per_epoch(len(train_x), p, cfg.epoch_definition)
    except rules.PlanError as e:
        raise ConfigError(f"{cfg.data_path}: {e}") from None
    model, optimizer = _compiled_model(cfg, run, cubes, steps)
    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer)
    fingerprint = runs.data_fingerprint(cfg.data_path) if (out and run.is_chief) else None
    if state:
        _check_resume(out, {"n_train": len(train_x), "n_val": len(val_x)})
        if runs.other_data(read_json(out / "config.json", "run's configuration"), fingerprint):
            raise RunError(f"{out} was trained on other data than {cfg.data_path} holds now (its content "
                           f"changed); a resume continues the same optimisation path: {START_AFRESH}")
    initial_epoch, elapsed_before = _resume_point(ckpt, out, state, run.backend, run.processes)
    # Horovod: start every worker from rank 0's weights and optimizer state.
    run.backend.broadcast_state(model, optimizer)
    if mode == "local":
        model.start_workers()

    _describe(run.say, p, cfg, cubes, len(train_x), len(val_x), steps, run.threads, model.grad_slices)
    val_history = []
    if run.is_chief and out:
        val_history = _start_files(out, initial_epoch, {
            **cfg.to_dict(), "mode": mode, "world_size": run.processes, "workers": run.workers,
            "emulated": emulate_workers > 1, "global_batch": p.global_batch,
            "per_worker_batch": p.per_worker_batch, "per_process_batch": p.per_process_batch,
            "lr": p.peak_lr, "steps_per_epoch": steps, "n_train": len(train_x),
            "n_val": len(val_x), "threads_per_process": run.threads, "data_fingerprint": fingerprint,
            "elastic": run.elastic,
            "versions": _versions()})
    if initial_epoch > cfg.max_epochs:
        raise RunError(f"the checkpoint in {out} is at epoch {initial_epoch}, max_epochs is "
                       f"{cfg.max_epochs}; raise max_epochs to train further")
    record = callbacks.RunRecord(p, cfg, steps, elapsed_before, val_history)
    if initial_epoch == cfg.max_epochs:
        # stopped after its last epoch's checkpoint and before its weights: finish it as it would have
        _last_epoch_again(record, read_metrics(out) if (run.is_chief and out) else [])
        run.tell(record.final_line())
        return _save_run(model, record, run, state)
    if run.elastic:
        run, saved = _fit_elastic(cfg, mode, run, model, record, (train_x, val_x), initial_epoch, ckpt, verbose)
    else:
        saved = _fit(cfg, run, model, record, (train_x, val_x), initial_epoch, steps, ckpt, state, verbose)
    return _save_run(model, record, run, saved)


def _fit(cfg: Config, run: _Launch, model, record: callbacks.RunRecord, data: tuple, initial_epoch: int,
         steps: int, ckpt, state: Optional[dict], verbose: bool, commit=None) -> Optional[dict]:
    """Train from `initial_epoch` to the end; returns the last checkpoint's state (rank 0).
    `commit`: elastic training's commit callback, after every callback that writes the folder."""
    train_x, val_x = data
    feeds = _Feeds(cfg, run, train_x, val_x, initial_epoch, model.grad_slices)
    cbs, progress, checkpoint = _callbacks(cfg, run, record, feeds, steps, ckpt, state, val_x, verbose)
    feeds.fit(model, cbs[:-1] + ([commit] if commit else []) + cbs[-1:], steps, record)
    progress.finish()
    return checkpoint.state if checkpoint else None


def _fit_elastic(cfg: Config, mode: str, run: _Launch, model, record: callbacks.RunRecord, data: tuple,
                 initial_epoch: int, ckpt, verbose: bool) -> tuple:
    """Horovod elastic: train, and whenever workers leave (a failure, a host gone from the
    discovery script) go back to the state committed after the last whole epoch and go on at
    the new N. Returns (this process's part in the run at the end, the last checkpoint's state)."""
    record.elastic = True
    commit = callbacks.CommitEachEpoch(None, record, run.processes)
    # a resumed run starts from the N it last trained with, so a new N is recorded as a change
    before = _last_workers(run.out) if (run.is_chief and run.out and initial_epoch) else run.processes
    # Horovod: the state every worker restores after a change: weights, optimizer, and ours
    # (rank 0's values reach every worker in the state's first sync).
    commit.state = run.backend.elastic_state(model, model.optimizer, epoch=initial_epoch, workers=before,
                                             record=record.snapshot())
    ended = {}

    def from_last_commit(state):
        now = _as_launch(cfg, mode, run.backend, run.threads, run.backend.size(), run.out, verbose, True)
        steps = rules.steps_per_epoch(len(data[0]), now.p, cfg.epoch_definition)
        if state.workers != now.processes:
            _workers_changed(now, state.epoch, commit.steps_since_commit, state.workers)
        if now.is_chief and now.out:          # whole epochs only: none counted twice after a failure
            _keep_rows_up_to(now.out, state.epoch)
        record.restore(state.record, now.p, steps)
        commit.workers, commit.steps_since_commit = now.processes, 0
        slices = rules.grad_slices(now.p.per_process_batch, cfg.max_pass_batch)
        if slices != model.grad_slices:
            model.grad_slices, model.train_function = slices, None   # traced again with the new slices
        # Keras 2 keeps the validation data of a fit that an exception ended (fit deletes it only
        # on its way out), and the next fit would validate on this rank's old shard
        model._eval_data_handler = None
        saved = read_json(run.out / "state.json", "run state") if (now.is_chief and run.out and
                                                                   (run.out / "state.json").exists()) else None
        ended["run"] = now
        ended["saved"] = _fit(cfg, now, model, record, data, state.epoch, steps, ckpt, saved, verbose, commit)

    run.backend.elastic_run(from_last_commit)(commit.state)
    return ended["run"], ended["saved"]


def _last_workers(out: Path) -> int:
    """The N an elastic run in `out` last trained with: its last change, else its start
    (a last line cut by a crash does not count)."""
    last = read_json(out / "config.json", "run's configuration")["workers"]
    path = out / "workers.jsonl"
    for line in path.read_text().splitlines() if path.exists() else []:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            last = int(json.loads(line)["new_workers"])
    return last


def _workers_changed(now: _Launch, epoch: int, lost_steps: int, before: int) -> None:
    """Say and record (workers.jsonl, rank 0) a change of N: after which whole epoch (counted
    from 1), how many steps of the next one were trained and dropped, N before and after."""
    now.tell(f"workers: {before} -> {now.processes} after epoch {epoch}; going on from that epoch's "
             f"committed state ({lost_steps} steps of epoch {epoch + 1} trained since are dropped)")
    if not (now.is_chief and now.out):
        return
    change = {"epoch": epoch, "step": lost_steps, "old_workers": before, "new_workers": now.processes}
    with open(now.out / "workers.jsonl", "a") as f:
        f.write(json.dumps(change) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _last_epoch_again(record: callbacks.RunRecord, rows: list) -> None:
    """The outcome of a run's last checkpointed epoch, from its metrics row (what Stopping
    decided then, decided again)."""
    if not rows:
        return
    last, cfg = rows[-1], record.cfg
    loss, val_loss = (math.nan if last[k] is None else last[k] for k in ("loss", "val_loss"))
    record.row, record.losses = last, (loss, val_loss)
    record.status = rules.stop_reason(last["epoch"] - 1, loss, val_loss, cfg.target_loss, cfg.max_epochs,
                                      record.val_history, cfg.stall_patience)
    if record.status == "reached_target":
        record.time_to_target_s = last["seconds"]


def _save_run(model, record: callbacks.RunRecord, run: _Launch, state: Optional[dict]) -> dict:
    """weights.h5, result.json and the final state.json (rank 0); returns the result."""
    result = record.result()
    if run.is_chief and run.out:
        with atomic_path(run.out / "weights.h5", suffix=".h5") as tmp:  # Keras picks the format by suffix
            model.save_weights(str(tmp))
        write_atomic(run.out / "result.json", json.dumps(result, indent=2))
        write_atomic(run.out / "state.json", json.dumps({**(state or {}), "status": result["status"]}))
    return result


def _compiled_model(cfg: Config, run: _Launch, cubes, steps: int) -> tuple:
    """(model with its mode's training step, optimizer), compiled, optimizer slots made."""
    from deepdensity.model.autoencoder import build_model, make_adam

    if cfg.deterministic:
        tf.config.experimental.enable_op_determinism()
    # Same seed on every worker: identical initial weights, so the first step is already
    # the sequential model's first step (the broadcast only guarantees it).
    tf.keras.utils.set_random_seed(cfg.seed)
    model = _training_model(build_model(cfg, cubes.grid_size, cubes.ndim), run.p, cfg, run.backend)
    # Horovod: wrap the optimizer so gradients are averaged over workers (adaptive and local
    # average by hand in their training step, model/steps.py).
    optimizer = make_adam(cfg, rules.lr_at(run.p, 0, 0, steps))
    if run.p.mode not in rules.BEYOND_MODES:
        optimizer = run.backend.wrap_optimizer(optimizer, cfg.allreduce_groups)
    model.compile(optimizer=optimizer, loss=tf.keras.losses.MeanSquaredLogarithmicError(),
                  jit_compile=cfg.xla == "step")
    dist.create_slots(model, optimizer)
    return model, optimizer


class _Feeds:
    """The run's training and validation data as tf.data pipelines, and the fit loop over
    them. The order of the training cubes depends on (seed, pass) only, never on the rank."""

    def __init__(self, cfg: Config, run: _Launch, train_x, val_x, initial_epoch: int, grad_slices: int):
        self.cfg, self.run, self.initial_epoch = cfg, run, initial_epoch
        self.n_train = len(train_x)
        self.train_t = tf.constant(train_x[..., None])
        lo, hi = rules.validation_shard(len(val_x), run.rank, run.processes)
        self.val = tf.data.Dataset.from_tensor_slices((val_x[lo:hi, ..., None],) * 2).batch(
            run.p.per_process_batch // grad_slices)
        # strong on an N that does not divide B (elastic): each rank's mean loss is weighted so
        # that the allreduced gradient is still the global batch's mean (rules.slice_weight)
        self.weight = None
        if run.p.global_batch % run.processes and run.p.mode == "strong":
            if grad_slices > 1:
                raise ConfigError(f"max_pass_batch {cfg.max_pass_batch} would cut unequal parts of the global "
                                  f"batch over {run.processes} workers; set max_pass_batch=0")
            self.weight = rules.slice_weight(run.p.global_batch, run.rank, run.processes)
        self.adaptive = None
        if run.p.mode == "adaptive":
            # The batch of each epoch is decided at the end of the one before, so every epoch
            # gets its own index stream (and its own call of fit, which fixes steps per epoch).
            self.adaptive = callbacks.AdaptiveFeed(
                self.n_train, run.p, cfg, run.rank, run.processes, initial_epoch,
                _adaptive_start(run.out if run.is_chief else None, run.p, initial_epoch, run.backend,
                                run.processes))

    def batches_of(self, index: np.ndarray) -> tf.data.Dataset:
        if self.weight is None:
            batch = lambda i: (tf.gather(self.train_t, i),) * 2  # noqa: E731
        else:   # Keras divides the weighted loss by the number of samples, not by the weights' sum;
            # shape (n, 1, ..., 1) so that it broadcasts over the voxels of MSLE's per-voxel losses
            ones = [1] * (len(self.train_t.shape) - 2)
            batch = lambda i: (tf.gather(self.train_t, i),) * 2 + (  # noqa: E731
                tf.fill(tf.concat([tf.shape(i), ones], 0), self.weight),)
        return (tf.data.Dataset.from_tensor_slices(index.astype(np.int32))
                .map(batch, num_parallel_calls=1, deterministic=True).prefetch(2))

    def whole_run(self) -> tf.data.Dataset:
        """One index stream for the whole run, so epochs follow each other without
        re-creating iterators."""
        p, cfg, run = self.run.p, self.cfg, self.run
        orders = [rules.shard_of_batch(rules.epoch_order(self.n_train, p, e, cfg.seed, cfg.epoch_definition),
                                       run.rank, run.processes, uneven=run.elastic)
                  for e in range(self.initial_epoch, cfg.max_epochs)]
        return self.batches_of(np.concatenate(orders))

    def fit(self, model, cbs: list, steps: int, record: callbacks.RunRecord) -> None:
        cfg = self.cfg
        if self.adaptive is None:
            model.fit(self.whole_run(), validation_data=self.val, epochs=cfg.max_epochs,
                      initial_epoch=self.initial_epoch, steps_per_epoch=steps, callbacks=cbs, verbose=0)
            return
        feed = self.adaptive
        while feed.epoch < cfg.max_epochs and record.status is None:
            model.fit(self.batches_of(feed.index()), validation_data=self.val, epochs=feed.epoch + 1,
                      initial_epoch=feed.epoch, steps_per_epoch=feed.steps(), callbacks=cbs, verbose=0)


def _callbacks(cfg: Config, run: _Launch, record: callbacks.RunRecord, feeds: _Feeds, steps: int, ckpt,
               state: Optional[dict], val_x, verbose: bool) -> tuple:
    """(the callbacks in their order, the Progress callback, the Checkpoint callback or None)."""
    p, out = run.p, run.out
    mode_cbs = []
    if feeds.adaptive is not None:
        mode_cbs = [callbacks.AdaptiveBatch(feeds.adaptive, cfg, run.say)]
    elif p.mode == "local":
        mode_cbs = [callbacks.LocalSync(steps, cfg.local_steps)]
    # Horovod: only rank 0 holds a resumed run's history, so every worker stops when it says so.
    agree = run.backend.allreduce_max if run.processes > 1 else float
    cbs = run.backend.callbacks(broadcast_after_first_step=p.mode != "local") + [callbacks.PolicyLR(p, steps)] \
        + mode_cbs + [callbacks.EpochRow(record), callbacks.Stopping(record, agree)]
    checkpoint = None
    if run.is_chief and out:
        # Horovod: rank 0 alone writes the run folder and the TensorBoard logs (after EpochRow
        # puts the lr in the logs)
        checkpoint = callbacks.Checkpoint(record, out, ckpt, state)
        cbs += [callbacks.MetricsLog(record, out), checkpoint]
        cbs += watch.tensorboard_callbacks(out, val_x, cfg.tensorboard_images_every)
    progress = callbacks.Progress(record, run.say, run.tell, bar=verbose and run.is_chief)
    return cbs + [progress], progress, checkpoint


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


def _make_default_data(path: str, run: _Launch) -> None:
    """A data set the shipped settings name (synth.DEFAULT_DATA) that does not exist yet is
    made: deterministic, written by rank 0 alone while the other workers wait."""
    recipe = synth.DEFAULT_DATA.get(path)
    need = float(run.is_chief and recipe is not None and not Path(path).exists())
    if run.processes > 1:       # Horovod: rank 0 decides, every worker learns it
        need = run.backend.allreduce_max(need)
    if not need:
        return
    if run.is_chief:
        n, n_val, seed = recipe
        run.tell(f"making the default data set {path}: {n} synthetic cubes, {n_val} of them for validation, "
                 f"seed {seed} (python -m deepdensity.data synth --out {path} --n {n} --val {n_val} --seed {seed})")
        synth.write_synthetic(path, n, n_val, seed, progress=run.say is print and sys.stderr.isatty())
    if run.processes > 1:       # Horovod: the others wait here until rank 0's file is complete
        run.backend.allreduce_max(0.0)


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
    kept = _keep_rows_up_to(out, initial_epoch)
    return [math.inf if m["val_loss"] is None else m["val_loss"] for m in kept]


def _keep_rows_up_to(out: Path, epoch: int) -> list:
    """Drop the rows of metrics.jsonl after `epoch` (counted from 1); returns the kept ones."""
    kept = [m for m in read_metrics(out) if m["epoch"] <= epoch]
    write_atomic(out / "metrics.jsonl", "".join(json.dumps(m) + "\n" for m in kept))
    return kept


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


