"""A training command as a Slurm job (launch/slurm_jobs.py): what it asks for, from the
preset and --slurm, its time limit read as Slurm reads it, the run stopped and resumed
around a requeue, and submission in job arrays; the study's Slurm executor is
tests/study/run/test_slurm_runner.py, and both against a running cluster tests/cluster/test_slurm.py."""

import threading
import time
from pathlib import Path

import pytest

from deepdensity.launch.slurm_jobs import COMMENT, SlurmOptions, Submitter, TrainJob, job_parameters
from deepdensity.utils.errors import UserError


def test_options_come_from_the_preset_then_the_command_line():
    o = SlurmOptions.parse(
        {"partition": "gpu", "time": "01:00:00", "sbatch": ["--qos=short"]},
        ["time=00:30:00", "max_jobs=8", "sbatch=--exclusive"],
    )
    assert (o.partition, o.time, o.max_jobs, o.sbatch) == ("gpu", "00:30:00", 8, ["--qos=short", "--exclusive"])
    assert SlurmOptions.parse(None, []) == SlurmOptions()


@pytest.mark.parametrize(
    "preset, overrides, message",
    [
        ({"partiton": "x"}, [], "unknown key\\(s\\) partiton"),
        (None, ["max_jobs=many"], "max_jobs must be int"),
        (None, ["retries=-1"], "retries must be >= 0"),
        (None, ["partition"], "expected KEY=VALUE"),
        (None, ["sbatch=-q short"], "sbatch options are given as --key=value or --flag, got '-q short'"),
    ],
)
def test_bad_options_are_one_line_naming_the_key(preset, overrides, message):
    with pytest.raises(UserError, match=message):
        SlurmOptions.parse(preset, overrides)


def test_a_jobs_run_is_stopped_by_sigterm_before_the_time_limit_and_resumes(tmp_path):
    """TrainJob, what each job runs, outside Slurm: SIGUSR2 (submitit's signal, which Slurm
    sends to every process of the job) does not reach the run; submitit's checkpoint stops the
    run with SIGTERM (it checkpoints) and gives the job to requeue: the same run, --resume."""
    body = "trap 'exit 143' TERM; kill -USR2 $$; echo started > started; sleep 30 & wait"
    job = TrainJob(["bash", "-c", body], {"DD_TEST": "1"})
    codes = []
    thread = threading.Thread(target=lambda: codes.append(job()))
    import os

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        thread.start()
        deadline = time.monotonic() + 10
        while not (tmp_path / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "started").exists(), "SIGUSR2 did not end the run"
        again = job.checkpoint()
        thread.join(10)
    finally:
        os.chdir(cwd)
    assert codes == [143], "the run's exit status is the job's result"
    assert again.function.cmd == ["bash", "-c", body, "--resume"] and again.function.env == {"DD_TEST": "1"}
    assert TrainJob(["bash", "-c", "kill -KILL $$"], {})() == 137, "a signal N is 128 + N, as a shell says"


def test_a_checkpoint_while_the_run_is_still_starting_stops_it_all_the_same(monkeypatch):
    """submitit's checkpoint can come while __call__ is inside Popen, the run's process started
    but not yet TrainJob's to stop (CI of 0ec6ae1: the run went on to its end). Here it comes at
    exactly that moment: the run is stopped by SIGTERM (143), never left to finish (0)."""
    from deepdensity.launch import slurm_jobs

    job = TrainJob(["sleep", "30"], {})
    real_popen = slurm_jobs.subprocess.Popen

    def popen_then_checkpoint(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        job.checkpoint()  # the process exists; job._proc is still None
        return proc

    monkeypatch.setattr(slurm_jobs.subprocess, "Popen", popen_then_checkpoint)
    assert job() == 143


def fake_command(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text("#!/bin/sh\n" + body)
    (bin_dir / name).chmod(0o755)


def test_runs_ready_together_go_as_one_job_array_each_recorded_before_sbatch(tmp_path, monkeypatch):
    """Submitter, with sbatch and srun on PATH that answer as Slurm's do: three runs asked for
    at once are one sbatch of an array (tasks JOB_0..2), each told its token and index before
    sbatch; a run asked for alone is one job of its own name."""
    import os

    calls = tmp_path / "calls"
    fake_command(
        tmp_path / "bin",
        "sbatch",
        f'cat "$1" >> {calls}; echo ---- >> {calls}\necho "Submitted batch job $(grep -c -- ---- {calls})"\n',
    )
    fake_command(tmp_path / "bin", "srun", "exit 0\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    submitter = Submitter(tmp_path / "jobs", "dd-t", retries=2, max_jobs=8, window=0.5)
    params = job_parameters(SlurmOptions(), 1, 1.0)
    told, ids = {}, {}

    def ask(name: str) -> None:
        ids[name] = submitter.submit(
            name, TrainJob(["true"], {}), dict(params), lambda token, index: told.__setitem__(name, (token, index))
        )

    threads = [threading.Thread(target=ask, args=(f"run{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    scripts = calls.read_text().split("----\n")[:-1]
    assert len(scripts) == 1 and "#SBATCH --array=0-2%3\n" in scripts[0] and "--job-name=dd-t-array\n" in scripts[0]
    assert sorted(ids.values()) == ["1_0", "1_1", "1_2"]
    assert sorted(index for _, index in told.values()) == [0, 1, 2] and len({t for t, _ in told.values()}) == 1
    assert all(ids[name] == f"1_{told[name][1]}" for name in ids), "each run its own task"
    assert f"#SBATCH --comment={COMMENT}{told['run0'][0]}\n" in scripts[0]
    ask("alone")
    script = calls.read_text().split("----\n")[1]
    assert ids["alone"] == "2" and "--array" not in script and "#SBATCH --job-name=dd-t-alone\n" in script


@pytest.mark.parametrize(
    "text, hours",
    [
        ("04:00:00", 4),
        ("90", 1.5),
        ("30:00", 0.5),
        ("1-00:00:00", 24),
        ("2-12", 60),
        ("1-06:30", 30.5),
        ("UNLIMITED", float("inf")),
    ],
)
def test_time_limits_read_as_slurm_reads_them(text, hours):
    from deepdensity.launch.slurm_jobs import time_hours

    assert time_hours(text) == hours


@pytest.mark.parametrize("bad", ["4h", "1:2:3:4", "-5", "0", "1-"])
def test_a_time_limit_slurm_would_refuse_is_one_line_before_anything(bad):
    with pytest.raises(UserError, match="time must be"):
        SlurmOptions.parse(None, [f"time={bad}"])
