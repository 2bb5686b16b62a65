"""How a training process takes Ctrl-C and SIGTERM (training/interrupts.py), in this process:
at once outside held sections, after them inside; while a call blocks in another thread; again
where Python swallowed the first raise, without a word; and an error after a signal, or a peer
gone just before it, is the interrupt. In a process of its own: while train.py imports, at once."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from deepdensity.launch import signals
from deepdensity.training import interrupts
from deepdensity.utils.errors import Interrupted
from tests.support import ROOT


def signal_soon(signum=signal.SIGTERM, after=0.2) -> threading.Timer:
    timer = threading.Timer(after, os.kill, (os.getpid(), signum))
    timer.start()
    return timer


def test_a_signal_waits_for_the_next_point_that_takes_it():
    with interrupts.handling():
        signal_soon(after=0.05).join()
        time.sleep(0.1)  # the handler ran here: recorded, not raised
        assert interrupts.pending() == 143
        with pytest.raises(Interrupted) as e:
            interrupts.take_pending()
    assert e.value.code == 143


def test_in_an_opened_window_a_signal_is_raised_where_the_process_is():
    with interrupts.handling(), pytest.raises(Interrupted) as e:
        with interrupts.opened():
            signal_soon(signal.SIGINT)
            time.sleep(5)
    assert e.value.code == 130


def test_a_held_section_ends_before_the_signal_is_raised():
    finished = []
    with interrupts.handling(), pytest.raises(Interrupted) as e:
        with interrupts.opened(), interrupts.held():
            signal_soon(signal.SIGINT, after=0.05).join()
            time.sleep(0.1)
            interrupts.take_pending()  # held: no point takes it
            finished.append(True)
    assert finished == [True] and e.value.code == 130


def test_a_call_blocked_in_another_thread_does_not_hold_the_signal_back():
    start = time.monotonic()
    with interrupts.handling():
        with pytest.raises(Interrupted):
            signal_soon()
            interrupts.while_waiting(lambda: time.sleep(5))
        assert time.monotonic() - start < 2
        assert interrupts.stuck(), "the call still runs: the process must end without its exit handlers"


def test_a_call_that_ends_gives_its_value_or_its_error():
    with interrupts.handling():
        assert interrupts.while_waiting(lambda: 42) == 42
        with pytest.raises(ZeroDivisionError):
            interrupts.while_waiting(lambda: 1 / 0)
    assert not interrupts.stuck()


class RaisesInDel:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # the handler runs here, inside __del__, where Python cannot raise


def test_a_raise_python_swallowed_is_raised_again_at_the_next_point_without_a_word(capsys):
    with interrupts.handling():
        with pytest.raises(Interrupted):
            with interrupts.opened():
                RaisesInDel()  # collected at once: its __del__ gets the signal, and drops it
                assert interrupts.pending() == 143
            # the end of the window is a point that takes it
    assert "Exception ignored" not in capsys.readouterr().err


class FailsInDelAfterTheSignal:
    """What CPython reported when the handler raised inside the import machinery's lock
    callbacks: another error, the handler's Interrupted as its context."""

    raised = []

    def __del__(self):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
        except Interrupted as e:
            FailsInDelAfterTheSignal.raised.append("SystemError")
            raise SystemError("returned a result with an exception set") from e


def test_an_error_python_swallowed_after_a_signal_is_not_printed_either(monkeypatch):
    """Python's hook for what it cannot raise, as `handling` finds it, records what reaches it
    (pytest's own hook would turn it into a warning, not print it)."""
    reached = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: reached.append(type(u.exc_value).__name__))
    with interrupts.handling():
        with pytest.raises(Interrupted):
            with interrupts.opened():
                FailsInDelAfterTheSignal()
    assert FailsInDelAfterTheSignal.raised == ["SystemError"] and reached == []
    # with no signal received, such an error is the program's own, and shown
    with interrupts.handling():
        SystemErrorInDel()
    assert reached == ["SystemError"]


class SystemErrorInDel:
    def __del__(self):
        raise SystemError("a bug of its own")


def test_after_a_signal_any_error_is_the_interrupt_and_is_raised_no_more():
    with interrupts.handling():
        with pytest.raises(Interrupted), interrupts.opened():
            signal_soon(after=0.01).join()
            time.sleep(1)
        assert interrupts.settle(RuntimeError("MISMATCH of original and normalized active exception types")) == 143
        interrupts.take_pending()  # settled: nothing more is raised
    assert interrupts.settle(ValueError("a bug")) is None, "no signal in a new block: an error of its own"


def test_a_rank_whose_peers_left_waits_for_its_own_signal(monkeypatch):
    monkeypatch.setenv("HOROVOD_SIZE", "2")
    gone = RuntimeError("Horovod has been shut down. This was caused by an exception on one of the ranks")
    with interrupts.handling():
        start = time.monotonic()
        assert interrupts.settle(ValueError("a bug of its own")) is None
        assert time.monotonic() - start < 0.5, "an error of its own is not kept waiting"
        signal_soon(after=0.3)
        assert interrupts.settle(gone) == 143
    with interrupts.handling():
        start = time.monotonic()
        assert interrupts.settle(gone) is None, "no signal came: a real failure"
        assert time.monotonic() - start >= interrupts.PEER_WAIT_S


@pytest.mark.parametrize(
    "signum, rank, written",
    [
        (signal.SIGINT, "0", b"\r\x1b[K^C\n"),
        (signal.SIGTERM, "0", b"\r\x1b[K"),
        (signal.SIGINT, "1", b""),
    ],
)
def test_on_a_terminal_ctrl_c_gets_a_line_of_its_own(monkeypatch, signum, rank, written):
    master, slave = os.openpty()
    monkeypatch.setenv("HOROVOD_RANK", rank)
    with open(slave, "w") as tty:
        monkeypatch.setattr("sys.stderr", tty)
        signals.tidy_terminal(signum)
    os.set_blocking(master, False)
    try:
        got = os.read(master, 100)
    except OSError:  # nothing written: EAGAIN, or EIO once the other end is closed
        got = b""
    os.close(master)
    assert got == written.replace(b"\n", b"\r\n")  # the terminal's own newline translation


# train.py's first lines, then 60 s that stand for its imports (about 0.3 s here, seconds on a
# loaded host); the signal is sent once the handlers are in place
WHILE_IMPORTING = """
import os, signal, sys, time
from deepdensity.training import interrupts
interrupts.hold_early(sys.argv[1:])
os.kill(os.getpid(), int(os.environ["SIGNAL"]))
time.sleep(60)
print("the imports went on", file=sys.stderr)
"""
NOT_A_LAUNCH = ("HOROVOD_", "OMPI_", "PMI_", "DEEPDENSITY_")


@pytest.mark.parametrize(
    "launcher, signum, code, said",
    [
        (
            {},
            signal.SIGTERM,
            143,
            "interrupted: no epoch finished; start again with the same command: "
            "python train.py --mode strong --out {out}",
        ),
        (
            {},
            signal.SIGINT,
            130,
            "interrupted: at epoch 3, checkpointed in {out}; continue with: "
            "python train.py --mode strong --out {out} --resume",
        ),
        (
            {"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2"},
            signal.SIGHUP,
            129,
            "interrupted: no epoch finished; start again with the same command: "
            "horovodrun -np 2 python train.py --mode strong --out {out}",
        ),
        ({"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"}, signal.SIGTERM, 143, ""),
        # deepdensity launch's relayed interrupt: exit 0 (a non-zero one starts mpirun's kill)
        (
            {
                "OMPI_COMM_WORLD_RANK": "0",
                "OMPI_COMM_WORLD_SIZE": "2",
                "DEEPDENSITY_LAUNCH_PREFIX": "python -m deepdensity launch -np 2 ",
            },
            signals.RELAYED,
            0,
            "interrupted: at epoch 3, checkpointed in {out}; continue with: "
            "python -m deepdensity launch -np 2 python train.py --mode strong --out {out} --resume",
        ),
    ],
)
def test_while_train_py_imports_a_signal_ends_it_at_once_in_its_one_line(tmp_path, launcher, signum, code, said):
    """Issue 70: mpirun SIGKILLs a rank 2 s after a Ctrl-C reaches it, and a rank still importing
    its modules on a loaded host took the signal only after them, and died without a word. Before
    the run has written anything, the signal ends the process at once, rank 0 saying where the
    run stands (from the checkpoint an earlier start left, where there is one) and the command
    that goes on; the other ranks in silence."""
    out = tmp_path / "run"
    if "checkpointed" in said:
        out.mkdir()
        (out / "state.json").write_text('{"epoch": 2, "status": "running"}')
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(NOT_A_LAUNCH)},
        **launcher,
        "SIGNAL": str(int(signum)),
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.run(
        [sys.executable, "-c", WHILE_IMPORTING, "--mode", "strong", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (proc.returncode, proc.stderr) == (code, said.format(out=out) + "\n" if said else ""), proc.stderr
    assert proc.stdout == ""
