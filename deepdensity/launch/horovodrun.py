"""`deepdensity launch HOROVODRUN-OPTIONS COMMAND...`: horovodrun, with this project's manners.

    python -m deepdensity launch -np 2 python train.py --mode weak --config configs/smoke.yaml
    python -m deepdensity launch -np 4 -H node1:2,node2:2 -- python train.py --mode strong

horovodrun ends every job in which a process exited non-zero with its own Python traceback
and exit 1. A deepdensity command that refuses its input (a reused --out, settings changed on
resume, ranks that disagree) prints one line on rank 0 and exits 2, so under plain horovodrun
that line is followed by the launcher's traceback. `launch` runs the same horovodrun with the
same options, passes its output on as it comes, drops that traceback where a rank's own exit
explains it, and exits with that rank's code. It also tells the ranks how they were started,
so that the resume command a run prints on Ctrl-C starts with this `launch` and its options.
Ctrl-C, SIGTERM and SIGHUP are passed on to every rank, under MPI as under Gloo (relay.py):
the terminal's '^C' stands on a line of its own, rank 0's line (where the run stands) is the
last, without horovodrun's 'Process N exit with status code 143.' notes, no process of the job
is left, and the exit status is the signal's (130, 143, 129); an interrupt before horovodrun
started any rank is one line instead of horovodrun's KeyboardInterrupt traceback. A job horovodrun refuses
before it starts a rank (a host it cannot
reach by ssh, a host discovery script that fails, a network interface it cannot find) is one
`error:` line naming the host or the script and the cause, and exit 2.

Where Horovod was built with MPI (make install), jobs run under MPI, as horovodrun's own
default, and mpirun's closing notice is dropped as the traceback is; `--gloo` or
DEEPDENSITY_CONTROLLER=gloo runs them under Gloo, and elastic jobs always are (controllers.py).

The command starts after `--`, or else at its first word that is a Python interpreter, a .py
script or `deepdensity`.
"""

from __future__ import annotations

import functools
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from deepdensity.launch import continuing, controllers, relay
from deepdensity.launch.hosts import check_hosts
from deepdensity.launch.launcher_output import RANK_LINE, LastWords, LauncherTraceback, ProcessExits
from deepdensity.launch.signals import CODES as INTERRUPT_CODES
from deepdensity.utils.args import version
from deepdensity.utils.errors import EXIT_SIGINT, EXIT_SIGTERM, LAUNCH_PREFIX_ENV, UserError, command
from deepdensity.utils.native_logs import native_log_pattern

USAGE = "deepdensity launch HOROVODRUN-OPTIONS [--] COMMAND..."
# horovodrun's own refusals before it starts a rank (Horovod 0.28, runner/launch.py, driver/,
# elastic/): the cause above its traceback, the traceback's last line, a thread's traceback
SSH_FAILED = re.compile(r"^ssh not successful for host (\S+?):?\s*$")
RAISED = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception): (.*)")
TRACEBACK_START = ("Traceback (most recent call last):", "Exception in thread ")
# elastic's last words when its discovery thread failed: the cause is elsewhere
JOB_SHUT_DOWN = "Job has been shutdown"
# horovodrun's argparse refusing its own options (then its usage, which says less)
OPTIONS_REFUSED = re.compile(r"^horovodrun: error: (.*)")
# mpirun's closing notice (controllers.MpirunNotice): a rank ran, so nothing was refused at the start
MPIRUN_NOTICE = ("Primary job", "mpirun detected", "mpirun noticed")


def is_command_start(word: str) -> bool:
    """Does `word` start the command horovodrun runs (rather than being one of its options)?"""
    name = os.path.basename(word)
    return name.startswith("python") or name.endswith(".py") or name == "deepdensity"


def split_command(argv: list) -> tuple:
    """(horovodrun's options, the command): at `--` if there is one, else at the first word
    that starts a command (is_command_start)."""
    if "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    cut = next((i for i, word in enumerate(argv) if is_command_start(word)), len(argv))
    return argv[:cut], argv[cut:]


class StartRefusal:
    """horovodrun's own lines, stdout's and stderr's, held until a rank speaks. A job horovodrun
    refuses before it starts a rank (a host it cannot reach by ssh, a host discovery script that
    fails, a network interface it cannot find) ends in its Python traceback with the cause in
    the lines above it; `cause` makes them one line. Once a rank speaks, or when the job was not
    refused, the held lines are passed on in the order they came (`flush`). The two streams are
    read by two threads, hence the lock."""

    def __init__(self):
        self.held, self.started, self.lock = [], False, threading.Lock()

    def feed(self, text: str, emit) -> None:
        """`text`: a line as read; `emit()` passes the line on to its own stream."""
        with self.lock:
            if not self.started and RANK_LINE.match(text):
                self.started = True
                self._pass_on()
            if self.started:
                emit()
            else:
                self.held.append((text, emit))

    def flush(self) -> None:
        with self.lock:
            self.started = True
            self._pass_on()

    def _pass_on(self) -> None:
        for _, emit in self.held:
            emit()
        self.held = []

    def refused(self) -> bool:
        """Did horovodrun refuse the job before any rank ran? Its refusals end in its Python
        traceback or argparse's error line; a job whose ranks ran ends otherwise (under Gloo in
        its exit notes, under MPI in mpirun's notice), even when no rank said a word. A thread's
        traceback counts too: elastic's discovery thread and the main thread write at once, and
        'Exception in thread ' may be all that starts a line."""
        texts = [text for text, _ in self.held]
        ran = any(mark in text for text in texts for mark in MPIRUN_NOTICE)
        return not ran and any(t.startswith(TRACEBACK_START) or OPTIONS_REFUSED.match(t) for t in texts)

    def cause(self, options: list) -> str:
        return refusal_cause([text for text, _ in self.held], options)


def option_value(options: list, name: str):
    """The value of horovodrun option `name` (`--name VALUE` or `--name=VALUE`), or None."""
    for i, word in enumerate(options):
        if word == name and i + 1 < len(options):
            return options[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def refusal_cause(lines: list, options: list) -> str:
    """One line from what horovodrun printed when it refused a job before starting any rank:
    the host it could not reach, or the discovery script that failed, named, with the cause
    horovodrun gave above its traceback; else the traceback's own last words."""
    refused = next((m[1].strip() for m in map(OPTIONS_REFUSED.match, lines) if m), None)
    if refused:
        return f"horovodrun refused its options: {refused} (horovodrun --help lists them)"
    above = []  # horovodrun's lines above its first traceback
    for line in lines:
        if line.startswith(TRACEBACK_START):
            break
        if line.strip():
            above.append(line.strip())
    raised = [m[1] for m in (RAISED.match(line.strip()) for line in lines) if m]
    told = [r for r in raised if not r.startswith(JOB_SHUT_DOWN)]
    ssh = next((m for m in map(SSH_FAILED.match, above) if m), None)
    if ssh:
        detail = "; ".join(line for line in above if not SSH_FAILED.match(line)) or "no reason given"
        hosts = next(
            (
                f"{flag} {option_value(options, flag)}"
                for flag in ("--hostfile", "-hostfile")
                if option_value(options, flag)
            ),
            "-H",
        )
        return (
            f"horovodrun could not reach host {ssh[1]} by ssh: {detail} (every host of {hosts} must accept "
            f"`ssh HOST true` without a password)"
        )
    script = option_value(options, "--host-discovery-script")
    if script:
        detail = "; ".join(above) or (told[0] if told else "it printed nothing")
        return (
            f"horovodrun's host discovery script {script} failed: {detail} (run it alone: it must print "
            f"one host:slots line per host and exit 0)"
        )
    detail = told[-1] if told else (raised[-1] if raised else "no reason given")
    nic = option_value(options, "--network-interface")
    if nic and "interface" in detail.lower():
        detail += f" (--network-interface {nic}: an interface every host has; `ip -brief address` lists them)"
    return f"horovodrun did not start the job: {detail}" + (f" ({'; '.join(above)})" if above else "")


def launch_prefix(options: list) -> str:
    """The command prefix a rank prints in front of a resume command: this launch, its options."""
    return shlex.join(["python", "-m", "deepdensity", "launch", *options]) + " "


# another horovodrun than this Python's (a cluster module's, or a test's stand-in)
HOROVODRUN_ENV = "DEEPDENSITY_HOROVODRUN"


def horovodrun_path() -> str:
    """The horovodrun HOROVODRUN_ENV names, else this Python's environment's (the Horovod built
    against its TensorFlow), else the one on PATH."""
    if os.environ.get(HOROVODRUN_ENV):
        return os.environ[HOROVODRUN_ENV]
    beside = Path(sys.executable).with_name("horovodrun")
    found = str(beside) if os.access(beside, os.X_OK) else (shutil.which("horovodrun") or "")
    if not found:
        raise UserError("horovodrun was not found next to this Python or on PATH; install Horovod (make install)")
    return found


@command
def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    options, cmd = _options_and_command(argv)
    # Horovod: a host name that does not resolve would end horovodrun and every rank in a silent abort
    check_hosts({})
    # Horovod: MPI where built (horovodrun's default), --gloo or DEEPDENSITY_CONTROLLER=gloo for Gloo;
    # elastic on Gloo (controllers.py)
    options, controller_env, note = controllers.choose(options, os.environ, horovodrun_path())
    if note:
        print(note, file=sys.stderr)
    env = {**controller_env, **os.environ, LAUNCH_PREFIX_ENV: launch_prefix(options)}
    ended = threading.Event()
    last_words = LastWords(sys.stderr.write)
    mpirun = controllers.MpirunNotice(last_words.write)  # Horovod: mpirun's notice, under MPI
    refusal = StartRefusal()
    launcher = LauncherTraceback(lambda line: refusal.feed(line, functools.partial(mpirun.feed, line)))
    exits = ProcessExits(
        lambda line: refusal.feed(line.decode(errors="replace"), functools.partial(_write_stdout, line))
    )
    passing_on = relay.Relay(ended)
    signals = relay.take_interrupts(passing_on, launcher.quiet)  # set before horovodrun starts
    proc = _start_horovodrun(options, cmd, env)
    passing_on.attach(proc)
    stdout_reader = threading.Thread(target=lambda: [exits.feed(line) for line in proc.stdout], daemon=True)
    stdout_reader.start()
    _pass_on_stderr(proc, launcher)
    ended.set()
    launcher.flush()
    code, _ = proc.wait(), stdout_reader.join()
    if (
        code
        and not signals
        and not refusal.started
        and launcher.exit_code is None
        and not exits.ended
        and refusal.refused()
    ):
        raise UserError(refusal.cause(options))  # Horovod: horovodrun refused the job before any rank ran
    refusal.flush()
    mpirun.flush()
    last_words.flush()  # after anything mpirun's notice held: the note is the last line
    # Horovod: a job whose rank 0 did not say where the run stands (continuing.py)
    interrupted = signals and (
        launcher.rank_interrupted
        or continuing.say_where_it_stands(
            argv, cmd, launch_prefix(options), spoke=launcher.ranks_seen or exits.ranks_seen
        )
    )
    return exit_code(code, launcher.exit_code or mpirun.exit_code, signals, bool(interrupted))


def _options_and_command(argv: list) -> tuple:
    """(horovodrun's options, the command) of launch's words (split_command); --help and
    --version are answered here, and words without a command refused."""
    if argv[:1] in (["-h"], ["--help"]):
        print(f"usage: {USAGE}\n\n" + __doc__.split("\n", 1)[1].strip())
        raise SystemExit(0)
    if argv[:1] == ["--version"]:
        print(version())
        raise SystemExit(0)
    options, cmd = split_command(argv)
    if not cmd:
        raise UserError(
            f"no command to run in {shlex.join(argv)!r}; usage: {USAGE}, e.g. "
            f"deepdensity launch -np 2 python train.py --mode weak"
        )
    return options, cmd


def _start_horovodrun(options: list, cmd: list, env: dict) -> subprocess.Popen:
    """horovodrun started on `cmd`, its stdout and stderr piped to this process."""
    # Horovod: horovodrun in a process group of its own, so that a terminal's Ctrl-C reaches this
    # process alone, which passes every interrupt on (relay.py); no terminal input, which a
    # process outside the foreground group may not read
    return subprocess.Popen(
        [horovodrun_path(), *options, *cmd],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        process_group=0,
    )


def _pass_on_stderr(proc: subprocess.Popen, launcher: LauncherTraceback) -> None:
    """horovodrun's stderr, line by line as it comes, to `launcher`, until horovodrun closes it."""
    # horovodrun's own process imports TensorFlow (MPI's build check), whose start-up lines from
    # TensorFlow 2.17 on come through an absl that TF_CPP_MIN_LOG_LEVEL does not reach: dropped
    # here as a training process drops its own (console.py); the ranks' lines come tagged
    native = native_log_pattern(os.environ.get("TF_CPP_MIN_LOG_LEVEL"))
    native = re.compile(native) if native else None
    for line in io.TextIOWrapper(proc.stderr, errors="replace", newline=""):
        if native is None or not native.search(line):
            launcher.feed(line)


def _write_stdout(line: bytes) -> None:
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()


def exit_code(code: int, rank_code, signals: list, early: bool) -> int:
    """This launch's exit status: horovodrun's, or for a job a process ended, that process's
    (a rank killed by a signal is reported as minus its number: the shell's 128 + N); an
    interrupt, as the first signal received (130 for Ctrl-C, though horovodrun passed SIGTERM)."""
    if code and rank_code:
        code = rank_code if rank_code > 0 else 128 - rank_code
    code = 128 - code if code < 0 else code
    if signals and (early or code in (EXIT_SIGINT, EXIT_SIGTERM)):
        return INTERRUPT_CODES.get(signals[0], code)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
