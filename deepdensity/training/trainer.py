"""One training run under a scaling policy, on 1..N Horovod workers: the steps a run takes.

Everything a run leaves behind is in its output folder, written by rank 0 only and each file
atomically: config.json, metrics.jsonl, result.json, weights.h5, and a checkpoint after every
epoch so that `--resume` continues a killed run. The pieces: launch.py (who this process is
and the policy's plan), run_folder.py (the folder and resume), resuming.py (a resume's checks),
run_data.py (the data set), run_config.py (config.json), feeds.py (the data as tf.data), fit.py
(the fit loop and its callbacks), elastic.py (a changing N), agree.py (what ranks agree on).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

import tensorflow as tf

from deepdensity.config import Config, ConfigError
from deepdensity.data.cubes import DataError
from deepdensity.model.autoencoder import build_model, make_adam
from deepdensity.scaling import rules
from deepdensity.training import callbacks, dist, interrupts, run_folder, runs
from deepdensity.training.elastic import fit_elastic
from deepdensity.training.fit import Training, fit
from deepdensity.training.kit import PolicyKit
from deepdensity.training.launch import Launch, launch
from deepdensity.training.resuming import check_same_data, open_folder, resumed_line
from deepdensity.training.run_config import run_config
from deepdensity.training.run_data import make_default_data, training_data
from deepdensity.training.run_folder import RunError
from deepdensity.training.runs import DamagedRun, read_json, read_metrics
from deepdensity.utils.errors import shown
from deepdensity.utils.files import remove_if_unused

__all__ = ["train", "RunError"]


def train(
    cfg: Config,
    mode: str,
    out_dir: Optional[str] = None,
    resume: bool = False,
    emulate_workers: int = 1,
    verbose: bool = True,
    elastic: bool = False,
) -> dict:
    """Train until the target, the epoch cap or divergence; returns result.json's content.

    A run refused before it wrote anything (bad data, a resume that does not match) leaves
    no empty output folder behind, nor the parents it made for it. `elastic`: under an elastic horovodrun, go
    on when workers
    leave (policies.elastic_problem says which runs can)."""
    run = launch(cfg, mode, out_dir, emulate_workers, verbose, elastic)
    made = _missing_folders(run.out)
    # rank 0 alone writes the run folder, so it alone holds its lock and alone removes the
    # folder it made for a run refused before it wrote anything (two ranks removing it raced:
    # the second one's rmdir failed with "No such file or directory" instead of the real error)
    with contextlib.ExitStack() as lock:
        run.ranks.chief_check(lambda: lock.enter_context(runs.locked(run.out)), run.writes)
        if run.writes:
            lock.callback(run_folder.ended, run.out)
        try:
            return _train_in(cfg, run, resume, emulate_workers, verbose)
        except (ConfigError, DataError, RunError, DamagedRun):
            if run.is_chief:
                run_folder.ended(run.out)
                for folder in made:  # the run folder first, then the parents made for it
                    remove_if_unused(folder)
            raise


def _missing_folders(out: Optional[Path]) -> list:
    """The folders a run in `out` will make (`out` and its missing parents), innermost first."""
    missing = []
    while out is not None and not out.exists() and out != out.parent:
        missing.append(out)
        out = out.parent
    return missing


def _train_in(cfg: Config, run: Launch, resume: bool, emulate_workers: int, verbose: bool) -> dict:
    state = open_folder(cfg, run, resume)
    if run_folder.finished(state, cfg, run):
        run.say(f"{run.out} holds a finished run; nothing to do (see {run.out}/result.json)")
        return read_json(run.out / "result.json", "finished run's result") if run.is_chief else {}
    make_default_data(cfg.data_path, run)
    # a Ctrl-C or SIGTERM is taken between the steps of the start (interrupts.py)
    interrupts.take_pending()
    cubes, train_x, val_x, steps = _data_and_steps(cfg, run, emulate_workers)
    interrupts.take_pending()
    kit = PolicyKit(cfg, run.backend)  # what the policy's hooks build, for the whole run
    model, optimizer = _compiled_model(cfg, run, kit, cubes, steps)
    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer)
    fingerprint = runs.data_fingerprint(cfg.data_path) if run.writes else None
    run.ranks.chief_check(lambda: check_same_data(cfg, run.out, len(train_x), len(val_x), fingerprint), bool(state))
    initial_epoch, elapsed_before = run_folder.resume_point(ckpt, run, state)
    interrupts.take_pending()
    # Horovod: start every worker from rank 0's weights and optimizer state.
    run.backend.broadcast_state(model, optimizer)
    run.p.policy.start(model)

    _describe(run, cfg, cubes, len(train_x), len(val_x), steps, model.grad_slices)
    if initial_epoch > cfg.max_epochs:  # before the folder takes the resume's settings
        raise RunError(
            f"the checkpoint in {run.out} is at epoch {initial_epoch}, max_epochs is "
            f"{cfg.max_epochs}; raise max_epochs to train further"
        )
    val_history = (
        run_folder.start_files(
            run.out, initial_epoch, run_config(cfg, run, emulate_workers, steps, len(train_x), len(val_x), fingerprint)
        )
        if run.writes
        else []
    )
    if initial_epoch and run.writes:
        run.say(resumed_line(run.out, initial_epoch, state, len(val_history)))
    record = callbacks.RunRecord(run.p, cfg, steps, elapsed_before, val_history)
    if initial_epoch == cfg.max_epochs:
        # stopped after its last epoch's checkpoint and before its weights: finish it as it would have
        run_folder.last_epoch_again(record, read_metrics(run.out) if run.writes else [])
        run.tell(record.final_line())
        return run_folder.save_run(model, record, run, state)
    t = Training(
        cfg=cfg,
        run=run,
        model=model,
        record=record,
        data=(train_x, val_x),
        ckpt=ckpt,
        steps=steps,
        kit=kit,
        verbose=verbose,
    )
    return _fit_and_save(t, initial_epoch, state)


def _data_and_steps(cfg: Config, run: Launch, emulate_workers: int) -> tuple:
    """(cubes file, training cubes, validation cubes, steps per epoch), once every rank is known
    to run the same settings on the same data."""
    # the data by its content, not its path (hosts may keep their copies in other places)
    run.ranks.require_same(
        {
            **{k: v for k, v in cfg.to_dict().items() if k != "data_path"},
            "mode": run.p.mode,
            "emulate_workers": emulate_workers,
            "data_fingerprint": runs.data_fingerprint(cfg.data_path) if Path(cfg.data_path).is_file() else None,
        }
    )
    cubes, train_x, val_x = training_data(cfg, run.say)
    try:
        steps = rules.steps_per_epoch(len(train_x), run.p, cfg.epoch_definition)
    except rules.PlanError as e:
        raise ConfigError(f"{shown(cfg.data_path)}: {e}") from None
    return cubes, train_x, val_x, steps


def _fit_and_save(t: Training, initial_epoch: int, state: Optional[dict]) -> dict:
    """Fit from `initial_epoch` to the run's end (elastic: across changes of N), then save the
    weights and the result; returns result.json's content."""
    interrupts.take_pending()
    run = t.run
    if run.elastic:
        run, saved = fit_elastic(t, initial_epoch)
    else:
        saved = fit(t, initial_epoch, state)
    return run_folder.save_run(t.model, t.record, run, saved)


def _compiled_model(cfg: Config, run: Launch, kit: PolicyKit, cubes, steps: int) -> tuple:
    """(model with the training step its policy asks of `kit`, optimizer), compiled, optimizer
    slots made."""

    if cfg.deterministic:
        tf.config.experimental.enable_op_determinism()
    # Same seed on every worker: identical initial weights, so the first step is already
    # the sequential model's first step (the broadcast only guarantees it).
    tf.keras.utils.set_random_seed(cfg.seed)
    policy = run.p.policy
    model = policy.training_model(kit, build_model(cfg, cubes.grid_size, cubes.ndim), run.p)
    optimizer = make_adam(cfg, run.p.lr_at(0, 0, steps))
    if policy.averages_in_optimizer:
        # Horovod: wrap the optimizer so gradients are averaged over workers (the policies
        # beyond the paper average by hand in their training step, model/steps.py).
        optimizer = run.backend.wrap_optimizer(optimizer, cfg.allreduce_groups)
    model.compile(
        optimizer=optimizer, loss=tf.keras.losses.MeanSquaredLogarithmicError(), jit_compile=cfg.xla == "step"
    )
    dist.create_slots(model, optimizer)
    return model, optimizer


def _describe(run: Launch, cfg: Config, cubes, n_train: int, n_val: int, steps: int, grad_slices: int) -> None:
    """The run's arithmetic, printed at start-up (rank 0)."""
    p, say = run.p, run.say
    say(p.describe(cfg, steps))
    held = len(cubes.train)
    used = f"  ({held} in the file; max_train_cubes = {cfg.max_train_cubes})" if n_train < held else ""
    say(f"data: {shown(cfg.data_path)}  train {n_train} cubes{used}  val {n_val}  cube {cubes.grid_size}^{cubes.ndim}")
    say(
        f"epoch ({cfg.epoch_definition}): {steps} steps of {p.global_batch} = "
        f"{steps * p.global_batch / rules.pass_length(n_train, p.base_batch):g} pass(es) of "
        f"{rules.pass_length(n_train, p.base_batch)} cubes"
    )
    say(
        f"threads per process: {run.threads}  Horovod cycle {dist.cycle_ms_in_effect():g} ms  "
        f"target val_loss {cfg.target_loss:g}  cap {cfg.max_epochs} epochs"
    )
    if grad_slices > 1:
        say(
            f"each step averages the gradients of {grad_slices} slices of "
            f"{p.per_process_batch // grad_slices} (max_pass_batch {cfg.max_pass_batch})"
        )
