"""What a Slurm job of the study asks for, from the preset and --slurm, and the batch script it
runs; the executor against a running cluster is tests/cluster/test_slurm.py."""
import subprocess

import pytest

from deepdensity.study.preset import StudyError
from deepdensity.study.slurm import SlurmOptions, SlurmRunner


def test_options_come_from_the_preset_then_the_command_line():
    o = SlurmOptions.parse({"partition": "gpu", "time": "01:00:00", "sbatch": ["--qos=short"]},
                           ["time=00:30:00", "max_jobs=8", "sbatch=--exclusive"])
    assert (o.partition, o.time, o.max_jobs, o.sbatch) == ("gpu", "00:30:00", 8, ["--qos=short", "--exclusive"])
    assert SlurmOptions.parse(None, []) == SlurmOptions()


@pytest.mark.parametrize("preset, overrides, message", [
    ({"partiton": "x"}, [], "unknown key\\(s\\) partiton"),
    (None, ["max_jobs=many"], "max_jobs must be int"),
    (None, ["retries=-1"], "retries must be >= 0"),
    (None, ["partition"], "expected KEY=VALUE"),
])
def test_bad_options_are_one_line_naming_the_key(preset, overrides, message):
    with pytest.raises(StudyError, match=message):
        SlurmOptions.parse(preset, overrides)


def test_the_batch_script_asks_for_the_run_and_passes_sigterm_on(tmp_path):
    runner = SlurmRunner(tmp_path, tmp_path / "train.yaml", None, SlurmOptions(partition="p", gpus_per_task=1),
                         threads=2, study_name="default")
    script = runner.batch_script(["python", "-m", "deepdensity", "train", "--out", "r x"], "weak-n2-s0", 2)
    assert "#SBATCH --job-name=dd-default-weak-n2-s0\n" in script
    assert "#SBATCH --cpus-per-task=2\n" in script, "the runs' threads, one task: workers are emulated"
    assert "#SBATCH --partition=p\n" in script and "#SBATCH --gpus-per-task=1\n" in script
    assert "#SBATCH --signal=B:TERM@90\n" in script
    assert "python -m deepdensity train --out 'r x' &\n" in script
    # the script parses as bash
    (tmp_path / "job.sh").write_text(script)
    assert subprocess.run(["bash", "-n", str(tmp_path / "job.sh")]).returncode == 0
    launched = SlurmRunner(tmp_path, tmp_path / "train.yaml", "horovodrun -np {n}", SlurmOptions(), threads=1,
                           study_name="default").batch_script(["x"], "real-strong-n4-s0", 4)
    assert "#SBATCH --cpus-per-task=4\n" in launched, "a launcher's N processes, one thread each"


def test_the_job_passes_sigterm_to_the_run_and_records_its_exit(tmp_path):
    """The script's own logic, run by bash outside Slurm: SIGTERM to the job reaches the run, whose
    exit status (143 here) is written where the driver reads it."""
    runner = SlurmRunner(tmp_path, tmp_path / "train.yaml", None, SlurmOptions(), threads=1, study_name="t")
    runner.jobs.mkdir()
    body = runner.batch_script(["bash", "-c", "trap 'exit 143' TERM; echo started > started; sleep 30 & wait"],
                               "r", 1)
    (tmp_path / "job.sh").write_text(body)
    job = subprocess.Popen(["bash", str(tmp_path / "job.sh")], cwd=tmp_path, env={"SLURM_JOB_ID": "7", "PATH": "/usr/bin:/bin"})
    import time
    deadline = time.monotonic() + 10
    while not (tmp_path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    job.terminate()
    assert job.wait(timeout=10) == 143
    assert (runner.jobs / "r-7.exit").read_text().strip() == "143"


def test_a_squeue_that_fails_is_not_taken_for_an_ended_job(tmp_path, monkeypatch):
    """A controller restarting makes squeue fail for a while; the job must be waited for, not
    resubmitted. Slurm's commands are replaced here by scripts on PATH that answer as squeue
    does (the real ones are exercised in tests/cluster/test_slurm.py)."""
    import os
    from deepdensity.study import slurm
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    # fails twice (controller away), then says the job has left the queue
    (bin_dir / "squeue").write_text(f"#!/bin/sh\necho x >> {calls}\nn=$(wc -l < {calls})\n"
                                    "if [ $n -le 2 ]; then echo 'slurm_load_jobs error: Socket timed out' >&2; exit 1; fi\n")
    (bin_dir / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert slurm.queue_state("5") is None
    runner = SlurmRunner(tmp_path, tmp_path / "train.yaml", None, SlurmOptions(poll_seconds=0.01), threads=1,
                         study_name="t")
    runner.jobs.mkdir()
    (runner.jobs / "r-5.exit").write_text("0\n")
    assert runner._wait("5") == 0, "waited through the failures, then read the job's exit"
    assert len(calls.read_text().split()) == 3
