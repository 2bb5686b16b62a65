"""`make repro`: the paper's scaling study (sections VI-VII), run and set next to the paper.

    python -m deepdensity.repro --preset default            # emulated workers + speedup model
    python -m deepdensity.repro --preset paper --runner 'horovodrun -np {n} -H host1:4,host2:4'
    python -m deepdensity.repro --preset default --lr-sweep  # only the edge of stability

How a cell (mode, N) is obtained without N devices:
  convergence  N Horovod workers average their gradients, so their path is that of one
               process with the same global batch, lr schedule and data order:
               `train.py --emulate-workers N` (tests check it against real horovodrun).
               Strong scaling's global batch and lr do not depend on N, so its path is the
               sequential one (a test checks horovodrun -np 2 against one process): its
               epochs are read off the sequential run's per-pass validation losses at its
               own epoch ends (with per_worker epochs, epoch e ends at pass N*(e+1)).
  base lr      by default the sequential model's edge of stability on this data, the
               largest lr on a sqrt(2) grid that converges on every seed, below the
               collapse level (paper section VI; docs/protocol.md, "The learning-rate premise").
  time         the paper's speedup model for every N, built from parts measured here
               (per-step and per-sample compute, evaluation, the allreduce of this model's
               gradients at N = 2, 4 as a training step pays it) and calibrated on a real one-process epoch; checked
               against real horovodrun -np 2 and -np 4 epochs (timing.py).
  seeds        the preset's first seeds in every cell, then one more at a time to every
               cell below max_seeds, whatever its outcomes, within the preset's time budget
               (study_plan.py, design.py).
With --runner every cell is a real multi-worker run and its measured time to target is used.
Finished runs are kept under runs/study-PRESET and skipped when the study is run again.
"""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import sys
from pathlib import Path
from typing import Optional

from deepdensity.config import load, read_mapping
from deepdensity.study.core.clocks import model_epoch
from deepdensity.study.core.ledger import LEDGER_FILE, read_entries
from deepdensity.study.core.preset import FIG1_PREFIX, Study, figure1_run, load_study
from deepdensity.study.plan.invocation import invocation_lines
from deepdensity.study.plan.missing import missing_lines, missing_runs
from deepdensity.study.plan.study_plan import plan_lines
from deepdensity.study.report.tensorboard_view import write_view
from deepdensity.study.repro_checks import check_runner, check_stack_check, slurm_clients
from deepdensity.study.rerender import StudyEnd, holds_a_study_record, of_study
from deepdensity.study.run import slurm_runner
from deepdensity.study.run.beyond import default_study_eta
from deepdensity.study.run.design import (
    run_first_seeds,
    run_more_seeds,
    stack_check_prefix,
    stall_check,
    study_units,
)
from deepdensity.study.run.outcomes import Book, study_cells
from deepdensity.study.run.runner import unless_not_held
from deepdensity.study.run.second_look import run_second_look
from deepdensity.study.run.sequential import calibrated_target, edge_of_stability, sequential_path
from deepdensity.study.run.session import (
    COMMITTED_REPORTS,
    Protocol,
    StudyOptions,
    StudyRun,
    ledgers_to_read,
    parallel_runs,
    publish,
    reports_folder,
    start_study,
    write_ledger_and_publish,
)
from deepdensity.study.run.timing import held_timing, study_clock
from deepdensity.training import console
from deepdensity.training.runs import locked, read_json, runs_root
from deepdensity.utils.args import parser
from deepdensity.utils.errors import EXIT_SIGINT, Interrupted, StudyError, command
from deepdensity.utils.files import check_own_folder, json_with, mark_folder, read_json_object
from deepdensity.utils.machine import cpu_flags


@command(os_hint="pass other --runs / --out folders")
def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # progress lines must show up while runs go on
    if _is_the_program():
        # the driver's own TensorFlow (Fig. 1's inference) logs through an absl no setting reaches
        console.filter_native_logs()
    name, study = load_study(args.preset)
    runs = Path(args.runs or runs_root() / f"study-{name}")
    out = reports_folder(name, args.out, runs)
    check_own_folder(runs, "--runs", "runs", runs_before_marks)
    check_own_folder(out, "--out", "reports", holds_a_study_record)
    options = _options(args)
    check_runner(options.runner)
    stack = check_stack_check(options)
    slurm_check = slurm_clients(study, options, runs)
    _print_plan(name, study, options, runs, out, slurm_check, stack)
    if options.dry_run and slurm_check and slurm_check[1]:  # the plan above, then the refusal a run would meet
        raise StudyError(
            f"--executor slurm: {slurm_check[1]}; the study would refuse to start here, so this dry "
            f"run exits 2 (without --executor slurm it trains on this host)"
        )
    if options.dry_run:
        return 0
    # One study per runs folder: a second one would train the same run folders twice.
    with locked(runs, holder_is="another study", instead="pass another --runs folder"):
        mark_folder(runs, "runs")
        try:
            return run_study(name, study, options, runs, out)
        except KeyboardInterrupt as e:
            raise Interrupted(
                getattr(e, "code", EXIT_SIGINT),
                f"finished runs are kept in {runs} and reused, {out} is unchanged; continue with {_invocation(argv)}",
            ) from None


def _parser() -> argparse.ArgumentParser:
    """The command's flags (--help shows the module's docstring above them)."""
    ap = parser(__doc__, "python -m deepdensity.repro")
    ap.add_argument("--preset", default="default", help="deepdensity/study/presets/NAME.yaml, or a path")
    ap.add_argument(
        "--runner",
        default="",
        help="launcher with {n}, e.g. 'horovodrun -np {n} -H ...'; none: one process emulates N workers",
    )
    ap.add_argument(
        "--lr-sweep", action="store_true", help="only find the sequential model's edge of stability (lr_sweep.json)"
    )
    ap.add_argument("--runs", help="runs folder (default: runs/study-PRESET; runs/: $DEEPDENSITY_RUNS if set)")
    ap.add_argument(
        "--out",
        "--reports",
        dest="out",
        help="where the reports go (default: RUNS/reports); `--out reports` updates the committed "
        "reports/ (reports/PRESET/ for a preset other than default), all at once at the end",
    )
    ap.add_argument(
        "--compare-with",
        help="for adaptive/local: the default study's reports folder, whose weak, linear and warmup "
        "rows the report shows beside them (default: runs/study-default/reports if it holds a "
        "study, else reports/)",
    )
    ap.add_argument(
        "--ledger",
        action="append",
        default=[],
        metavar="FILE",
        help="another ledger of finished runs to reuse (e.g. another machine's ledger.jsonl), repeatable; "
        "the runs folder's own and the committed reports/ledger.jsonl are always read",
    )
    ap.add_argument(
        "--no-train",
        action="store_true",
        help="train nothing: the reports from the runs the ledger and the runs folder hold (and the "
        "runs folder's clock, timing.json); each cell's missing seeds are listed with their cost",
    )
    ap.add_argument("--dry-run", action="store_true", help="print the plan (stages, runs, time) and stop")
    _where_runs_train(ap)
    return ap


def _where_runs_train(ap: argparse.ArgumentParser) -> None:
    """The flags of where and on which stack the runs train: --executor with its Slurm options,
    and --stack-check's other venv."""
    ap.add_argument(
        "--executor",
        choices=("local", "slurm"),
        default="local",
        help="where the runs train: here, side by side, or as Slurm batch jobs (docs/cluster.md)",
    )
    ap.add_argument(
        "--slurm",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Slurm option over the preset's `slurm:` (partition, account, time, cpus_per_task, "
        "gpus_per_task, max_jobs, retries, poll_seconds, sbatch), repeatable",
    )
    ap.add_argument(
        "--stack-check",
        metavar="VENV",
        default="",
        help="stability across stacks: seed 0 of every trained cell again with VENV's Python, TensorFlow "
        "and Keras (e.g. .venv-paper or .venv, made by make install STACK=...), every claim judged "
        "again on those runs, reported beside the instruction-set check (docs/install.md)",
    )


def _is_the_program() -> bool:
    """Is this process the study's command (`deepdensity repro`, `python -m deepdensity.repro`),
    whose stderr is its own, rather than a caller of main() such as a test?"""
    return console.is_the_program() or Path(sys.argv[0] if sys.argv else "").name == "repro.py"


def _options(args) -> StudyOptions:
    """The options the library reads, from the parsed flags: --compare-with defaults to the
    default study's reports (_default_study_reports)."""
    return StudyOptions(
        runner=args.runner,
        lr_sweep=args.lr_sweep,
        no_train=args.no_train,
        compare_with=args.compare_with or str(_default_study_reports()),
        ledgers=tuple(args.ledger),
        out=args.out,
        dry_run=args.dry_run,
        executor=args.executor,
        slurm=tuple(args.slurm),
        stack_check=args.stack_check,
    )


def _print_plan(
    name: str,
    study: Study,
    options: StudyOptions,
    runs: Path,
    out: Path,
    slurm_check: Optional[tuple],
    stack: Optional[dict] = None,
) -> None:
    """The plan: first what this invocation trains, reuses and takes (invocation.py), then the
    stages, the runs the ledger does not hold and their cost, the Slurm jobs."""
    earlier = _earlier_record(name, out)
    entries = [e for path in [runs / LEDGER_FILE, *ledgers_to_read(name, options, runs)] for e in read_entries(path)]
    prefix = stack_check_prefix(stack["tensorflow"]) if stack else ""
    for line in invocation_lines(
        study, entries, earlier, parallel_runs(study), runs, prefix, cpu_flags(), options.no_train
    ):
        print(line)
    if stack:
        print(
            f"stack check: seed 0 of every trained cell again on TensorFlow {stack['tensorflow']}, {stack['keras']} "
            f"({options.stack_check}), after the study's own runs"
        )
    for line in plan_lines(name, study, options.runner, str(runs), str(out), earlier, executor=options.executor):
        print(line)
    for line in missing_lines(study, entries, earlier, parallel_runs(study)):
        print(line)
    if slurm_check is not None:
        slurm_options, unavailable = slurm_check
        missing = missing_runs(study, entries, earlier)
        for line in slurm_runner.plan_lines(
            name,
            study,
            slurm_options,
            runs,
            options.runner,
            options.no_train,
            unavailable,
            earlier,
            None if missing is None else len(missing),
        ):
            print(line)


def runs_before_marks(runs: Path) -> bool:
    """Is `runs` a study's runs folder made before folders were marked? Its train.yaml, which
    every study writes as it starts, holds the study's fixed run settings; or its clock's
    timing.json, its clock version."""
    try:
        settings = read_mapping(runs / "train.yaml", "study settings", ValueError)
    except ValueError:
        settings = {}
    return {"intra_op_threads", "deterministic", "data_path"} <= set(settings) or json_with(
        runs / "timing.json", ("clock_version",)
    )


def _default_study_reports() -> Path:
    """The default study's reports a beyond study compares with: this checkout's own default
    study when it ran one, else the committed reports."""
    own = runs_root() / "study-default" / "reports"
    return own if (own / "study.json").is_file() else COMMITTED_REPORTS


def _earlier_record(name: str, out: Path) -> Optional[dict]:
    """The last record of this preset, for the plan's time: the output folder's, else the
    committed one's; None when neither is readable."""
    for folder in (out, reports_folder(name, str(COMMITTED_REPORTS), out)):
        record = read_json_object(folder / "study.json")
        if record is not None and record.get("preset") == name:
            return record
    return None


def _invocation(argv) -> str:
    """The command that continues an interrupted study (the same one; under make, its target)."""
    args = sys.argv[1:] if argv is None else list(argv)
    command = shlex.join(["python", "-m", "deepdensity.repro", *args])
    target = os.environ.get("DEEPDENSITY_MAKE_TARGET")  # set by the Makefile's study targets
    if target:
        return f"the same `make {target}` command (it ran `{command}`)"
    return f"`{command}`"


def run_study(name: str, study: Study, options: StudyOptions, runs: Path, out: Path) -> int:
    """The study of a preset, from the edge of stability to the reports: rendered into a
    staging folder in the runs folder and published into `out` only when complete, so that
    an interrupted study leaves `out` as it was."""
    s = start_study(name, study, options, runs)
    cfg = load(str(s.train_yaml))
    # 0. The clock first, alone on the host (under Slurm: alone in one job on a compute node):
    #    the runs that follow share it side by side.
    timing = study_clock(s, cfg) if not options.no_train else held_timing(s.root)
    # 1. The base lr: the sequential model's edge of stability (paper section VI), or fixed.
    eta, sweep = _base_lr(s, study, options, cfg)
    if options.lr_sweep:
        publish(s.out, out)
        print(f"lr_sweep.json written to {out}")
        return 0
    cfg = load(str(s.train_yaml), [f"base_lr={eta!r}"])
    # 2. The sequential runs of the first seeds; the first calibrates the target (paper:
    #    ~100 epochs). E + max(N) passes, so that every strong-scaling N has an epoch end past E.
    seq_max_epochs = study.calibration_epochs + max(study.workers)
    seeds = study.sequential_seeds()
    seq = s.runner.run_all(
        [functools.partial(sequential_path, s.runner, sd, eta, seq_max_epochs) for sd in seeds],
        label="sequential runs",
    )
    #    Fig. 1 draws the first seed's weights; where its run came from the ledger (no weights),
    #    it is trained again in a folder of its own, so that the cells keep the ledger's path.
    if not options.no_train and not (figure1_run(s.root, seeds[0]) / "weights.h5").is_file():
        sequential_path(s.runner, seeds[0], eta, seq_max_epochs, FIG1_PREFIX, need_weights=True)
    target, max_epochs, calibration = calibrated_target(s, study, eta, seq[0])
    proto = Protocol(eta, target, max_epochs, seq_max_epochs, cfg, s.collapse_loss, calibration)
    # 3. Every cell at the first seeds; the second look's seeds to the cells the first left open
    #    (docs/decision-rules.md), or more seeds to cells below max_seeds (study_plan.py).
    book = Book()
    units = study_units(s, proto, real_strong=bool(options.runner), book=book, double_eta=study.doubles_eta())
    run_first_seeds(s.runner, book, units, study.seeds, study.sequential_seeds())
    if study.second_look_seeds:
        print(f"second look: {run_second_look(s.runner, book, units, study)} ({s.elapsed()} so far)")
    modelled = functools.partial(
        model_epoch,
        timing,
        n_train=s.n_train,
        n_val=s.n_val,
        base_batch=cfg.batch_size,
        definition=cfg.epoch_definition,
    )

    stopped = _more_seeds(s, book, units, options.no_train)
    checked = unless_not_held(lambda: stall_check(s, proto, book), None) if study.stall_check else None
    cells = study_cells(study, book, s.root, options.runner, timing, s.n_val, modelled, proto.target)
    # 4. The record and the reports, as the study's kind makes them (rerender.py).
    of_study(study).finish(StudyEnd(s, proto, book, cells, timing, modelled, stopped, sweep, checked, options))
    write_ledger_and_publish(s, out)
    print(f"reports written to {out} ({s.elapsed()} this invocation)")
    _tensorboard_view(runs, out)
    return 0


def _base_lr(s: StudyRun, study: Study, options: StudyOptions, cfg) -> tuple:
    """(eta, the lr search or None): the sequential model's edge of stability, searched where the
    preset asks for it or under --lr-sweep; else the default study's eta, or the preset's own."""
    if study.base_lr == "edge" or options.lr_sweep:
        return edge_of_stability(s.runner, study, cfg, s.collapse_loss, s.out)
    if study.base_lr == "default_study":
        return default_study_eta(Path(options.compare_with)), None
    return float(study.base_lr), None


def _more_seeds(s: StudyRun, book: Book, units: dict, no_train: bool) -> str:
    """More seeds within the preset's budget, if it has one; returns why the seeds stopped."""
    if no_train:
        return "--no-train: the runs the ledger held, no more"
    stopped = (
        run_more_seeds(s.runner, book, units, s.study.max_seeds, s.deadline())
        if s.study.budget_minutes
        else "no time budget in the preset"
    )
    print(f"seeds: the sequential design stopped at {stopped} ({s.elapsed()} so far)")
    return stopped


def _tensorboard_view(runs: Path, out: Path) -> None:
    """The study in TensorBoard, one run per seed and a summary run (tensorboard_view.py)."""
    logdir = write_view(read_json(out / "study.json", "study's record"), runs, runs / "tensorboard")
    print(f"watch it: tensorboard --logdir {logdir}")


if __name__ == "__main__":
    sys.exit(main())
