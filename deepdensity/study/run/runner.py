"""The study's training runs: one `deepdensity train` subprocess each, several side by side.

Two one-thread runs side by side on a 2-core host train a third faster than one two-thread
run after another (two 4-pass runs: 55.7 s against 74.0 s, AMD EPYC with AVX2), so the study
runs `parallel` of them at once (preset `parallel_runs`, default: cores / threads per run).
A finished run is reused; a run stopped at its epoch cap is resumed when asked for more.
On an interrupt every live run is sent SIGTERM, checkpoints, and is waited for.
"""

from __future__ import annotations

import functools
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable, Optional

from deepdensity.config import load
from deepdensity.launch import controllers
from deepdensity.launch.horovodrun import horovodrun_path
from deepdensity.scaling.rules import RunStatus
from deepdensity.study.core import ledger
from deepdensity.study.core.data_identity import data_identity
from deepdensity.study.core.preset import FIG1_PREFIX
from deepdensity.study.core.request import RunRequest, resolve
from deepdensity.study.run import run_folders
from deepdensity.study.run.finished_runs import ledger_entry, refuse_stale, set_aside_if_other_controller, stopped_early
from deepdensity.training.runs import data_fingerprint, read_json
from deepdensity.utils import machine
from deepdensity.utils.errors import StudyError


class NotHeld(StudyError):
    """A run the study asked for that neither the ledger nor the runs folder holds, in a study
    that trains nothing (repro --no-train)."""


def unless_not_held(stage, instead):
    """A stage's result, or `instead` (said) when one of its runs is not held and the study trains nothing."""
    try:
        return stage()
    except NotHeld as e:
        print(f"skipped: {e}")
        return instead


STARTUP_S = 10.0  # a run's process start-up and tracing, added to its own clock for estimates


def fmt_s(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"


class StudyRunner:
    """Runs (or reuses, when finished) the study's training runs, up to `parallel` at once."""

    runs_as_jobs = False  # True: each run is a batch job (slurm_runner.py), and so is the clock

    def __init__(self, root: Path, train_yaml: Path, runner: Optional[str], parallel: int = 1, say=print):
        self.root, self.train_yaml, self.runner = root, train_yaml, runner
        self.parallel, self.say = max(1, parallel), say
        self.t0 = time.perf_counter()
        self.trained, self.reused = set(), set()  # run names, this invocation
        self.wall = {}  # run name -> seconds it took here, or its own clock
        self._live, self._lock, self._fingerprints = set(), threading.Lock(), {}
        self._started = 0
        self.budget_end: Optional[float] = None  # perf_counter time the study's budget ends
        self.env_extra: dict = {}  # more environment for every run (e.g. ONEDNN_MAX_CPU_ISA)
        # oneDNN held to the set another machine trained on (second_look.py): the runs' path is
        # the one their key names there, so the cap is in their environment and entry, not their key
        self.isa_pin = ""
        self.python = sys.executable  # the interpreter runs train with (the stack check: another venv's)
        self.stack_check = ""  # that venv's stack, in the runs' keys (design.stack_recheck)
        self.ledger: Optional[ledger.Ledger] = None  # finished runs to reuse, and where new ones are added
        self.machine: Optional[dict] = None
        self.may_train = True  # False: a run not held raises NotHeld (repro --no-train)

    def _clock(self) -> str:
        """Time so far, and what is left of the study's budget (after it, no new seeds start)."""
        now = time.perf_counter()
        spent = f"{fmt_s(now - self.t0)} so far"
        if self.budget_end is None:
            return spent
        left = self.budget_end - now
        return spent + (f", {fmt_s(left)} of the budget left" if left > 0 else ", the budget is spent")

    def ask(self, name: str, mode: str, n: int, settings: dict) -> RunRequest:
        """The run `name` with `settings` (Python values, beyond the runs folder's train.yaml),
        resolved once into the Config it trains with."""
        return resolve(load(str(self.train_yaml)), name, mode, n, settings)

    def run(
        self,
        name: str,
        mode: str,
        n: int,
        settings: dict,
        need_weights: bool = False,
        continue_from: Optional[str] = None,
    ) -> dict:
        """Run `name` with `settings` (self.ask); a run the ledger holds is reused (its folder written from
        the ledger, ledger.py), a finished run in the folder is reused, and one that stopped at
        its epoch cap is resumed when asked for more epochs (the sequential runs grow this way),
        as is one a stall rule ended that the study no longer asks for (_reopen_if_stopped_early).
        `need_weights`: the run's weights are read afterwards, so a ledger entry (which has none)
        does not do. `continue_from`: a run of the same path that a stopping rule ended here;
        when neither the ledger nor the folder holds `name`, it starts from that run's last
        checkpoint (continuation) instead of from epoch 0."""
        out = self.root / name
        asked = self.ask(name, mode, n, settings)
        request = self._request(asked) if self.ledger is not None else None
        set_aside_if_other_controller(out, self.controller(), self.say)
        trained_here = (out / "state.json").exists()  # its checkpoint: trained here
        # a run trained in this folder is used as before (reused, extended or resumed); the
        # ledger fills folders without one, unless the run's weights are needed
        if request is not None and not trained_here and not need_weights:
            held = self._from_ledger(out, name, request)
            if held is not None:
                return held
        if (out / ledger.MARKER).exists():  # written from the ledger, no checkpoint: train afresh
            run_folders.wipe(out)
        if continue_from and not out.exists():
            run_folders.continuation(self.root / continue_from, out)
        held = self._from_folder(out, asked, request)
        if held is not None:
            return held
        if not self.may_train:
            raise NotHeld(
                f"{name} ({mode} N = {n}, seed {asked.config.seed}) is not in the ledger, and --no-train trains nothing"
            )
        return self._train_asked(out, asked, request)

    def _from_folder(self, out: Path, asked: RunRequest, request: Optional[dict]) -> Optional[dict]:
        """The run's result from the finished run its folder holds, once checked against the run
        asked for (and recorded in the ledger where it is not yet); None where the folder holds
        none, or one stopped at its epoch cap short of the epochs asked for now (it trains on)."""
        result_path = out / "result.json"
        if result_path.exists():
            # before the ledger: a stale run never takes a new key
            refuse_stale(out, asked, self.train_yaml, functools.partial(self._data_hash, data_fingerprint))
            self._reopen_if_stopped_early(out, asked)
        if result_path.exists():
            if request is not None:
                self._record(out, asked, request, "runs folder")  # finished before the ledger knew it
            r = read_json(result_path, "finished run's result")
            if r["status"] != RunStatus.CAPPED or r["epochs"] >= asked.config.max_epochs:
                return self._reused(asked.name, r)
        return None

    def _train_asked(self, out: Path, asked: RunRequest, request: Optional[dict]) -> dict:
        """Train the run asked for in `out` (one training subprocess, `_train`), record it in the
        ledger and return its result."""
        name, mode, n = asked.name, asked.mode, asked.n
        with self._lock:
            self.trained.add(name)
            self._started += 1
            k = self._started
        self.say(
            f"[run {k}] {name}: {mode} N={n} "
            f"({'real' if self.runner else 'emulated' if n > 1 else 'one process'}, "
            f"up to {asked.config.max_epochs} epochs); {self._clock()}"
        )
        t = time.perf_counter()
        # a folder that holds anything is resumed: from its checkpoint, or afresh when it was
        # stopped before its first one (train.py says so; without --resume it would refuse)
        proc = self._train(self.train_command(asked, resume=out.exists() and any(out.iterdir())), name, n)
        with self._lock:
            self.wall[name] = self.wall.get(name, 0.0) + time.perf_counter() - t
        if proc[0] != 0:
            tail = "\n".join(proc[1].strip().splitlines()[-15:])
            raise StudyError(f"run {name} failed (exit {proc[0]}):\n{tail}")
        if request is not None:
            self._record(out, asked, request, "trained")
        return read_json(out / "result.json", "run's result")

    def _from_ledger(self, out: Path, name: str, request: dict) -> Optional[dict]:
        """The run's result replayed from the ledger, its folder written from the entry; None
        when the ledger holds no run that answers the request."""
        found = self.ledger.find(request["key"], request["stopping"])
        if found is None:
            return None
        entry, got = found
        if not run_folders.holds(out, entry, got["result"]):
            run_folders.wipe(out)
            ledger.materialize(out, entry, got, request["config"])
        return self._reused(name, got["result"])

    def _reused(self, name: str, result: dict) -> dict:
        with self._lock:
            self.reused.add(name)
            self.wall.setdefault(name, (result.get("seconds") or 0.0) + STARTUP_S)
        return result

    def _request(self, asked: RunRequest) -> dict:
        """The run asked for as the ledger knows it: its full settings, key and stopping rules."""
        mode, n, config = asked.mode, asked.n, asked.config.to_dict()
        data = self._data_hash(data_identity, config["data_path"]) if Path(config["data_path"]).exists() else ""
        # a cap exported in the shell changes the path as much as one the study sets
        launcher = self._launcher()
        isa_cap = self.env_extra.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("ONEDNN_MAX_CPU_ISA", "")
        return {
            "config": config,
            "data": data,
            "launcher": launcher,
            "isa_cap": isa_cap,
            "key": ledger.run_key(config, mode, n, launcher, isa_cap, data, self.stack_check),
            "stopping": ledger.stopping_of(config),
        }

    def _launcher(self) -> str:
        """How a run is launched, as far as it changes its path: one process, or several real
        processes under a controller (MPI's and Gloo's allreduces each round sums in their own order)."""
        controller = self.controller()
        return f"horovodrun ({controller})" if controller else "one process"

    def controller(self) -> Optional[str]:
        """The controller the runner's processes run under ('mpi', 'gloo'); None for one process."""
        if not self.runner:
            return None
        options = shlex.split(self.runner.format(n=2))
        # DEEPDENSITY_CONTROLLER is read by `deepdensity launch` alone; plain horovodrun ignores it
        env = dict(os.environ) if "launch" in options and "deepdensity" in self.runner else {}
        return controllers.resolved(options, env, horovodrun_path())

    def _record(self, out: Path, asked: RunRequest, request: dict, source: str) -> None:
        """The finished run in `out` added to the ledger, once for this machine (ledger_entry);
        not Fig. 1's run, trained for its weights under its sequential run's key (ledger.read_entries)."""
        if asked.name.startswith(FIG1_PREFIX):
            return
        entry = ledger_entry(out, asked, request, source, self.ledger, self._machine, self.stack_check, self.say)
        if entry is not None:
            self.ledger.append(entry)

    def _machine(self, isa_cap: str) -> dict:
        if self.machine is None:
            isa = machine.onednn_isa()
            self.machine = {"host": machine.host(), "cpu": machine.cpu_model(), "onednn_isa": isa}
        pinned = {"onednn_isa": machine.onednn_isa(self.isa_pin), "isa_pin": self.isa_pin} if self.isa_pin else {}
        return {**self.machine, **pinned, **({"isa_cap": isa_cap} if isa_cap else {})}

    def run_env(self) -> dict:
        """What a run's environment adds to the driver's: env_extra, and the pin (isa_pin)."""
        return {**self.env_extra, **({"ONEDNN_MAX_CPU_ISA": self.isa_pin} if self.isa_pin else {})}

    def onednn_isa(self, cap: str = "") -> str:
        """The set oneDNN uses for this runner's runs, under `cap` if given (machine.onednn_isa)."""
        return machine.onednn_isa(cap)

    def _reopen_if_stopped_early(self, out: Path, asked: RunRequest) -> None:
        """A finished run that a stopping rule no longer asked for ended (finished_runs.stopped_early)
        is reopened at its last checkpoint, so that it trains on to where the rules now in force
        end it: the same path, not its epochs again."""
        r = stopped_early(out, asked)
        if r is None:
            return
        if not self.may_train:
            raise NotHeld(
                f"{out.name} ended {r['status']} at epoch {r['epochs']} by a rule no longer asked for, and "
                f"--no-train trains nothing"
            )
        self.say(
            f"{out.name}: ended {r['status']} at epoch {r['epochs']} by a rule no longer asked for; "
            f"continued from its last checkpoint"
        )
        run_folders.reopen(out)

    def _data_hash(self, of: Callable, path: str) -> str:
        """`of(path)` (data_identity or data_fingerprint), computed once per data file."""
        with self._lock:
            if (of, path) not in self._fingerprints:
                self._fingerprints[(of, path)] = of(path)
            return self._fingerprints[(of, path)]

    def train_command(self, asked: RunRequest, resume: bool) -> list:
        cmd = [
            self.python,
            "-m",
            "deepdensity",
            "train",
            "--mode",
            asked.mode,
            "--config",
            str(self.train_yaml),
            "--out",
            str(self.root / asked.name),
            "--quiet",
        ]
        if resume:
            cmd.append("--resume")  # a run killed mid-way, or extended, continues from its checkpoint
        cmd += asked.set_words()
        if self.runner:
            return shlex.split(self.runner.format(n=asked.n)) + cmd
        return cmd + (["--emulate-workers", str(asked.n)] if asked.n > 1 else [])

    def sibling(self, runner: Optional[str], parallel: int) -> "StudyRunner":
        """A runner of the same kind (local, Slurm) for the same study with another launcher."""
        other = self._new(runner, parallel)
        other.ledger, other.may_train = self.ledger, self.may_train
        # one count of the invocation's runs: the checks' and real runs' siblings train too
        other.trained, other.reused = self.trained, self.reused
        return other

    def _new(self, runner: Optional[str], parallel: int) -> "StudyRunner":
        return StudyRunner(self.root, self.train_yaml, runner, parallel=parallel, say=self.say)

    def _train(self, cmd: list, name: str = "", workers: int = 1) -> tuple:
        """(exit status, stderr or stdout) of one training subprocess, tracked so that an
        interrupt can reach it. (`name`, `workers`: the run's, for executors that need them.)"""
        proc = subprocess.Popen(
            cmd,
            env={**self._environment(), "TF_CPP_MIN_LOG_LEVEL": "2", **self.run_env()},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        with self._lock:
            self._live.add(proc)
        try:
            out, err = proc.communicate()
        finally:
            with self._lock:
                self._live.discard(proc)
        return proc.returncode, err or out

    def _environment(self) -> dict:
        """The driver's environment for a run; for another venv's interpreter, without the
        TF_USE_LEGACY_KERAS this process set for its own TensorFlow (deepdensity/__init__.py):
        that interpreter sets it for itself where its stack has tf_keras, and a TensorFlow 2.15
        given it would look for a tf_keras it does not have."""
        if self.python == sys.executable:
            return dict(os.environ)
        return {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}

    def stop(self, grace_s: float = 120.0) -> None:
        """Ask every live run to checkpoint and stop (SIGTERM), and wait for it."""
        with self._lock:
            live = list(self._live)
        for p in live:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in live:
            try:
                p.wait(grace_s)
            except subprocess.TimeoutExpired:
                p.kill()

    def run_all(self, jobs: list, label: str = "runs") -> list:
        """Run the callables `jobs` (each one or more `run`s) `parallel` at a time; their results
        in order. The first error (or an interrupt) stops the live runs and is raised."""
        results = [None] * len(jobs)
        self.schedule(
            lambda running, done: [(i, job) for i, job in enumerate(jobs) if i not in running and i not in done],
            lambda key, value: results.__setitem__(key, value),
            label,
        )
        return results

    def schedule(self, next_jobs: Callable, on_done: Callable, label: str) -> None:
        """Keep `parallel` jobs going: `next_jobs(running keys, done keys)` lists [(key, job)]
        still to run, best first (asked again after every finished job, so that it can change
        its mind), and `on_done(key, result)` takes each result."""
        running, done, t0 = {}, set(), time.perf_counter()
        trained_before = len(self.trained)
        with ThreadPoolExecutor(self.parallel) as pool:
            try:
                while True:
                    for key, job in next_jobs(set(running.values()), done)[: self.parallel - len(running)]:
                        running[pool.submit(job)] = key
                    if not running:
                        return
                    finished, _ = wait(running, return_when=FIRST_COMPLETED)
                    for f in finished:
                        key = running.pop(f)
                        on_done(key, f.result())
                        done.add(key)
                    left = len(next_jobs(set(running.values()), done)) + len(running)
                    spent = time.perf_counter() - t0
                    # the pace of the runs trained in this stage: a reused run takes no time and says nothing
                    trained = len(self.trained) - trained_before - len(running)
                    pace = (
                        f" (~{fmt_s(spent / trained * left)} more at this stage's pace)" if left and trained > 0 else ""
                    )
                    self.say(
                        f"{label}: {len(done)} done, {left} to go{pace}; {fmt_s(spent)} in this stage, {self._clock()}"
                    )
            except BaseException:
                self.stop()
                for f in running:
                    f.cancel()
                raise
