"""What one training process needs of memory, at least, and what it may use: checked by
preflight.py before anything is written, so that a model too big for the machine, for the
process's address-space limit (`ulimit -v`) or for its cgroup (a Slurm job's or a container's
memory limit) is refused in one line instead of ending in TensorFlow's C++ `std::bad_alloc`
abort. No TensorFlow here.

The need is a lower bound, so that a run refused could never have trained here: what the run
holds for certain (one process's batch, its sample order, the heads' weights with their
gradient and Adam's two slots) and the rendering's working set, which grows with the batch
and the components, at the growth measured on each stack by `python -m
deepdensity.perf.memory_probe` (docs/performance.md#memory), and, where the rendering stores a
(B, K, V) tensor (rendering: tf, xla: step), that tensor once."""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from deepdensity.utils.machine import memory_bytes, size_text

# Per sample and mixture component, the rendering's working set (the per-component algebra on
# (B, K, n, n) float64 tensors, forward and backward, and the heads' outputs), by TensorFlow
# release (2.16 and later?): (address space, resident) bytes, from the growth of the process's
# peak between two K at a batch of 32, less the weights' part, on the 2-core AMD EPYC machine
# (docs/performance.md#memory). Both releases reserve about 2.7 KB of address space a sample and
# component at large K, XLA or not; under an address-space limit below it TF 2.15 trains on
# (K = 100,000 under 7.63 GiB) and TF 2.21 aborts in std::bad_alloc, so 2.21's need is its
# reservation and 2.15's no more than what it keeps resident (about 1.4 KB). The resident
# growth is the least measured on either (TF 2.21 without XLA, between K = 10,000 and 20,000).
PER_SAMPLE_COMPONENT = {
    True: (2680, 1130),
    False: (1390, 1130),
}
# What TensorFlow itself holds before any of the above: below the intercepts of the same
# measurements, for a machine of fewer cores, whose allocator keeps fewer arenas, so that the
# need stays below every peak measured
BASE = (1.5e9, 0.5e9)  # (address space, resident), bytes
BYTES_A_WEIGHT = 16  # float32 weight, its gradient, Adam's two slots


@dataclass(frozen=True)
class Limit:
    bytes: int
    what: str  # "this machine's memory", "the address-space limit (ulimit -v)", ...
    address_space: bool  # held against the virtual size, not the resident one


def limits() -> list:
    """What this process may use: the machine's memory, the soft address-space limit and the
    cgroup's memory limit, those that are set."""
    found = []
    memory = memory_bytes()
    if memory:
        found.append(Limit(memory, "this machine's memory", False))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft not in (resource.RLIM_INFINITY, -1):
        found.append(Limit(soft, "the process's address-space limit (ulimit -v)", True))
    cgroup = cgroup_limit()
    if cgroup:
        found.append(Limit(cgroup, "its cgroup's memory limit (a job's or a container's)", False))
    return found


def cgroup_limit(root: Path = Path("/sys/fs/cgroup"), own: Path = Path("/proc/self/cgroup")) -> Optional[int]:
    """The memory limit of this process's cgroup, the least of its own and its parents' (a Slurm
    job's limit is on job_N, its steps' and tasks' groups below it say 'max'): v2's memory.max,
    v1's memory.limit_in_bytes (whose 'no limit' is a number near 2^63). None where none is set
    or none can be read."""
    try:
        lines = own.read_text().splitlines()
    except OSError:
        return None
    found = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            base, name = root, "memory.max"
        elif "memory" in controllers.split(","):
            base, name = root / "memory", "memory.limit_in_bytes"
        else:
            continue
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), -1, -1):  # the group itself, then each parent
            try:
                text = (base.joinpath(*parts[:depth]) / name).read_text().strip()
            except OSError:
                continue
            if text.isdigit() and int(text) < 2**60:
                found.append(int(text))
    return min(found) if found else None


def heads_weights(n_components: int, latent_dim: int, ndim: int = 3) -> int:
    """The weights of the heads (alpha, mu, sigma, rho: (n^2 + 3n + 2) / 2 numbers a component,
    each a Dense of latent_dim inputs and a bias): most of the model when K is large."""
    return n_components * (ndim * ndim + 3 * ndim + 2) // 2 * (latent_dim + 1)


def rendering_need(cfg, batch: int, new_tf: bool, voxels: int = 16**3) -> tuple:
    """(address space, resident) bytes the rendering and the heads need at least at a pass of
    `batch` samples, on TensorFlow 2.16 or later (`new_tf`) or before. The working set's growth
    was measured on 16^3 cubes: a smaller cube's is taken as that share of it."""
    per = [p * min(1.0, voxels / 16**3) for p in PER_SAMPLE_COMPONENT[new_tf]]
    weights = heads_weights(cfg.n_components, cfg.latent_dim) * BYTES_A_WEIGHT
    stored = batch * cfg.n_components * voxels * 4 if (cfg.rendering == "tf" or cfg.xla == "step") else 0
    return tuple(batch * cfg.n_components * p + weights + stored for p in per)


def on_a_gpu() -> bool:
    """Will TensorFlow find a GPU (its working set is then the device's, not this host's)?"""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return visible not in ("", "-1") and Path("/dev/nvidia0").exists()


def check(cfg, batch: int, held: int, tf_release: tuple, instead: str, voxels: int = 16**3) -> Optional[str]:
    """The one line that refuses the run, or None when it fits: `batch` the samples of one pass
    (the per-process batch, or its max_pass_batch slices), `held` the bytes the run holds besides
    (its batch of cubes and its sample order), `instead` what to change."""
    model = (0, 0) if on_a_gpu() else rendering_need(cfg, batch, tf_release >= (2, 16), voxels)
    for limit in limits():
        kind = 0 if limit.address_space else 1  # which of the (address space, resident) pairs
        need = held + BASE[kind] + model[kind]
        if need > limit.bytes:
            return (
                f"n_components = {cfg.n_components} at {batch} samples a pass needs at least "
                f"{size_text(need)} of {('address space', 'memory')[kind]} (TensorFlow's own "
                f"{size_text(BASE[kind])}, the rendering and the heads' weights {size_text(model[kind])}, "
                f"the cubes and sample order {size_text(held)}); {limit.what} is {size_text(limit.bytes)}; "
                f"{instead}"
            )
    return None
