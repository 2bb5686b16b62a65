"""What a run shows while it trains, on rank 0: a line per epoch and how the run ended
(`Progress`), and on a terminal a bar for the epoch in progress (`EpochBar`). Callbacks of the
run's list (fit.run_callbacks; `Progress` last, callbacks.MUST_FOLLOW)."""

from __future__ import annotations

import os
import sys
from typing import Optional

import tensorflow as tf

from deepdensity.training import interrupts


class Progress(tf.keras.callbacks.Callback):
    """One line per epoch, kept (Keras' verbose=2: what people paste into a bug report), and
    how the run ended; rank 0 only. --quiet keeps only the ending. The seconds on the line are
    the epoch's own, as Keras prints them; the run's total (time to target's clock) beside them."""

    def __init__(self, record, say, tell, lines: bool):
        super().__init__()
        self.record, self.say, self.tell, self.lines = record, say, tell, lines

    def on_epoch_end(self, epoch, logs=None):
        row, (loss, val_loss) = self.record.row, self.record.losses
        if self.lines and interrupts.pending() is None:  # after a Ctrl-C, the one line is where the run stands
            self.say(epoch_line(epoch + 1, loss, val_loss, row["lr"], self.record.epoch_seconds, row["seconds"]))

    def finish(self) -> None:
        """Print how the run ended (after the last call of fit)."""
        self.tell(self.record.final_line())


def epoch_line(
    epoch: int, loss: float, val_loss: float, lr: float, epoch_seconds: Optional[float], total_seconds: float
) -> str:
    """`epoch    3  loss 0.0071  val_loss 0.0069  lr 0.00105     0.52s  (total 6.1s)`: the epoch's
    own seconds, then the run's since its start (before a resume included)."""
    own = f"{epoch_seconds:7.2f}s" if epoch_seconds is not None else "      ?s"
    return (
        f"epoch {epoch:4d}  loss {loss:.6g}  val_loss {val_loss:.6g}  lr {lr:.6g}  {own}  (total {total_seconds:.1f}s)"
    )


class EpochBar(tf.keras.callbacks.Callback):
    """On a terminal, a bar for the epoch in progress (its steps), erased when the epoch ends so
    that the epoch's line takes its place. A callback of its own: its per-batch hook is only
    in the loop when a person watches."""

    def __init__(self, desc: str):
        super().__init__()
        self.desc, self.bar = desc, None

    def on_epoch_begin(self, epoch, logs=None):
        from tqdm import tqdm

        self.bar = tqdm(
            total=self.params.get("steps"),
            desc=f"{self.desc} epoch {epoch + 1}",
            unit="step",
            leave=False,
            file=sys.stderr,
            ncols=bar_width(),
        )

    def on_train_batch_end(self, batch, logs=None):
        self.bar.update(1)

    def on_epoch_end(self, epoch, logs=None):
        self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def bar_width() -> Optional[int]:
    """The terminal's width less 3 columns, where the terminal echoes a Ctrl-C ('^C') after the
    bar: at the full width the echo wrapped to the next line, out of reach of the erasing of the
    bar's line that puts '^C' on a line of its own (signals.tidy_terminal (launch/signals.py)). None: tqdm's own."""
    try:
        return max(20, os.get_terminal_size(sys.stderr.fileno()).columns - 3)
    except (AttributeError, ValueError, OSError):
        return None
