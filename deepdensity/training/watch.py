"""What a person watches while a run trains: TensorBoard logs, written by rank 0 only.

    tensorboard --logdir runs/

`--out DIR` gets `DIR/tb/`: one TensorBoard run per training run, its step the epoch number
the epoch line prints (1, 2, ...), so a resumed run goes on at the epoch it resumes from:

    loss/train, loss/validation   the epoch's loss and val_loss (metrics.jsonl's)
    lr                            the lr the optimizer held (metrics.jsonl's)
    policy/...                    a policy's batch facts when it has them (adaptive's
                                  global_batch and grad_noise, local's allreduces, ...)
    slices/validation cube | rendered density
                                  every `tensorboard_images_every` epochs (and the first), the
                                  central slices of four fixed validation cubes next to the
                                  densities the model renders for them, so the fine details can
                                  be seen arriving (the paper's Fig. 1)

One writer for all of it, rather than Keras's TensorBoard callback (a run `train` and a run
`validation`, and the images a third): `--logdir runs/` then lists each training run once
(TensorBoard selects no run at all by default past 40 of them), and a run's directory has one
event file being written, the one TensorBoard polls for new events (it reads only the newest
file of a directory as it grows, unless started with --reload_multifile). Train and
validation losses are two cards side by side rather than two lines of one card.

The Time Series page pins nothing at first: it sorts cards by tag name (digits as numbers,
`/` before any other character) and groups them by the tag's part before the first `/`, in
the order of their first card. The groups here sort loss, lr, policy, slices: the losses are
the first cards a person sees, the images last.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf

from deepdensity.training.callbacks import ROW_EXTRAS

IMAGE_CUBES = 4  # validation cubes shown, the first of the split (fixed across epochs)
UPSCALE = 8  # pixels per voxel in the image, so a 16^3 slice is 128 px wide

# {the epoch's logs key (put there by Keras, EpochRow or a policy's callback): its tag}
SCALARS = {"loss": "loss/train", "val_loss": "loss/validation", "lr": "lr", **{k: f"policy/{k}" for k in ROW_EXTRAS}}
IMAGE_TAG = "slices/validation cube | rendered density"


def tensorboard_callbacks(out: Path, val_x: np.ndarray, images_every: int) -> list:
    """The callbacks for rank 0; they must run after the one that puts `lr` in the logs."""
    return [EpochSummaries(Path(out) / "tb", val_x[:IMAGE_CUBES], images_every)]


def slice_grid(cubes: np.ndarray, rendered: np.ndarray) -> np.ndarray:
    """(H, W, 1) image in [0, 1] from cubes and renderings of shape (B, G, ..., G, 1): one
    row per cube, its central slice (the middle of the first grid axis; 2-D data whole,
    1-D data as a strip) left and the rendered density's right, both on the cube's scale."""

    def central(x):  # (G, ..., G, 1) -> a 2-D image
        x = x[..., 0]
        return x[x.shape[0] // 2] if x.ndim == 3 else x[None] if x.ndim == 1 else x

    rows = []
    for cube, dens in zip(cubes, rendered):
        a, b = central(cube), central(dens)
        top = max(float(a.max()), 1e-12)
        pair = np.concatenate([a, np.full((a.shape[0], 1), 1.0 * top), b], axis=1) / top
        rows.append(np.clip(pair, 0.0, 1.0))
    grid = np.concatenate([np.pad(r, ((0, 1), (0, 0)), constant_values=1.0) for r in rows], axis=0)
    return np.kron(grid, np.ones((UPSCALE, UPSCALE)))[..., None].astype(np.float32)


class EpochSummaries(tf.keras.callbacks.Callback):
    """At the end of every epoch, its scalars (SCALARS, those in the logs) and, every `every`
    epochs and the first, the slice grid above, all at step epoch + 1 through one writer.

    The writer stays open across the fit calls of one process (adaptive fits once per epoch)
    and is closed by `close()`, which fit.py calls when its fit ends, however it ends: one
    event file per process, not one per epoch."""

    def __init__(self, log_dir: Path, cubes: np.ndarray, every: int):
        super().__init__()
        self.log_dir, self.cubes, self.every = Path(log_dir), cubes[..., None], every
        self.writer = None

    def on_epoch_end(self, epoch, logs=None):
        logs, step = logs or {}, epoch + 1  # the epoch number the epoch line prints
        if self.writer is None:
            self.writer = tf.summary.create_file_writer(str(self.log_dir))
        with self.writer.as_default():
            for key, tag in SCALARS.items():
                if key in logs:
                    tf.summary.scalar(tag, float(logs[key]), step=step)
            if self.every > 0 and epoch % self.every == 0:
                rendered = self.model(self.cubes, training=False).numpy()
                tf.summary.image(IMAGE_TAG, slice_grid(self.cubes, rendered)[None], step=step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
