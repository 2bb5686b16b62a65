"""The study's clock under `--executor slurm` (issue 47): one Slurm job on one node, waited for,
its timing.json read; never submitted twice, nothing submitted when timing.json is held. Slurm
is faked here (a submitter that records what it is asked, squeue on PATH); the executor against
a running cluster is tests/cluster/test_slurm.py."""

import json
import os
import sys
from types import SimpleNamespace

import pytest
from submitit.core.utils import JobPaths, cloudpickle_dump

from deepdensity.launch.slurm_jobs import SlurmOptions
from deepdensity.launch.slurm_queue import QueueJob, QueueWatcher
from deepdensity.study.run import timing
from deepdensity.study.run.runner import StudyRunner
from deepdensity.study.run.slurm_runner import SlurmRunner
from deepdensity.study.run.timing import CLOCK_VERSION
from deepdensity.utils.errors import StudyError
from tests.launch.test_slurm_jobs import fake_command

TIMING = {"clock_version": CLOCK_VERSION, "compute_scale": 1.0}


class FakeSubmitter:
    """Submitter's interface: each job 'runs' at once, as `run(job)` says (writes its files)
    and ends with `exit` as its result; what was submitted is kept."""

    def __init__(self, root, exit=0, writes=True):
        self.root, self.exit, self.writes, self.submitted = root, exit, writes, []

    def submit(self, name, job, params, before):
        before("tok", 0)
        job_id = str(11 + len(self.submitted))
        self.submitted.append((name, job.cmd, params, job_id))
        if self.writes:
            (self.root / "timing.json").write_text(json.dumps(TIMING))
        paths = JobPaths(self.root / ".slurm", job_id=job_id, task_id=0)
        paths.stdout.parent.mkdir(parents=True, exist_ok=True)
        paths.stdout.write_text("timing: round 1 of 3\nTraceback: no horovodrun on the node\n")
        cloudpickle_dump(("success", self.exit), paths.result_pickle)
        return job_id


@pytest.fixture
def slurm(tmp_path, monkeypatch):
    """A study's runs folder whose runner submits to FakeSubmitter; squeue says every job has
    left the controller (ended), so that the driver reads its result at once."""
    fake_command(tmp_path / "bin", "squeue", "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(QueueJob, "watcher", QueueWatcher(delay_s=0))
    root = tmp_path / "runs"
    root.mkdir()

    def study(options=SlurmOptions(poll_seconds=0.01), threads=1, **fake):
        submitter = FakeSubmitter(root, **fake)
        runner = SlurmRunner(root, root / "train.yaml", None, options, threads, "tiny", submitter=submitter)
        return SimpleNamespace(runner=runner, root=root, train_yaml=root / "train.yaml", n_train=64, n_val=32)

    return study


def test_the_clock_is_one_job_of_four_cpus_and_its_timing_json_is_read(slurm):
    s = slurm()
    said = []
    assert timing.study_clock(s, cfg=None, say=said.append) == TIMING
    [(name, cmd, params, job_id)] = s.runner.submitter.submitted
    assert name == "clock" and job_id == "11"
    assert cmd == [
        sys.executable,
        "-m",
        "deepdensity.study.run.timing",
        "--runs",
        str(s.root.resolve()),
        "--n-train",
        "64",
        "--n-val",
        "32",
    ], "measure_timing on the node, on the runs folder"
    assert params["cpus_per_task"] == 4 and params["srun_args"] == ["--cpus-per-task=4"], "horovodrun -np 4"
    assert params["time"] == 240 and params["ntasks_per_node"] == 1, "one task on one node, the study's time"
    assert json.loads((s.root / ".slurm" / "clock.json").read_text())["jobs"] == ["11"]
    assert "timing: the clock as one Slurm job on one node (4 CPUs, 04:00:00 at most" in said[0]
    # the study started again: timing.json is held, nothing is submitted
    again = slurm()
    assert timing.study_clock(again, cfg=None, say=said.append) == TIMING
    assert again.runner.submitter.submitted == []


@pytest.mark.parametrize(
    "options, threads, cpus", [(SlurmOptions(cpus_per_task=2), 1, 8), (SlurmOptions(), 2, 8), (SlurmOptions(), 1, 4)]
)
def test_the_clock_jobs_cpus_are_the_real_strong_scaling_jobs_at_n_4(options, threads, cpus, tmp_path):
    assert timing.clock_cpus(options, threads) == cpus
    launched = SlurmRunner(tmp_path, tmp_path / "train.yaml", "horovodrun -np {n}", options, threads, "tiny")
    assert launched.cpus(4) == cpus


def test_a_clock_job_the_last_driver_submitted_is_attached_to_not_submitted_again(slurm):
    s = slurm()
    jobs = s.root / ".slurm"
    jobs.mkdir()
    (jobs / "clock.json").write_text(json.dumps({"job_id": "7", "attempts": 1, "jobs": ["7"], "command": ["x"]}))
    cloudpickle_dump(("success", 0), JobPaths(jobs, job_id="7", task_id=0).result_pickle)  # it ended meanwhile
    (s.root / "timing.json").write_text(json.dumps({**TIMING, "clock_version": CLOCK_VERSION - 1}))
    with pytest.raises(StudyError, match="wrote no timing.json"):  # the old clock's file is not taken
        timing.study_clock(s, cfg=None, say=lambda line: None)
    assert s.runner.submitter.submitted == [], "attached to job 7, never submitted again"
    (s.root / "timing.json").write_text(json.dumps(TIMING))
    assert timing.study_clock(slurm(), cfg=None, say=lambda line: None) == TIMING


def test_a_failed_clock_job_stops_the_study_and_is_submitted_afresh_next_time(slurm):
    s = slurm(exit=1, writes=False)
    with pytest.raises(StudyError, match="(?s)the clock's Slurm job failed \\(exit 1\\):.*no horovodrun on the node"):
        timing.study_clock(s, cfg=None, say=lambda line: None)
    again = slurm()
    assert timing.study_clock(again, cfg=None, say=lambda line: None) == TIMING
    assert [j for *_, j in again.runner.submitter.submitted] == ["11"]
    assert json.loads((s.root / ".slurm" / "clock.json").read_text())["jobs"] == ["11", "11"], (
        "both submissions on record (each fake numbers its jobs from 11)"
    )


def test_the_local_executor_measures_the_clock_here_as_before(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(timing, "measure_timing", lambda *a: calls.append(a) or TIMING)
    runner = StudyRunner(tmp_path, tmp_path / "train.yaml", None)
    s = SimpleNamespace(runner=runner, root=tmp_path, train_yaml=tmp_path / "train.yaml", n_train=64, n_val=32)
    assert timing.study_clock(s, cfg="cfg", say=print) == TIMING
    assert calls == [(tmp_path, tmp_path / "train.yaml", "cfg", 64, 32, print)]


def test_the_jobs_command_measures_the_clock_on_the_runs_folder(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(timing, "measure_timing", lambda *a: calls.append(a) or TIMING)
    (tmp_path / "train.yaml").write_text("intra_op_threads: 1\nbatch_size: 8\n")
    assert timing.main(["--runs", str(tmp_path), "--n-train", "64", "--n-val", "32", "--resume"]) == 0
    [(root, train_yaml, cfg, n_train, n_val)] = calls
    assert (root, train_yaml, cfg.batch_size, n_train, n_val) == (tmp_path, tmp_path / "train.yaml", 8, 64, 32)
    assert timing.main(["--runs", str(tmp_path / "nope"), "--n-train", "1", "--n-val", "1"]) == 2
    assert "no such file; --runs names a study's runs folder" in capsys.readouterr().err
