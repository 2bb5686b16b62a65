"""The study's runs as Slurm jobs (study/run/slurm_runner.py): the batch script a run's job
runs, waiting on a job through squeue's failures, a submission found again by its token, and
repro's checks and dry run under --executor slurm; against a running cluster,
tests/cluster/test_slurm.py."""

import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from deepdensity.launch.slurm_jobs import (
    COMMENT,
    SlurmOptions,
    Submitter,
    TrainJob,
    find,
    job_parameters,
)
from deepdensity.launch.slurm_queue import LEFT, QueueJob, QueueWatcher
from deepdensity.study.run.slurm_runner import SlurmRunner
from deepdensity.utils.errors import StudyError, UserError
from tests.launch.test_slurm_jobs import fake_command
from tests.support import ROOT


def test_the_job_script_is_submitits_with_the_studys_options(tmp_path):
    runner = SlurmRunner(
        tmp_path,
        tmp_path / "train.yaml",
        None,
        SlurmOptions(partition="p", gpus_per_task=1, sbatch=["--qos=short", "--exclusive"]),
        threads=2,
        study_name="default",
    )
    script = runner.batch_script("weak-n2-s0", 2)
    assert "#SBATCH --job-name=dd-default-weak-n2-s0\n" in script
    assert "#SBATCH --cpus-per-task=2\n" in script, "the runs' threads, one task: workers are emulated"
    assert "#SBATCH --partition=p\n" in script and "#SBATCH --gpus-per-task=1\n" in script
    assert "#SBATCH --qos=short\n" in script and "#SBATCH --exclusive\n" in script
    assert "#SBATCH --time=240\n" in script, "04:00:00 in minutes: submitit counts its time-outs from it"
    assert "#SBATCH --signal=USR2@90\n" in script, "submitit's warning before the time limit: checkpoint, requeue"
    assert "--no-requeue" not in script, "submitit requeues the job itself"
    assert f"#SBATCH --output={runner.jobs}/%j_0_log.out\n" in script
    assert f"#SBATCH --comment={COMMENT}TOKEN\n" in script
    # srun of Slurm 22.05 does not pass the job's --cpus-per-task on to the step
    assert (
        f"srun --unbuffered --output {runner.jobs}/%j_%t_log.out --error {runner.jobs}/%j_%t_log.err "
        f"--cpus-per-task=2 {sys.executable} -u -m submitit.core._submit {runner.jobs}\n" in script
    )
    (tmp_path / "job.sh").write_text(script)
    assert subprocess.run(["bash", "-n", str(tmp_path / "job.sh")]).returncode == 0
    launched = SlurmRunner(
        tmp_path, tmp_path / "train.yaml", "horovodrun -np {n}", SlurmOptions(), threads=1, study_name="default"
    ).batch_script("real-strong-n4-s0", 4)
    assert "#SBATCH --cpus-per-task=4\n" in launched, "a launcher's N processes, one thread each"


def test_a_squeue_that_fails_is_not_taken_for_an_ended_job(tmp_path, monkeypatch):
    """A controller restarting makes squeue fail for a while; the job must be waited for, not
    resubmitted. Slurm's commands are replaced here by scripts on PATH that answer as squeue
    does (the real ones are exercised in tests/cluster/test_slurm.py)."""
    import os

    from submitit.core.utils import JobPaths, cloudpickle_dump

    calls = tmp_path / "calls"
    # fails twice (controller away), then says the job has left the controller
    fake_command(
        tmp_path / "bin",
        "squeue",
        f"echo x >> {calls}\nn=$(wc -l < {calls})\n"
        "if [ $n -le 2 ]; then echo 'slurm_load_jobs error: Socket timed out' >&2; exit 1; fi\n"
        "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1\n",
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(QueueJob, "watcher", QueueWatcher(delay_s=0))
    runner = SlurmRunner(
        tmp_path, tmp_path / "train.yaml", None, SlurmOptions(poll_seconds=0.01), threads=1, study_name="t"
    )
    runner.jobs.mkdir()
    cloudpickle_dump(("success", 0), JobPaths(runner.jobs, job_id="5", task_id=0).result_pickle)
    assert runner._wait("5") == ((0, ""), LEFT), "waited through the failures, then read the job's result"
    assert len(calls.read_text().split()) == 3


def test_a_submission_the_last_driver_began_is_found_by_its_token(tmp_path, monkeypatch):
    import os

    fake_command(
        tmp_path / "bin",
        "squeue",
        f"echo '7|{COMMENT}other'; echo '9_0|{COMMENT}tok'; echo '9_1|{COMMENT}tok'; echo '11|{COMMENT}solo'\n",
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert (find("tok", 1), find("solo", 0), find("tok", 2), find("gone", 0)) == ("9_1", "11", "", "")
    fake_command(tmp_path / "bin", "squeue", "echo 'slurm_load_jobs error: Socket timed out' >&2; exit 1\n")
    assert find("tok", 1) is None, "squeue failing: cannot tell"
    runner = SlurmRunner(tmp_path, tmp_path / "train.yaml", None, SlurmOptions(), threads=1, study_name="t")
    record = {"attempts": 0, "jobs": [], "command": ["x"], "submitting": {"token": "tok", "index": 1, "attempt": 1}}
    with pytest.raises(StudyError, match="squeue does not answer"):
        runner._live_job(record, "r")


TINY = "data: {n: 96, val: 32, seed: 0}\nworkers: [1, 2]\nmodes: [strong, weak]\nseeds: [0, 1]\nbase_lr: 0.00105\n"


def test_repro_on_a_host_without_sbatch_refuses_in_one_line_before_anything(tmp_path):
    """The real command, with a PATH that has no sbatch or squeue: one `error:` line, exit 2,
    nothing on stdout (not even the plan), the runs folder not made, no data built, no clock."""
    preset, runs, empty = tmp_path / "tiny.yaml", tmp_path / "runs", tmp_path / "bin"
    preset.write_text(TINY)
    empty.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "deepdensity.repro",
            "--preset",
            str(preset),
            "--runs",
            str(runs),
            "--executor",
            "slurm",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": str(empty), "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)},
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith("error: --executor slurm: `sbatch` and `squeue` not found on PATH")
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "tiny.yaml"], "nothing written"


def fake_slurm(tmp_path, sbatch_exit: int, message: str = "") -> Path:
    """sbatch and squeue on PATH that log their arguments; sbatch answers as Slurm's does."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    (bin_dir / "squeue").write_text(
        f"#!/bin/sh\necho squeue \"$@\" >> {log}\necho 'slurm_load_jobs error: Invalid job id specified' >&2\nexit 1\n"
    )
    (bin_dir / "sbatch").write_text(
        f"#!/bin/sh\necho sbatch \"$@\" >> {log}\necho '{message}' >&2\nexit {sbatch_exit}\n"
    )
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 0\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return log


def test_repro_refuses_options_slurm_refuses_before_anything(tmp_path, monkeypatch, capsys):
    from deepdensity.study import repro

    (tmp_path / "tiny.yaml").write_text(TINY)
    calls = fake_slurm(tmp_path, 1, "sbatch: error: Batch job submission failed: Invalid partition name specified")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    code = repro.main(
        [
            "--preset",
            str(tmp_path / "tiny.yaml"),
            "--runs",
            str(tmp_path / "runs"),
            "--executor",
            "slurm",
            "--slurm",
            "partition=nope",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("error: --executor slurm: Slurm refuses a job with the study's options (--partition=nope")
    assert err.rstrip().endswith("Invalid partition name specified; nothing was written")
    assert "--test-only" in calls.read_text() and not (tmp_path / "runs").exists()


def test_repro_asks_slurm_for_its_largest_job_the_clocks_before_anything(tmp_path, monkeypatch, capsys):
    """A partition that takes 1-CPU jobs but no 4-CPU one would run every training job and wait
    forever for the clock's (horovodrun -np 4): the check before anything asks for the largest."""
    from deepdensity.study import repro

    (tmp_path / "tiny.yaml").write_text(TINY)
    calls = fake_slurm(tmp_path, 0)
    (tmp_path / "bin" / "sbatch").write_text(
        f'#!/bin/sh\necho sbatch "$@" >> {calls}\ncase "$*" in *--cpus-per-task=1\\ *) exit 0;; esac\n'
        "echo 'sbatch: error: CPU count per node can not be satisfied' >&2\nexit 1\n"
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    code = repro.main(
        ["--preset", str(tmp_path / "tiny.yaml"), "--runs", str(tmp_path / "runs"), "--executor", "slurm"]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "--cpus-per-task=4" in err and err.rstrip().endswith("can not be satisfied; nothing was written")
    assert not (tmp_path / "runs").exists()
    # with the clock's timing.json held, the largest job is a run's (1 CPU), and the check passes
    runs = tmp_path / "held"
    runs.mkdir()
    from deepdensity.study.run.timing import CLOCK_VERSION

    (runs / "timing.json").write_text(json.dumps({"clock_version": CLOCK_VERSION}))
    assert (
        repro.main(["--preset", str(tmp_path / "tiny.yaml"), "--runs", str(runs), "--executor", "slurm", "--dry-run"])
        == 0
    )
    assert "  Slurm here: sbatch and squeue answer" in capsys.readouterr().out
    assert (
        calls.read_text().splitlines()[-1].startswith("sbatch --test-only ")
        and "--cpus-per-task=1 " in calls.read_text().splitlines()[-1]
    )


def test_a_slurm_dry_run_shows_the_jobs_and_their_cost_and_submits_nothing(tmp_path, monkeypatch, capsys):
    from deepdensity.study import repro

    (tmp_path / "tiny.yaml").write_text(TINY + "real_strong: [2]\n")
    calls = fake_slurm(tmp_path, 0, "sbatch: Job 3 to start at 2026-11-26T10:00:00 using 1 processors")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    runs = tmp_path / "runs"
    assert (
        repro.main(
            [
                "--preset",
                str(tmp_path / "tiny.yaml"),
                "--runs",
                str(runs),
                "--executor",
                "slurm",
                "--slurm",
                "partition=short",
                "--slurm",
                "account=proj42",
                "--slurm",
                "time=02:00:00",
                "--dry-run",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    jobs = next(line for line in out.splitlines() if line.startswith("  Slurm jobs: "))
    assert jobs.startswith("  Slurm jobs: 7 runs, one batch job each")  # 2 seeds x (seq, weak N = 2, 2 x eta) + 1
    assert "partition short, account proj42" in jobs and "each 02:00:00 at most, 1 CPU(s)" in jobs
    assert "horovodrun -np 2 inside one job each, on one node (2 CPUs)" in jobs
    # 7 runs' jobs of 1 CPU (one of them 2: horovodrun -np 2) and the clock's job of 4, 2 h each
    assert "  Slurm cost: at most 24 CPU-hours reserved (8 jobs at their 02:00:00 limit" in out
    assert "the real strong-scaling jobs 2; the clock's job 4)" in out
    assert "strong scaling for real: horovodrun -np 2 as one Slurm job each" in out
    assert "1. the clock: training steps and allreduces timed alone in one Slurm job on a compute node" in out
    assert "  Slurm: on this host, not as jobs: the data set; and the driver itself" in out, "the clock is a job"
    assert (
        "  Slurm clock job: the clock (timing.json: one-process epochs and horovodrun -np 2 and 4, about 8-12 "
        "min) as one batch job dd-tiny-clock on one node, 4 CPUs, 02:00:00 at most, submitted first" in out
    )
    for line in (
        "#SBATCH --partition=short",
        "#SBATCH --account=proj42",
        "#SBATCH --time=120",
        "#SBATCH --cpus-per-task=1",
        f"#SBATCH --output={runs}/.slurm/%j_0_log.out",
        "#SBATCH --job-name=dd-tiny-seq-s0",
        "#SBATCH --signal=USR2@90",
    ):
        assert f"      {line}\n" in out
    assert (
        f"  Slurm job's run (submitit's {runs}/.slurm/JOBID_submitted.pkl): {sys.executable} -m deepdensity "
        f"train --mode strong --config {runs}/train.yaml --out {runs}/seq-s0 --quiet --set ..." in out
    )
    assert "  Slurm here: sbatch and squeue answer" in out
    assert all("--test-only" in c for c in calls.read_text().splitlines() if c.startswith("sbatch")), (
        "nothing submitted"
    )
    assert not runs.exists(), "a dry run writes nothing"
    # without sbatch the dry run still shows the jobs, says this host cannot submit them, and
    # ends as the study would: exit 2, the fix named
    monkeypatch.setenv("PATH", "/nonexistent")
    assert (
        repro.main(["--preset", str(tmp_path / "tiny.yaml"), "--runs", str(runs), "--executor", "slurm", "--dry-run"])
        == 2
    )
    said = capsys.readouterr()
    assert "  Slurm here: no, `sbatch` and `squeue` not found on PATH" in said.out
    assert (
        said.err.startswith(
            "error: --executor slurm: `sbatch` and `squeue` not found on PATH; run the study on a Slurm login node"
        )
        and said.err.count("\n") == 1
    ), said.err
    assert said.err.rstrip().endswith("(without --executor slurm it trains on this host)") and not runs.exists()


def test_a_submission_slurm_refuses_is_one_line_for_every_run_waiting_on_it(tmp_path, monkeypatch):
    import os

    fake_command(
        tmp_path / "bin", "sbatch", "echo 'sbatch: error: Batch job submission failed: Invalid account' >&2\nexit 1\n"
    )
    fake_command(tmp_path / "bin", "srun", "exit 0\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    submitter = Submitter(tmp_path / "jobs", "dd-t", retries=2, max_jobs=8, window=0.2)
    errors = []

    def ask(name: str) -> None:
        try:
            submitter.submit(name, TrainJob(["true"], {}), job_parameters(SlurmOptions(), 1, 1.0), lambda *_: None)
        except UserError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=ask, args=(f"run{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == ["submitting 2 job(s) failed: sbatch: error: Batch job submission failed: Invalid account"] * 2


def test_a_slurm_dry_run_gives_its_jobs_and_cost_for_the_missing_runs_the_plan_counts(tmp_path, monkeypatch, capsys):
    """The plan's lines of runs to train and its Slurm lines give one count (issue 55): the
    default preset, whose committed ledger holds every run of both its looks (the second look's
    96: six cells, 16 seeds each; docs/decision-rules.md), has none to train and says so in
    both, reserving nothing for them; a tiny study's 3 runs to train are the count its Slurm
    jobs and their cost are given for."""
    from deepdensity.study import repro
    from deepdensity.study.core import ledger
    from deepdensity.study.core.preset import load_study
    from deepdensity.study.run.slurm_runner import plan_lines
    from tests.support import ROOT

    fake_slurm(tmp_path, 0, "sbatch: Job 3 to start at 2026-11-26T10:00:00 using 1 processors")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    assert (
        repro.main(["--runs", str(tmp_path / "runs"), "--executor", "slurm", "--slurm", "time=02:00:00", "--dry-run"])
        == 0
    )
    out = capsys.readouterr().out
    # the second look's cells' seeds past their first look's, every one in the committed ledger
    held = {
        e["run"]
        for e in ledger.read_entries(ROOT / "reports" / "ledger.jsonl")
        if re.fullmatch(
            r"(weak-n4|linear-n2|linear-n4|warmup-n4|warmup-n8)-s(8|9|1\d|2[0-3])|seq-2eta-s(1[1-9]|2[0-6])", e["run"]
        )
    }
    assert len(held) == 96
    assert "  missing runs: none, the ledger holds every run it is asked for; " in out
    assert "second look's runs to train" not in out
    assert "  Slurm jobs: none of the runs to train above (there are none); only a run not counted there" in out
    assert "  Slurm cost: the runs to train above: none, nothing reserved for them; every run of the " in out
    (tmp_path / "tiny.yaml").write_text(TINY)
    _, study = load_study(str(tmp_path / "tiny.yaml"))
    lines = plan_lines(
        "tiny", study, SlurmOptions.parse(None, ["time=02:00:00"]), tmp_path / "runs", None, False, None, None, 3
    )
    assert any(
        line.startswith("  Slurm jobs: the 3 run(s) to train above, and any run not counted there") for line in lines
    )
    assert any(
        line.startswith("  Slurm cost: the 3 run(s) to train above: at most 6 CPU-hours reserved; every run")
        for line in lines
    ), lines
