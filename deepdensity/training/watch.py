"""What a person watches while a run trains: TensorBoard logs, written by rank 0 only.

    tensorboard --logdir runs/

`--out DIR` gets `DIR/tb/`: Keras's TensorBoard callback logs loss, val_loss and the lr
per epoch (train/, validation/), and `images/` holds, every `tensorboard_images_every`
epochs, the central slices of four fixed validation cubes next to the densities the model
renders for them, so the fine details can be seen arriving (the paper's Fig. 1).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf

IMAGE_CUBES = 4       # validation cubes shown, the first of the split (fixed across epochs)
UPSCALE = 8           # pixels per voxel in the image, so a 16^3 slice is 128 px wide


def tensorboard_callbacks(out: Path, val_x: np.ndarray, images_every: int) -> list:
    """The callbacks for rank 0; they must run after the one that puts `lr` in the logs."""
    log_dir = Path(out) / "tb"
    callbacks = [tf.keras.callbacks.TensorBoard(log_dir=str(log_dir), write_graph=False, profile_batch=0)]
    if images_every > 0:
        callbacks.append(SliceImages(log_dir / "images", val_x[:IMAGE_CUBES], images_every))
    return callbacks


def slice_grid(cubes: np.ndarray, rendered: np.ndarray) -> np.ndarray:
    """(H, W, 1) image in [0, 1] from cubes and renderings of shape (B, G, ..., G, 1): one
    row per cube, its central slice (the middle of the first grid axis; 2-D data whole,
    1-D data as a strip) left and the rendered density's right, both on the cube's scale."""
    def central(x):                                      # (G, ..., G, 1) -> a 2-D image
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


class SliceImages(tf.keras.callbacks.Callback):
    """Every `every` epochs (and the first), the slice grid above as a TensorBoard image."""

    TAG = "central slices: cube | rendered density"

    def __init__(self, log_dir: Path, cubes: np.ndarray, every: int):
        super().__init__()
        self.log_dir, self.cubes, self.every = Path(log_dir), cubes[..., None], every
        self.writer = None

    def on_epoch_end(self, epoch, logs=None):
        if epoch % self.every:
            return
        if self.writer is None:
            self.writer = tf.summary.create_file_writer(str(self.log_dir))
        rendered = self.model(self.cubes, training=False).numpy()
        with self.writer.as_default():
            tf.summary.image(self.TAG, slice_grid(self.cubes, rendered)[None], step=epoch + 1)
        self.writer.flush()

    def on_train_end(self, logs=None):
        # adaptive calls fit once per epoch: the next call opens a new writer on the same folder
        if self.writer is not None:
            self.writer.close()
            self.writer = None
