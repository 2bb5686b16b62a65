"""Horovod's controller, MPI or Gloo: which this Horovod was built with, which a launch runs
under, what the ranks of a run were started with (for its record), and mpirun's closing notice.

`make install` builds Horovod 0.28.1 with MPI beside Gloo where OpenMPI is there. horovodrun
then runs under MPI by default (mpirun: ranks on one host talk over shared memory, across hosts
over TCP), and under Gloo with `--gloo` (TCP, loopback on one host). `deepdensity launch` keeps
that default and adds a setting for launches that cannot take a flag (a study's, a script's):
DEEPDENSITY_CONTROLLER=gloo|mpi. Elastic training (--min-np, --host-discovery-script) runs on
Gloo whatever is asked: Horovod's elastic driver has no MPI; asked for MPI, the launch says so.

Under MPI the ranks wait for each other in OpenMPI's progress loop, which spins; on a host
whose cores all train, a spinning rank takes the core its peer computes on. MPI_ENV makes a
waiting rank yield (OpenMPI does so by itself only when it sees more ranks than cores): the
launch passes it to mpirun, and every rank sets it before Horovod's init (under_mpirun, from
the package's import). Horovod's mpirun is started with --allow-run-as-root
(runner/mpi_run.py), so root (CI) needs none of OpenMPI's root variables.

No TensorFlow and no Horovod here: `built` asks horovodrun's interpreter.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Optional

from deepdensity.utils.errors import EXIT_BAD_INPUT, EXIT_SIGINT, EXIT_SIGTERM, UserError

CONTROLLER_ENV = "DEEPDENSITY_CONTROLLER"
CONTROLLERS = ("mpi", "gloo")
FLAGS = {"mpi": "--mpi", "gloo": "--gloo", "jsrun": "--jsrun"}
# horovodrun is elastic when given a discovery script or a minimum (runner/launch.py: _is_elastic)
ELASTIC_OPTIONS = ("--host-discovery-script", "--min-np", "--min-num-proc")
# OpenMPI's ranks yield the core while they wait (in the allreduce, in Horovod's negotiation)
MPI_ENV = {"OMPI_MCA_mpi_yield_when_idle": "1"}
# exit codes a rank's own last line explains: a refusal (its error line), an interrupt
EXPLAINED = (EXIT_BAD_INPUT, EXIT_SIGINT, EXIT_SIGTERM)


# What Horovod's TensorFlow extension says it was built with, asked before any init
_BUILT_PROBE = "import horovod.tensorflow as h; print('controllers:', 'mpi' * h.mpi_built(), 'gloo' * h.gloo_built())"


@functools.lru_cache(maxsize=None)
def built(horovodrun: str) -> frozenset:
    """The controllers the Horovod behind `horovodrun` was built with ({"mpi", "gloo"} with
    MPI); empty if it cannot say. Asked of Horovod's TensorFlow extension in horovodrun's own
    interpreter (its #! line): one TensorFlow import, 3 s here. Where horovodrun is not a
    Python script, `horovodrun --check-build` is read instead; it imports TensorFlow six times
    (11 s here), and a study asked it in every invocation."""
    python = _interpreter(horovodrun)
    command = [python, "-c", _BUILT_PROBE] if python else [horovodrun, "--check-build"]
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
        )
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    if not python:
        return controllers_in_check_build(proc.stdout)
    said = [line.split()[1:] for line in proc.stdout.splitlines() if line.startswith("controllers:")]
    return frozenset(said[-1]) & set(CONTROLLERS) if proc.returncode == 0 and said else frozenset()


def _interpreter(script: str) -> Optional[str]:
    """The Python interpreter a console script's #! line names, or None (not a script, or not
    Python's)."""
    try:
        with open(script, "rb") as f:
            first = f.readline(4096).decode(errors="replace")
    except OSError:
        return None
    words = first[2:].split() if first.startswith("#!") else []
    if words and Path(words[0]).name == "env":  # #!/usr/bin/env python3
        words = words[1:]
    return shutil.which(words[0]) if words and Path(words[0]).name.startswith("python") else None


def controllers_in_check_build(text: str) -> frozenset:
    """The controllers marked [X] under "Available Controllers:" in check-build's output."""
    section = (
        text.split("Available Controllers:", 1)[-1].split("Available Tensor Operations:", 1)[0]
        if "Available Controllers:" in text
        else ""
    )
    return frozenset(m.lower() for m in re.findall(r"\[X\]\s+(\w+)", section)) & set(CONTROLLERS)


def is_elastic(options: list) -> bool:
    """Do these horovodrun options start an elastic job?"""
    return any(o == name or o.startswith(name + "=") for o in options for name in ELASTIC_OPTIONS)


def asked_for(options: list, env: dict) -> Optional[str]:
    """The controller the user asked for: a flag among horovodrun's options, else the
    DEEPDENSITY_CONTROLLER setting, else None (horovodrun's default: MPI where built)."""
    flags = [name for name, flag in FLAGS.items() if flag in options]
    if len(flags) > 1:
        raise UserError(f"horovodrun takes one controller, not {' and '.join(FLAGS[f] for f in flags)}")
    setting = env.get(CONTROLLER_ENV, "").strip().lower()
    if setting and setting not in CONTROLLERS:
        raise UserError(f"{CONTROLLER_ENV} must be mpi or gloo, not {env[CONTROLLER_ENV]!r}")
    return flags[0] if flags else setting or None


def resolved(options: list, env: dict, horovodrun: str) -> str:
    """The controller horovodrun runs these options under: Gloo when elastic, else the one
    asked for, else horovodrun's default (MPI where built, else Gloo)."""
    if is_elastic(options):
        return "gloo"
    return asked_for(options, env) or ("mpi" if "mpi" in built(horovodrun) else "gloo")


def choose(options: list, env: dict, horovodrun: str) -> tuple:
    """(horovodrun's options with the controller asked for, the environment to add, a note or
    None). Elastic: Gloo, and a note if MPI was asked for. MPI asked for where this Horovod has
    none: one error line (UserError). The environment is MPI_ENV, which Gloo ignores."""
    asked = asked_for(options, env)
    if is_elastic(options):
        note = None
        if asked == "mpi":
            note = (
                "note: elastic training runs on Gloo (Horovod's elastic driver has no MPI), "
                f"not under the MPI asked for ({'--mpi' if '--mpi' in options else CONTROLLER_ENV + '=mpi'})"
            )
        return [o for o in options if o != "--mpi"], {}, note
    if asked in CONTROLLERS and asked not in built(horovodrun):
        raise UserError(
            f"this Horovod was built without {asked.upper()} (horovodrun --check-build); "
            + (
                "install OpenMPI and rebuild Horovod (rm .venv/.installed && make install), or run under Gloo (--gloo)"
                if asked == "mpi"
                else "rebuild it (make install)"
            )
        )
    if asked and FLAGS[asked] not in options:
        options = [FLAGS[asked], *options]
    return options, dict(MPI_ENV), None


def started_by_mpirun(env: Mapping[str, str]) -> bool:
    """Did mpirun start this process (OpenMPI names every rank's world size)?"""
    return "OMPI_COMM_WORLD_SIZE" in env


def under_mpirun(env, streams: Optional[tuple] = None) -> bool:
    """What a process that mpirun started sets first (the package's import does it in every
    rank, before Horovod's init); True if mpirun started it, else nothing is done.

    - MPI_ENV in `env` (os.environ), where not set already: OpenMPI reads it in MPI_Init, so
      plain `horovodrun -np 2 python train.py` and the study's runs yield a waiting rank's core
      as `deepdensity launch` does.
    - stdout and stderr write each line whole. mpirun tags each chunk it reads from a rank, not
      each line, and an unbuffered stream (PYTHONUNBUFFERED, python -u) writes a printed line
      and its newline apart: a probe's "STEP_SECONDS 32 0.124210" came back as
      "0.124210[1,0]<stdout>:" and could not be read. Buffered up to its newline, a line is one
      write, and still leaves at once. A text of several lines is cut after its last newline
      (WholeLines): a line-buffered stream writes all it holds at a newline, so the start-up
      lines' last line left without its newline and read "lr = 0.00105  (base 0.00105 x
      1)[1,0]<stdout>:" under plain horovodrun (CI of 0ec6ae1). `streams` given: reconfigured
      in place only (sys.stdout and sys.stderr are what get WholeLines)."""
    if not started_by_mpirun(env):
        return False
    for name, value in MPI_ENV.items():
        env.setdefault(name, value)
    for stream in streams or (sys.stdout, sys.stderr):
        if stream is not None and hasattr(stream, "reconfigure"):
            stream.reconfigure(write_through=False, line_buffering=True)
    if streams is None:
        sys.stdout, sys.stderr = whole_lines(sys.stdout), whole_lines(sys.stderr)
    return True


class WholeLines:
    """A line-buffered text stream whose every write leaves in whole lines: a text with a
    newline before its end is written in two, up to the last newline (flushed) and the rest
    (held until its own newline). Everything else is the stream's."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        cut = text.rfind("\n") + 1
        if 0 < cut < len(text):
            self.stream.write(text[:cut])
            self.stream.write(text[cut:])
            return len(text)
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def whole_lines(stream):
    """`stream` as WholeLines (once), None as None."""
    return stream if stream is None or isinstance(stream, WholeLines) else WholeLines(stream)


# what a launcher gives every process it starts: horovodrun's Gloo (static and elastic), mpirun,
# and a PMI that srun or another launcher offers for MPI's own start-up
LAUNCHED_BY = ("HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_RANK", "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE")
# a PMI's variables: srun sets them in every task where slurm.conf has MpiDefault=pmix or pmi2,
# so inside a Slurm step of one task they say nothing of a launch
PMI_VARS = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK")
LONE_PROCESS_ENV = {"HOROVOD_CONTROLLER": "gloo", "HOROVOD_CPU_OPERATIONS": "gloo"}


def launched(env) -> bool:
    """Did a launcher (horovodrun, mpirun, or a PMI's launcher, srun with several tasks among
    them) start this process as one of several?"""
    if any(name in env for name in LAUNCHED_BY):
        return True
    one_task_step = env.get("SLURM_STEP_NUM_TASKS") == "1"
    return any(name in env for name in PMI_VARS) and not one_task_step and env.get("PMI_SIZE", "2") != "1"


def lone_process_env(env) -> dict:
    """What Horovod's init needs in a process no launcher started (`python train.py`, a study's
    emulated run, a probe), which is a world of one: Gloo, so that a Horovod built with MPI does
    not start MPI in it. Inside a Slurm job step OpenMPI takes such a process for one that srun
    launched directly, and without Slurm's PMI in its build aborts in MPI_Init ("The application
    appears to have been direct launched using srun"): every one-process run of a study under
    `--executor slurm` failed so. {} when a launcher started the process, when srun started more
    than one task of it, or when the user chose a controller (HOROVOD_CONTROLLER)."""
    if launched(env) or "HOROVOD_CONTROLLER" in env:
        return {}
    if env.get("SLURM_STEP_NUM_TASKS", "1") != "1":
        return {}
    return {k: v for k, v in LONE_PROCESS_ENV.items() if k not in env}  # a user's CPU operations win


def of_this_run(env: dict) -> dict:
    """What the run record names for the ranks of this process's run, from the environment its
    launcher gave it: {"controller": "mpi" | "gloo" | None (one process, no launcher),
    "transport": how the ranks' allreduces travel, "cpu_operations": whose allreduce runs}."""
    # HOROVOD_CONTROLLER=gloo is set by horovodrun's Gloo driver, elastic included, and by
    # lone_process_env in a process no launcher started (a world of one)
    if env.get("HOROVOD_CONTROLLER") == "gloo" and launched(env):
        return {
            "controller": "gloo",
            "transport": "TCP (Gloo)",
            "cpu_operations": env.get("HOROVOD_CPU_OPERATIONS", "gloo"),
        }
    size = next((env[k] for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE") if k in env), None)
    if size is None or int(size) < 2:
        return {"controller": None, "transport": None, "cpu_operations": None}
    local = env.get("OMPI_COMM_WORLD_LOCAL_SIZE", env.get("MPI_LOCALNRANKS"))
    transport = "shared memory (one host)" if local == size else "shared memory within a host, TCP between hosts"
    if env.get("OMPI_MCA_btl"):
        transport += f", OpenMPI btl {env['OMPI_MCA_btl']}"
    return {"controller": "mpi", "transport": transport, "cpu_operations": env.get("HOROVOD_CPU_OPERATIONS", "mpi")}


MPIRUN_TAG = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")  # mpirun --tag-output: [job,rank]<stdout>:


def joined_line(line: str) -> str:
    """A rank's line as mpirun passes it on, less that rank's tag repeated inside it. mpirun
    tags each chunk it reads from a rank, not each line: a line written in two writes (Python's
    print to an unbuffered stream, under_mpirun) or longer than its 4 KB reads comes as
    "[1,0]<stdout>:RANK_WAITS [[...[1,0]<stdout>:...]]"."""
    tag = MPIRUN_TAG.match(line)
    return tag[0] + line[tag.end() :].replace(tag[0], "") if tag else line


class MpirunNotice:
    """Passes mpirun's stderr on line by line, less its closing notice for a process that
    exited with a code the rank's own last line explains (EXPLAINED: a refusal's error line,
    an interrupt's note). The notice is two blocks between dashed lines, "Primary job
    terminated normally, but 1 process returned a non-zero exit code" and "mpirun detected that
    one or more processes exited with non-zero status ... Exit code: 2"; a block is held back
    until its closing line, then dropped if it is that notice with such a code, else passed on
    whole. exit_code: the code the notice named (mpirun exits with it too).

    A line is passed on joined (joined_line)."""

    RULE = re.compile(r"^-{20,}\s*$")

    def __init__(self, write):
        self.write, self.held, self.pending, self.exit_code = write, [], [], None

    def feed(self, line: str) -> None:
        line = joined_line(line)
        if not self.held and not self.RULE.match(line):
            self.write(line)
            return
        self.held.append(line)
        if len(self.held) > 1 and self.RULE.match(line):
            block, self.held = self.held, []
            self._end_block("".join(block), block)

    def _end_block(self, text: str, block: list) -> None:
        code = re.search(r"Exit code:\s*(-?\d+)", text)
        if code:
            self.exit_code = int(code[1])
        if "Primary job" in text and "non-zero exit code" in text:
            self.pending = block  # held until the next block names the code
        elif "exited with non-zero status" in text and code and int(code[1]) in EXPLAINED:
            self.pending = []
        else:
            for line in self.pending + block:
                self.write(line)
            self.pending = []

    def flush(self) -> None:
        for line in self.pending + self.held:
            self.write(line)
        self.held, self.pending = [], []
