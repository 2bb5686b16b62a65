"""A finished run's model, opened for use: its settings, its weights, and the two halves
the paper's section V names, the encoder (cube -> latent y, eq. 9, and the mixture's
parameters, eqs. 10-13) and the decoder (y -> rendered density), for `encode` and
`generate`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

from deepdensity.config import FIELDS, Config, ConfigError, apply
from deepdensity.data.cubes import DataError, to_density
from deepdensity.model.autoencoder import build_model
from deepdensity.model.layers import covariance
from deepdensity.training.runs import DamagedRun, continue_command, read_json
from deepdensity.utils.errors import shown


class TrainedRun:
    """`TrainedRun(run_dir, grid_size, ndim)`: the model of `run_dir/weights.h5`."""

    def __init__(self, run_dir, grid_size: int, ndim: int):
        run_dir = Path(run_dir)
        if not run_dir.is_dir():
            raise DataError(f"run folder {run_dir} does not exist")
        weights = run_dir / "weights.h5"
        if not weights.is_file():
            raise DataError(_unfinished(run_dir))
        saved = read_json(run_dir / "config.json", "run's configuration")
        try:
            self.cfg = apply(Config(), {k: v for k, v in saved.items() if k in FIELDS}, f"{run_dir}/config.json")
        except ConfigError as e:
            raise DamagedRun(str(e)) from None
        self.run_dir = run_dir
        self.model = build_model(self.cfg, grid_size, ndim)
        try:
            self.model.load_weights(str(weights))
        except (ValueError, OSError) as e:
            raise DataError(
                f"{weights} does not fit a model of {grid_size}^{ndim} cubes and this run's "
                f"settings ({str(e).splitlines()[0][:120]}); is --data the run's kind of data?"
            ) from None
        names = ["latent", "alpha", "mu", "sigma"] + (["rho"] if ndim > 1 else [])
        self.encoder = tf.keras.Model(self.model.input, [self.model.get_layer(n).output for n in names])
        self.decoder = self._decoder(ndim)

    def _decoder(self, ndim: int) -> tf.keras.Model:
        """The layers after y, called on a new input: y (B, latent_dim) -> density."""
        get = self.model.get_layer
        y = tf.keras.Input(shape=(self.cfg.latent_dim,), name="y")
        heads = [get("alpha")(y), get("mu")(get("mu_dense")(y)), get("sigma")(get("sigma_dense")(y))]
        if ndim > 1:
            heads.append(get("rho")(get("rho_dense")(y)))
        return tf.keras.Model(y, get("deep_density")(heads))

    def model_input(self, cubes: np.ndarray) -> tuple:
        """(model input, mass per cube): the cubes as training saw them."""
        mass = cubes.reshape(len(cubes), -1).sum(axis=1) * (2.0 / cubes.shape[1]) ** (cubes.ndim - 1)
        x = to_density(cubes)[0] if self.cfg.intensity_scaling == "density" else cubes
        return x[..., None].astype(np.float32), mass

    def encode(self, x: np.ndarray) -> dict:
        """y, alpha, mu, cov (cube coordinates, [-1, 1]^n, axis d = array axis d) of a batch."""
        out = [o.numpy() for o in self.encoder(x, training=False)]
        y, alpha, mu, sigma = out[:4]
        rho = out[4] if len(out) > 4 else np.zeros(sigma.shape[:-1] + (0,), sigma.dtype)
        cov = covariance(sigma, rho, self.cfg.sigma_min, self.cfg.corr_max).numpy()
        return {"latent": y, "alpha": alpha, "mu": mu, "cov": cov}

    def encode_cubes(self, cubes: np.ndarray, batch: int, density: bool = False, progress: bool = False) -> tuple:
        """(params, mass): `encode` over all `cubes` in batches of `batch` (and, with
        `density`, the rendered cubes), and each cube's mass (model_input)."""
        from tqdm import tqdm

        parts, masses = [], []
        for span in tqdm(
            list(batches(len(cubes), batch)), desc="encode", unit="batch", disable=not progress, file=sys.stderr
        ):
            x, mass = self.model_input(cubes[span])
            out = self.encode(x)
            if density:
                out["density"] = self.model(x, training=False).numpy()[..., 0]
            parts.append(out)
            masses.append(mass)
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}, np.concatenate(masses)


def _unfinished(run_dir: Path) -> str:
    """Why a run folder has no weights.h5, and for a run still training or stopped the command
    that finishes it (runs.continue_command: it runs as printed, from where the run was started)."""
    name = shown(run_dir)
    try:
        saved = read_json(run_dir / "config.json", "run's configuration")
    except DamagedRun:
        saved = {}
    if not isinstance(saved.get("mode"), str):
        return f"{name} holds no weights.h5 and no run's config.json: it is not a run folder made by train.py --out"
    try:
        state = json.loads((run_dir / "state.json").read_text())
        epoch, status = int(state["epoch"]) + 1, state.get("status", "running")
    except (OSError, ValueError, KeyError, TypeError):
        epoch, status = 0, "running"
    if status != "running":
        return (
            f"{name} holds no weights.h5, though its run ended ({status}): the weights were removed; "
            f"train it again with another --out"
        )
    where = f"epoch {epoch} of {saved.get('max_epochs', '?')} checkpointed" if epoch else "no epoch checkpointed"
    return (
        f"{name} holds no weights.h5: its training has not finished ({where}); finish it with: "
        f"{continue_command(run_dir, saved)}"
    )


def batches(n: int, size: int):
    """Index ranges of `size` (the last one shorter)."""
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))
