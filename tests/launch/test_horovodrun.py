"""`deepdensity launch`: horovodrun whose refusals end in one line and the rank's exit code."""

import re
import sys

import pytest

from deepdensity.launch import controllers, horovodrun
from deepdensity.launch.horovodrun import launch_prefix, split_command
from deepdensity.launch.launcher_output import LastWords, LauncherTraceback, ProcessExits
from deepdensity.utils.errors import LAUNCH_PREFIX_ENV, launcher_prefix
from deepdensity.utils.files import mark_folder
from tests.support import SMOKE, fed_through, run

# What horovodrun 0.28 prints when a rank exits 2 (the message of runner/gloo_run.py), after the
# rank's own lines
HOROVOD_DETECTED = (
    "Horovod detected that one or more processes exited with non-zero status, thus causing the job to be terminated. "
    "The first process to do so was:"
)
LAUNCHER_END = f"""\
Traceback (most recent call last):
  File "/venv/bin/horovodrun", line 8, in <module>
    sys.exit(run_commandline())
             ^^^^^^^^^^^^^^^^^
  File "/venv/lib/python3.11/site-packages/horovod/runner/gloo_run.py", line 284, in launch_gloo
    raise RuntimeError('Horovod detected that one or more processes exited with non-zero '
RuntimeError: {HOROVOD_DETECTED}
Process name: 0
Exit code: 2

"""


def _filtered(text: str):
    return fed_through(LauncherTraceback, text)


@pytest.mark.parametrize(
    "argv, options, command",
    [
        (["-np", "2", "python", "train.py", "--mode", "weak"], ["-np", "2"], ["python", "train.py", "--mode", "weak"]),
        (
            ["-np", "4", "-H", "a:2,b:2", "/venv/bin/python3.11", "-m", "deepdensity", "train"],
            ["-np", "4", "-H", "a:2,b:2"],
            ["/venv/bin/python3.11", "-m", "deepdensity", "train"],
        ),
        (["-np", "2", "train.py", "--mode", "strong"], ["-np", "2"], ["train.py", "--mode", "strong"]),
        (
            ["-np", "2", "--host-discovery-script", "./hosts.sh", "deepdensity", "train"],
            ["-np", "2", "--host-discovery-script", "./hosts.sh"],
            ["deepdensity", "train"],
        ),
        (["-np", "2", "--", "./my_wrapper", "x"], ["-np", "2"], ["./my_wrapper", "x"]),
        (["-np", "2"], ["-np", "2"], []),
    ],
)
def test_the_command_starts_at_a_python_word_or_after_the_separator(argv, options, command):
    assert split_command(argv) == (options, command)


def test_the_launchers_traceback_goes_and_the_ranks_exit_code_stays():
    rank_lines = "[0]<stderr>:error: runs/x already holds a run; pass --resume or another --out\n"
    said, code = _filtered(rank_lines + LAUNCHER_END)
    assert said == rank_lines
    assert code == 2


def test_any_other_traceback_is_passed_on_whole():
    other = 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nValueError: bad\nnext line\n'
    assert _filtered(other) == (other, None)
    # and one cut short by the end of the stream
    cut = 'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
    assert _filtered(cut) == (cut, None)


def test_lines_after_the_launchers_message_are_kept():
    said, code = _filtered(LAUNCHER_END.replace("Exit code: 2\n", "Exit code: -15\nsomething else\n"))
    assert (said, code) == ("something else\n\n", -15)


def test_ranks_started_by_launch_print_its_command():
    prefix = launch_prefix(["-np", "2", "-H", "a:1,b:1"])
    assert prefix == "python -m deepdensity launch -np 2 -H a:1,b:1 "
    assert launcher_prefix({LAUNCH_PREFIX_ENV: prefix, "HOROVOD_SIZE": "2"}) == prefix
    assert launcher_prefix({"HOROVOD_SIZE": "2"}) == "horovodrun -np 2 "


def test_no_command_is_one_line_and_exit_2(capsys):
    assert horovodrun.main(["-np", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no command to run") and err.count("\n") == 1, err


# rank 0's tag on its lines: Gloo's driver and mpirun --tag-output (job 1, rank 0)
RANK0_TAG = {"gloo": "[0]<stderr>:", "mpi": "[1,0]<stderr>:"}


@pytest.mark.slow
@pytest.mark.parametrize("controller", controllers.CONTROLLERS)
def test_a_refusal_under_launch_is_one_line_and_exit_2(tmp_path, controller):
    """The same refusal as without a launcher (a folder holding another run), under two ranks
    and each controller: one error line from rank 0, no traceback or mpirun notice, exit 2;
    under MPI the error line is the last."""
    if controller not in controllers.built(horovodrun.horovodrun_path()):
        pytest.skip(f"this Horovod was built without {controller.upper()} (horovodrun --check-build)")
    out = tmp_path / "taken"
    mark_folder(out, "run")  # a run's folder, as a run marks it
    # an epoch's row makes it a run; an empty metrics file (a run stopped before epoch 1) would not
    (out / "metrics.jsonl").write_text('{"epoch": 1, "val_loss": 0.1}\n')
    proc = run(
        [
            sys.executable,
            "-m",
            "deepdensity",
            "launch",
            controllers.FLAGS[controller],
            "-np",
            "2",
            sys.executable,
            "train.py",
            "--mode",
            "strong",
            "--config",
            SMOKE,
            "--out",
            str(out),
        ],
        timeout=300,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    said = proc.stderr
    assert "Traceback" not in said and "mpirun" not in said, said
    errors = [line for line in said.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].startswith(RANK0_TAG[controller] + "error:"), said
    assert errors[0].endswith("--out"), said
    if controller == "mpi":
        # the last line too. Under Gloo, horovodrun's shell around rank 1 may still print
        # "[1]<stderr>:Terminated" after it, when rank 0's exit ended rank 1 before its own refusal
        assert said.rstrip("\n").splitlines()[-1] == errors[0], said


def test_horovodruns_notes_on_a_rank_its_own_line_explains_go_and_others_stay():
    said = []
    exits = ProcessExits(said.append)
    for line in (
        b"[0]<stdout>:epoch    1  loss 0.1\n",
        b"Process 0 exit with status code 143.\n",
        b"Process 1 exit with status code 2.\n",
        b"Terminating remaining workers after failure of Process 1.\n",
        b"Process 2 exit with status code 139.\n",
        b"Terminating remaining workers after failure of Process 2.\n",
    ):
        exits.feed(line)
    assert said == [
        b"[0]<stdout>:epoch    1  loss 0.1\n",
        b"Process 2 exit with status code 139.\n",
        b"Terminating remaining workers after failure of Process 2.\n",
    ]


def test_horovodruns_notes_printed_as_one_line_are_read_one_by_one():
    """Two of its per-process threads printing at once (seen in CI): one line, then the empty
    line print() wrote apart. Each note is judged on its own; the empty line goes with them."""
    said = []
    exits = ProcessExits(said.append)
    for line in (
        b"[0]<stderr>:interrupted: at epoch 12\n",
        b"Process 0 exit with status code 143.Process 1 exit with status code 143.\n",
        b"\n",
        b"Process 0 exit with status code 143.Process 2 exit with status code 139.\n",
        b"\n",
        b"\n",
    ):
        exits.feed(line)
    assert said == [b"[0]<stderr>:interrupted: at epoch 12\n", b"Process 2 exit with status code 139.\n", b"\n"]
    assert exits.explained == {b"0", b"1"}
    # a rank's own line that happens to hold such words stays whole, and owes no empty line
    exits.feed(b"[0]<stdout>:see the log.Process 1 exit with status code 143.\n")
    exits.feed(b"\n")
    assert said[-2:] == [b"[0]<stdout>:see the log.Process 1 exit with status code 143.\n", b"\n"]


def test_after_ctrl_c_horovodruns_own_lines_go_and_the_ranks_stay():
    """A Ctrl-C while horovodrun's interpreter starts: its fatal error and traceback (its own,
    untagged lines) go; a rank's line stays and says the run was interrupted."""
    early = (
        "Fatal Python error: init_import_site: Failed to import the site module\n"
        'Traceback (most recent call last):\n  File "<frozen site>", line 616, in <module>\nKeyboardInterrupt\n'
    )
    said = []
    launcher = LauncherTraceback(said.append)
    launcher.quiet_own = True
    for line in (early + "[0]<stderr>:interrupted: no epoch finished\n").splitlines(keepends=True):
        launcher.feed(line)
    launcher.flush()
    assert said == ["[0]<stderr>:interrupted: no epoch finished\n"]
    assert launcher.ranks_seen and launcher.rank_interrupted
    quiet = LauncherTraceback(said.append)
    quiet.feed("[1,0]<stdout>:epoch    1  loss 0.1\n")  # mpirun's tag
    assert quiet.ranks_seen and not quiet.rank_interrupted


@pytest.mark.parametrize(
    "code, rank_code, signals, early, want",
    [
        (1, 143, [2], False, 130),  # Ctrl-C: horovodrun SIGTERMed the ranks, the shell expects 130
        (1, 143, [15], False, 143),  # a scheduler's SIGTERM
        (1, 2, [], False, 2),  # a refusal
        (-2, None, [2], True, 130),  # horovodrun itself stopped by Ctrl-C before any rank
        (1, -9, [], False, 137),  # a rank killed
        (0, None, [2], False, 0),  # Ctrl-C after the run had ended
    ],
)
def test_launch_exits_as_a_shell_expects(code, rank_code, signals, early, want):
    assert horovodrun.exit_code(code, rank_code, signals, early) == want


# What horovodrun 0.28 printed, stdout and stderr as they came, when it refused a job before
# starting a rank (recorded on this project's machines; frames shortened)
SSH_REFUSED = """\
ssh not successful for host nohost.invalid:
ssh: Could not resolve hostname nohost.invalid: Name or service not known

Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/horovod/runner/launch.py", line 655, in _run_static
    raise RuntimeError('could not connect to some hosts via ssh')
RuntimeError: could not connect to some hosts via ssh
"""
DISCOVERY_FAILED = """\
/bin/sh: 1: /nonexistent: not found
Exception in thread Thread-1 (_discover_hosts):
Traceback (most recent call last):
  File "/usr/lib/python3.11/threading.py", line 1045, in _bootstrap_inner
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/horovod/runner/elastic/driver.py", line 175, in wait_for_available_slots
    raise RuntimeError('Job has been shutdown, see above error messages for details.')
RuntimeError: Job has been shutdown, see above error messages for details.
"""
DISCOVERY_GARBLED = """\
Exception in thread Thread-1 (_discover_hosts):
Traceback (most recent call last):
Traceback (most recent call last):
    self.run()
TypeError: unsupported operand type(s) for +: 'int' and 'NoneType'
RuntimeError: Job has been shutdown, see above error messages for details.
"""
# the discovery thread and the main thread writing at once (seen in CI): no line starts with
# "Traceback", the thread's name lands further down
DISCOVERY_INTERLEAVED = """\
no hosts in this allocation
Exception in thread Traceback (most recent call last):
  File "/venv/bin/horovodrun", line 6, in <module>
    sys.exit(run_commandline())
Thread-1 (_discover_hosts):
  File "/venv/lib/python3.11/site-packages/horovod/runner/elastic/driver.py", line 175, in wait_for_available_slots
    raise RuntimeError('Job has been shutdown, see above error messages for details.')
RuntimeError: Job has been shutdown, see above error messages for details.
"""
NO_INTERFACE = """\
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/horovod/runner/driver/driver_service.py", line 211, in get_local_interfaces
    raise ValueError('No interface is found for address 127.0.0.1.')
ValueError: No interface is found for address 127.0.0.1.
"""


@pytest.mark.parametrize(
    "printed, options, want",
    [
        (
            SSH_REFUSED,
            ["-np", "2", "-H", "nohost.invalid:2"],
            "horovodrun could not reach host nohost.invalid by ssh: ssh: Could not resolve hostname nohost.invalid: "
            "Name or service not known (every host of -H must accept `ssh HOST true` without a password)",
        ),
        (
            SSH_REFUSED,
            ["-np", "2", "--hostfile", "hosts.txt"],
            "horovodrun could not reach host nohost.invalid by ssh: ssh: Could not resolve hostname nohost.invalid: "
            "Name or service not known "
            "(every host of --hostfile hosts.txt must accept `ssh HOST true` without a password)",
        ),
        (
            DISCOVERY_FAILED,
            ["-np", "2", "--host-discovery-script", "/nonexistent"],
            "horovodrun's host discovery script /nonexistent failed: /bin/sh: 1: /nonexistent: not found "
            "(run it alone: it must print one host:slots line per host and exit 0)",
        ),
        (
            DISCOVERY_GARBLED,
            ["--host-discovery-script=./hosts.sh", "-np", "2"],
            "horovodrun's host discovery script ./hosts.sh failed: unsupported operand type(s) for +: 'int' and "
            "'NoneType' (run it alone: it must print one host:slots line per host and exit 0)",
        ),
        (
            DISCOVERY_INTERLEAVED,
            ["-np", "2", "--host-discovery-script", "/tmp/hosts.sh"],
            "horovodrun's host discovery script /tmp/hosts.sh failed: no hosts in this allocation "
            "(run it alone: it must print one host:slots line per host and exit 0)",
        ),
        (
            NO_INTERFACE,
            ["-np", "2", "--network-interface", "eth9"],
            "horovodrun did not start the job: No interface is found for address 127.0.0.1. (--network-interface "
            "eth9: an interface every host has; `ip -brief address` lists them)",
        ),
        (NO_INTERFACE, ["-np", "2"], "horovodrun did not start the job: No interface is found for address 127.0.0.1."),
    ],
)
def test_a_job_horovodrun_refuses_before_any_rank_is_one_line_naming_the_cause(printed, options, want):
    assert horovodrun.refusal_cause(printed.splitlines(keepends=True), options) == want


def test_horovodruns_own_lines_wait_for_a_rank_then_pass_on_in_order():
    """Held until a rank speaks (they may be a refusal's cause), then passed on in the order
    they came, each to its own stream; after that every line goes straight on."""
    out, err, refusal = [], [], horovodrun.StartRefusal()
    refusal.feed("Filtering local host names.\n", lambda: err.append("Filtering local host names.\n"))
    refusal.feed("note on stdout\n", lambda: out.append("note on stdout\n"))
    assert (out, err) == ([], [])
    refusal.feed("[0]<stdout>:epoch 1\n", lambda: out.append("[0]<stdout>:epoch 1\n"))
    refusal.feed("later\n", lambda: err.append("later\n"))
    assert out == ["note on stdout\n", "[0]<stdout>:epoch 1\n"] and err == ["Filtering local host names.\n", "later\n"]
    assert refusal.started and refusal.held == []


@pytest.mark.slow
def test_a_failing_discovery_script_under_launch_is_one_line_and_exit_2(tmp_path):
    """Real horovodrun, elastic (a discovery script) so no ssh is needed: the script fails, no
    rank starts; launch prints one error line naming the script and what it said, exit 2."""
    script = tmp_path / "hosts.sh"
    script.write_text("#!/bin/sh\necho 'no hosts in this allocation' >&2\nexit 3\n")
    script.chmod(0o755)
    proc = run(
        [
            sys.executable,
            "-m",
            "deepdensity",
            "launch",
            "-np",
            "2",
            "--host-discovery-script",
            str(script),
            sys.executable,
            "-c",
            "pass",
        ],
        timeout=300,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "", proc.stdout
    assert proc.stderr.splitlines() == [
        f"error: horovodrun's host discovery script {script} failed: no hosts in "
        f"this allocation (run it alone: it must print one host:slots line per "
        f"host and exit 0)"
    ], proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("controller", controllers.CONTROLLERS)
def test_a_rank_that_fails_silently_is_not_taken_for_a_refusal(controller):
    """A rank ran and exited 3 without a word: the launcher's notes on it stay, and its code.
    Under Gloo horovodrun's on stdout, under MPI mpirun's notice on stderr (MPI_SILENT_RANK)."""
    if controller not in controllers.built(horovodrun.horovodrun_path()):
        pytest.skip(f"this Horovod was built without {controller.upper()} (horovodrun --check-build)")
    proc = run(
        [
            sys.executable,
            "-m",
            "deepdensity",
            "launch",
            controllers.FLAGS[controller],
            "-np",
            "2",
            sys.executable,
            "-c",
            "import sys; sys.exit(3)",
        ],
        timeout=300,
        check=False,
    )
    assert proc.returncode == 3, proc.stderr
    if controller == "gloo":
        # whichever rank horovodrun sees end first is the one it names
        assert re.search(r"^Process [01] exit with status code 3\.$", proc.stdout, re.M), proc.stdout
    else:
        assert re.search(r"^  Process name: \[\[\d+,1\],[01]\]\n  Exit code: +3$", proc.stderr, re.M), proc.stderr
    assert "error:" not in proc.stderr, proc.stderr


# What mpirun printed (Horovod built with MPI hands the job to mpirun) when a rank exited 3
# without a word: no rank line, no horovodrun traceback, mpirun's notice (OpenMPI 4.1)
MPI_SILENT_RANK = """\
-------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
-------------------------------------------------------
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[4242,1],0]
  Exit code:    3
--------------------------------------------------------------------------
"""
OPTIONS_TYPO = """\
usage: horovodrun [-h] [-v] -np NP [-cb] [--disable-cache]
                  [--start-timeout START_TIMEOUT] [--network-interface NICS]
horovodrun: error: unrecognized arguments: --bogus
"""


def _held(text: str) -> horovodrun.StartRefusal:
    refusal = horovodrun.StartRefusal()
    for line in text.splitlines(keepends=True):
        refusal.feed(line, lambda: None)
    return refusal


@pytest.mark.parametrize(
    "printed, refused",
    [
        (SSH_REFUSED, True),
        (DISCOVERY_FAILED, True),
        (DISCOVERY_INTERLEAVED, True),
        (NO_INTERFACE, True),
        (OPTIONS_TYPO, True),
        (MPI_SILENT_RANK, False),  # a rank ran: its exit code stands, not a refusal
        ("Filtering local host names.\n", False),
    ],
)
def test_only_horovodruns_own_refusals_are_taken_for_one(printed, refused):
    assert _held(printed).refused() is refused


def test_a_mistyped_option_is_argparses_message_not_its_usage():
    assert (
        horovodrun.refusal_cause(OPTIONS_TYPO.splitlines(keepends=True), ["--bogus", "-np", "2"])
        == "horovodrun refused its options: unrecognized arguments: --bogus (horovodrun --help lists them)"
    )


def test_rank_0s_interrupt_note_is_held_until_horovodrun_has_ended():
    """mpirun does not keep a rank's stdout and stderr in order: the note came out before the
    rank's last epoch lines (seen under MPI). Held to the end, it is the last line again, under
    either tag; rank 1's lines and rank 0's other stderr lines pass at once."""
    said = []
    words = LastWords(said.append)
    for line in (
        "[1,0]<stderr>:interrupted: at epoch 10, checkpointed in out\n",
        "[1,1]<stderr>:a warning\n",
        "[1,0]<stderr>:error: no such file\n",
        "[0]<stderr>:interrupted\n",
    ):
        words.write(line)
    assert said == ["[1,1]<stderr>:a warning\n", "[1,0]<stderr>:error: no such file\n"]
    said.append("[1,0]<stdout>:epoch   10  loss 0.1\n")  # late, from the other channel
    words.flush()
    assert said[-3:] == [
        "[1,0]<stdout>:epoch   10  loss 0.1\n",
        "[1,0]<stderr>:interrupted: at epoch 10, checkpointed in out\n",
        "[0]<stderr>:interrupted\n",
    ]
    words.flush()
    assert len(said) == 5, "flushed once"


# The check horovodrun runs before any rank (scripts/horovod/horovod-0.28.1-launcher.patch) asks
# the extension's C API without importing TensorFlow (seconds and its log lines per launch); its
# answers against those of the imported horovod.tensorflow, in a process of its own (TensorFlow
# cannot be imported after its libraries were loaded that way).
BUILT = ("mpi_built", "gloo_built", "nccl_built", "ddl_built", "ccl_built")
BY_C_API = f"""
import json, sys
from horovod.common import util
basics = util._c_api_without_framework("tensorflow")
print(json.dumps({{"tensorflow imported": "tensorflow" in sys.modules,
                  **{{n: bool(getattr(basics, n)()) for n in {BUILT}}}}}))
"""
BY_IMPORT = f"""
import json
import horovod.tensorflow as hvd
print(json.dumps({{n: bool(getattr(hvd, n)()) for n in {BUILT}}}))
"""


@pytest.mark.medium
def test_horovodruns_build_checks_answer_as_the_imported_extension_without_importing_tensorflow():
    import json

    def last(code: str) -> dict:
        return json.loads(run([sys.executable, "-c", code]).stdout.strip().splitlines()[-1])

    by_c_api, by_import = last(BY_C_API), last(BY_IMPORT)
    assert by_c_api.pop("tensorflow imported") is False
    assert by_c_api == by_import
    assert by_import["mpi_built"] or by_import["gloo_built"]  # make install builds one at least
    from horovod.common import util  # horovodrun's own calls, as it makes them

    assert (util.mpi_built(), util.gloo_built()) == (by_import["mpi_built"], by_import["gloo_built"])


@pytest.mark.slow
def test_horovodrun_prints_nothing_of_tensorflows_before_the_ranks():
    """The user's terminal (no TF_CPP_MIN_LOG_LEVEL): before the patch, the launcher's own check
    printed absl's and TensorFlow's start-up lines ahead of any rank's."""
    import os
    import subprocess

    from tests.support import horovodrun as horovodrun_path
    from tests.support import users_env

    env = {k: v for k, v in users_env().items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    got = subprocess.run(
        [horovodrun_path(), "-np", "1", "true"], env=env, capture_output=True, text=True, timeout=120, cwd=os.getcwd()
    )
    assert got.returncode == 0, got.stderr[-2000:]
    assert not re.search(r"absl|cpu_feature_guard|oneDNN|tensorflow", got.stdout + got.stderr, re.I), (
        got.stdout + got.stderr
    )
