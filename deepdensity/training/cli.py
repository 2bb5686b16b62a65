"""Train the DeepDensity autoencoder under one of the paper's four scaling policies, or two beyond it.

    python train.py --mode strong --config configs/smoke.yaml             # one worker
    horovodrun -np 4 python train.py --mode weak --config configs/smoke.yaml --out runs/x
    python train.py --mode warmup --emulate-workers 8 --out runs/w8       # N=8's path, one process
    horovodrun -np 4 python train.py --mode adaptive     # batch grows with the gradient's noise
    horovodrun -np 4 python train.py --mode local --set local_steps=8     # average weights every 8 steps
    horovodrun -np 2 --min-np 1 --max-np 2 --host-discovery-script ./hosts.sh \
        python train.py --mode strong --elastic --set epoch_definition=global   # survives a lost worker

The number of workers comes from Horovod (or --emulate-workers), never from the config.
Exit status: 0 trained (whatever the result status), 2 bad input, 1 anything else.
"""

import argparse
import atexit
import errno
import os
import shutil
import sys
import time
from pathlib import Path

from deepdensity.config import Config, load, run_plan
from deepdensity.data.cubes import load_cubes
from deepdensity.launch import continuing
from deepdensity.scaling import policies, rules
from deepdensity.training import console, interrupts
from deepdensity.training.preflight import check_sizes
from deepdensity.training.runs import RUNNING_MARK, holds_nothing_to_resume, new_run_folder, runs_root
from deepdensity.utils.args import parser
from deepdensity.utils.errors import (
    Interrupted,
    UserError,
    command,
    launcher_prefix,
    launcher_rank,
    launcher_size,
    shown,
)


def main(argv=None) -> int:
    program = console.is_the_program()
    if program:
        console.start()
    code = _command(argv)
    if program:
        _end(code, interrupted=interrupts.pending() is not None)
    return code


def _end(code: int, interrupted: bool) -> None:
    """The training process's end: what the run keeps is on disk by now (written atomically,
    the checkpoint and the rows fsynced, the event file closed), so the exit handlers run
    (Horovod's orderly shutdown, which tells the other ranks; autograph's temporary files) and
    the interpreter's teardown does not. That teardown collects TensorFlow's objects: 1 s of a
    core at every run's end on the 2-core AVX2 machine (a smoke run, docs/performance.md), and
    1-5 s on a busy host, where horovodrun kills an interrupted rank 5 s after it passed the
    Ctrl-C on (exit 137). No exit handler runs while Horovod's init is left waiting for a rank
    that is gone (interrupts.stuck)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if not interrupts.stuck():
        atexit._run_exitfuncs()
    if interrupted:
        interrupts.stay_for_rank_0(code)  # Horovod: or mpirun may drop rank 0's line
    os._exit(code)


@command
def _command(argv) -> int:
    # Ctrl-C, SIGTERM and SIGHUP as interrupts.py takes them, first once the run's folder is known, so
    # that every interrupt ends with where the run stands; a program calling main (a test) gets
    # its own handlers back, a training process keeps these to its end (a second Ctrl-C while
    # it says where the run stands is only recorded)
    with interrupts.handling(restore=not console.is_the_program()):
        return _main(argv)


def _main(argv) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    if args.resume and not args.out:
        ap.error("--resume needs --out")
    if args.no_save and args.out:
        ap.error("--no-save and --out exclude each other")
    cfg = load(args.config, args.set)
    if not (args.out or args.no_save or args.elastic):
        # Horovod: rank 0 alone writes the run folder, so it alone names one; an elastic run's
        # ranks come and go, and it names its folder itself (--out).
        args.out = _default_out(args.mode, args.emulate_workers)
        if args.out and not args.quiet:
            print(f"run folder: {args.out} (--out to choose another, --no-save for none)")
        argv = [*(sys.argv[1:] if argv is None else argv), "--out", str(args.out)] if args.out else argv
    # the sizes first, before TensorFlow is imported: a run too big for this process is refused
    # in one line at once (preflight.py), a dry run included
    check_sizes(cfg, args.mode, args.emulate_workers, args.resume, args.elastic)
    if args.dry_run:
        if launcher_rank() == 0:  # Horovod: rank 0 alone prints
            print("\n".join(dry_run_lines(cfg, args.mode, args.emulate_workers, args.out, args.resume)))
        return 0
    _train(cfg, args, argv)
    return 0


def _parser() -> argparse.ArgumentParser:
    # the spelling the user typed: python train.py, or deepdensity train (python -m deepdensity train)
    ap = parser(__doc__, "train.py" if Path(sys.argv[0]).name == "train.py" else "deepdensity train")
    ap.add_argument(
        "--mode",
        required=True,
        choices=policies.names(),
        help="batch/lr policy: the paper's four (section IV), or one beyond it (docs/policies.md)",
    )
    ap.add_argument(
        "--config", help="YAML file of settings that differ from the defaults (configs/paper.yaml, configs/smoke.yaml)"
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting, e.g. --set base_lr=0.002 (repeatable)",
    )
    ap.add_argument(
        "--out",
        help="output folder (config.json, metrics.jsonl, result.json, weights.h5); "
        "default: a new runs/MODE-nN-DATE-TIME/ (runs/: $DEEPDENSITY_RUNS if set), "
        "printed at the start",
    )
    ap.add_argument("--no-save", action="store_true", help="write no run folder (a quick try)")
    ap.add_argument("--resume", action="store_true", help="continue the run in --out from its last epoch")
    ap.add_argument(
        "--emulate-workers",
        type=int,
        default=1,
        metavar="N",
        help="one process following the optimisation path of N Horovod workers",
    )
    ap.add_argument(
        "--elastic",
        action="store_true",
        help="go on when workers leave, under horovodrun --min-np/--max-np/--host-discovery-script "
        "(needs epoch_definition: global; docs/cluster.md)",
    )
    ap.add_argument("--quiet", action="store_true", help="no per-epoch output; the final status line is still printed")
    ap.add_argument(
        "--dry-run",
        action="store_true",
        help="print the settings, the policy's arithmetic, the data and the run folder; train nothing",
    )
    return ap


def _train(cfg, args, argv) -> None:
    """Train as the flags say; an interrupt ends in one line that says where the run stands."""
    # Horovod: rank 0 under mpirun says where the run stands even when its main thread is held
    # in C past mpirun's kill (interrupts.last_word)
    interrupts.last_word(lambda: where_to_continue(args.out, argv), args.out and Path(args.out) / RUNNING_MARK)
    try:
        interrupts.take_pending()  # a signal received so far is taken here
        with interrupts.opened():  # importing TensorFlow takes seconds: a signal cuts it short
            from deepdensity.training.trainer import train  # TensorFlow: --help, --dry-run and bad input need none
        train(
            cfg,
            args.mode,
            args.out,
            resume=args.resume,
            emulate_workers=args.emulate_workers,
            verbose=not args.quiet,
            elastic=args.elastic,
        )
    except BaseException as e:
        code = interrupts.settle(e)  # after a signal, whatever ended the run is its doing
        if code is not None:
            interrupted = Interrupted(code)
            interrupted.args = (where_to_continue(args.out, argv),)
            raise interrupted from None
        if not isinstance(e, OSError) or e.errno != errno.ENOSPC:
            raise
        free = shutil.disk_usage(args.out or ".").free / 2**20 if Path(args.out or ".").exists() else None
        raise UserError(
            f"{e.filename or args.out}: no space left on device"
            + (f" ({free:.0f} MB free there)" if free is not None else "")
            + "; the last complete checkpoint is kept: free some space; "
            + where_to_continue(args.out, argv).split("; ", 1)[-1]
        ) from None


def dry_run_lines(cfg, mode: str, emulated: int, out, resume: bool) -> list:
    """What a run would do, without starting Horovod or training: the settings that differ from the
    defaults (the paper's), the policy's arithmetic at the launcher's N, the data, the folder."""
    workers = _workers(emulated)
    p = run_plan(cfg, mode, workers, launcher_size())
    defaults = Config().to_dict()
    changed = {k: v for k, v in cfg.to_dict().items() if v != defaults.get(k)}
    lines = [
        "dry run: nothing is trained or written",
        "settings that differ from the defaults (the paper's): "
        + (", ".join(f"{k}={v!r}" for k, v in sorted(changed.items())) or "none"),
        p.describe(cfg),
    ]
    n_train = _training_cubes(cfg.data_path)
    if n_train is None:
        lines.append(f"data: {shown(cfg.data_path)} (not there yet: the shipped settings' data is made on first use)")
    else:
        used = min(n_train, cfg.max_train_cubes or n_train)
        steps = rules.steps_per_epoch(used, p, cfg.epoch_definition)
        lines.append(
            f"data: {shown(cfg.data_path)}, {n_train} training cubes"
            + (f" ({used} used: max_train_cubes)" if used < n_train else "")
            + f": {steps} steps an epoch "
            f"({cfg.epoch_definition} epochs), up to {cfg.max_epochs} epochs ({mode} N={workers})"
        )
    where = "nowhere (--no-save)" if out is None else f"{out} ({'resumed' if resume else 'new'})"
    return lines + [f"run folder: {where}"]


def _training_cubes(path: str):
    """How many training cubes a data file holds (None when it is not there yet)."""
    if not Path(path).is_file():
        return None
    return len(load_cubes(path).train)


def _default_out(mode: str, emulated: int):
    """A new run folder runs/MODE-nN-YYYYmmdd-HHMMSS for rank 0 (a suffix when taken); None elsewhere."""
    if launcher_rank() != 0:
        return None
    return new_run_folder(runs_root(), f"{mode}-n{_workers(emulated)}-{time.strftime('%Y%m%d-%H%M%S')}")


def _workers(emulated: int) -> int:
    """N: the launcher's processes, or --emulate-workers in one process."""
    return rules.workers(launcher_size(), emulated)


def where_to_continue(out, argv) -> str:
    """The epoch a run folder holds and the command that continues it; for a run stopped before
    its first checkpoint, the command that starts it again there (the same one: the folder
    it left is taken as empty, runs.holds_nothing_to_resume). A Slurm job that requeues itself
    (continuing.REQUEUE_JOB_ENV) says so instead of a command."""
    if not out:
        return "nothing was saved (no --out)"
    words = list(sys.argv[1:] if argv is None else argv)
    # Horovod: the run was saved by N ranks; it resumes under the same launch (a batch script
    # such as scripts/slurm/train.sbatch names itself in continuing.RELAUNCH_ENV)
    epoch = continuing.checkpointed_epoch(out)
    if epoch is not None:
        return continuing.at_checkpoint(out, epoch, words, launcher_prefix())
    if holds_nothing_to_resume(out):
        return f"no epoch finished, so {shown(out)} holds nothing to resume; " + continuing.start_again(
            words, launcher_prefix()
        )
    # an epoch's metrics row without its checkpoint: --resume starts it afresh
    launch = continuing.relaunch(launcher_prefix())
    return f"no epoch was checkpointed in {shown(out)}; " + continuing.goes_on(
        "starts it again there", f"start again there with: {launch}{continuing.resumed_words(words)}"
    )
