"""The configuration schema: one dataclass, filled from defaults, then YAML, then `--set`.

Defaults are the paper's settings where the paper gives them (section VI); the rest
are this implementation's choices, each with the reason next to it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional, Tuple

import yaml

from deepdensity.scaling import policies
from deepdensity.scaling.policy import PAPER_BATCH, PAPER_LR, PAPER_WARMUP_EPOCHS, ScalingPlan
from deepdensity.scaling.rules import EPOCH_DEFINITIONS, PlanError
from deepdensity.utils import schema
from deepdensity.utils.errors import UserError
from deepdensity.utils.textfile import read_text

XLA_CHOICES = ("coefficients", "step", "off")
RENDERING_CHOICES = ("auto", "kernel", "tf")


class ConfigError(UserError):
    """Bad configuration: reported as one line and exit status 2."""


@dataclass
class Config:
    # --- data -----------------------------------------------------------------------
    data_path: str = "data/synth.h5"
    # How cube intensities are made comparable to a density. "density": each cube is
    # divided so that its voxels integrate to 1 over [-1, 1]^n, which a mixture with
    # sum(alpha) = 1 can match; "none": the stored values in [0, 1] as they are.
    intensity_scaling: str = "density"
    # Use at most this many training cubes (0 = all); for quick runs and the tests.
    max_train_cubes: int = 0

    # --- model (paper section V and VI) -------------------------------------------------
    n_components: int = 50  # K
    conv_filters: Tuple[int, ...] = (32, 32, 32)
    conv_kernels: Tuple[int, ...] = (7, 5, 3)
    # The paper does not say how the encoder downsamples; stride 2 in every conv layer
    # halves the grid each time (16 -> 8 -> 4 -> 2) at an eighth of the cost of pooling
    # after stride-1 convs, which matters for a study of hundreds of runs.
    conv_strides: Tuple[int, ...] = (2, 2, 2)
    latent_dim: int = 64  # size l of y in eq. (9); not given in the paper
    # Standard deviations are sigma_min + (1 - sigma_min) * sigmoid(.): bounded away from 0
    # so every covariance is well conditioned; 0.05 is 0.4 voxel at 16^3 over [-1, 1].
    sigma_min: float = 0.05
    # Partial correlations are (2 * sigmoid(.) - 1) * corr_max, so |rho| <= corr_max < 1.
    corr_max: float = 0.95

    # --- optimisation (paper section VI) -----------------------------------------------------
    batch_size: int = PAPER_BATCH  # base batch B of the sequential model
    base_lr: float = PAPER_LR  # eta
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-8  # the paper's; tf.keras would use 1e-7
    warmup_epochs: int = PAPER_WARMUP_EPOCHS
    max_epochs: int = 400
    target_loss: float = 0.0016384
    seed: int = 0
    # What an epoch is (docs/protocol.md, "The paper's epoch"). "per_worker", the paper's as we read
    # it: every worker walks one whole pass of the training set, so an epoch is N passes of
    # one shared sample stream. "global": the N workers share one pass. Epoch counts, the
    # epoch cap and the warmup epochs are all counted in this unit.
    epoch_definition: str = "per_worker"
    # Stop a run that has plainly failed (status "stalled"): no new best validation loss in
    # this many epochs. 0 = off, as in the paper, which ran failures to its 400-epoch cap.
    stall_patience: int = 0
    # A run whose best validation loss is within `stall_near` (a fraction) above the target is
    # still closing in on it: the stall rule then waits `stall_near_patience` epochs instead, so
    # that only runs that have plainly failed are stopped. 0 = no such allowance.
    stall_near: float = 0.0
    stall_near_patience: int = 0
    # Stop a run that sits at the collapse level (status "collapsed"): its last
    # `collapse_patience` validation losses all at or above `collapse_loss`, the loss of an
    # output that ignores its input. 0 = off. The study sets collapse_loss from its data.
    collapse_loss: float = 0.0
    collapse_patience: int = 0
    # Also validate each time the global model has seen the training set once more inside an
    # epoch (a per_worker epoch on N workers is N passes), so that time to target can be read
    # at pass granularity. Validation only reads the weights: the training path is the same.
    validate_every_pass: bool = False

    # --- beyond the paper (modes adaptive and local) -----------------------------------
    # adaptive: grow the batch when the epoch's gradient noise exceeds theta^2 times its
    # squared norm (De et al. 2017's test). 1 = noise no larger than the signal; chosen before
    # any run, not tuned on this data.
    adaptive_theta: float = 1.0
    # local: H, the local steps each worker takes between weight averagings (1 = every step).
    # 4 cuts the allreduces per epoch by 4; chosen before any run, not tuned on this data.
    local_steps: int = 4

    # --- runtime -----------------------------------------------------------------------
    # Intra-op threads per process; 0 = this host's cores divided by the local processes,
    # so N processes on one host do not oversubscribe it.
    intra_op_threads: int = 0
    # Horovod: allreduce groups for the gradients (DistributedOptimizer's `groups`). 1 = all of
    # a step's gradients negotiated and reduced as one fused allreduce once backward is done:
    # the model's 0.86 MB of gradients are latency-bound, so one negotiation beats several
    # (docs/performance.md). 0 = Horovod's default, one allreduce per gradient as it is ready
    # (overlaps communication with the backward pass, which pays for models with far more
    # weights than this one).
    allreduce_groups: int = 1
    # Horovod: its background thread's cycle in ms (HOROVOD_CYCLE_TIME; a user's own setting
    # of that variable wins). 5 = every Horovod of the paper's time (0.12 slept 5 ms a cycle,
    # 0.13-0.20 defaulted to 5; the paper ran TensorFlow 1.7.1, 2018); 0.21+ defaults to 1.
    # Each cycle syncs with the other ranks even when idle, which on a CPU host takes cores
    # from training (`make bench` prints an idle rank's share of a core at 1 ms and at 5 ms).
    # 0 = Horovod's own default.
    horovod_cycle_ms: float = 5.0
    # Ask TensorFlow for deterministic kernels (bitwise-repeatable runs, maybe slower on GPU).
    deterministic: bool = False
    # Most samples one forward/backward pass holds (0 = no limit). A larger batch per process
    # (only when one process emulates many workers: weak N = 32 is 1024 samples) is cut
    # into equal slices whose gradients are averaged: the same gradient, with less memory
    # (`make bench` prints the peak memory of weak N = 32 with and without slices).
    max_pass_batch: int = 256
    # Where XLA compiles: "coefficients" (the rendering's per-component algebra, some fifty
    # tiny ops that XLA fuses), "step" (the whole training step: XLA's CPU convolutions are
    # slow, so use it on GPUs) or "off". `make bench` times all three on the host.
    xla: str = "coefficients"
    # How the layer renders the mixture: "kernel" (deepdensity/model/kernels/render.cc, built
    # by `make install`: each exponential summed where it is computed, for the CPU's
    # instruction set), "tf" (TensorFlow ops, which write (B, K, V) tensors) or "auto": the
    # kernel on a CPU with AVX2 or AVX-512 when it is built, else TensorFlow ops (GPUs, XLA of
    # the whole step, and CPUs where the kernel's x86-64 baseline loses to them:
    # 15.0 against 10.0 ms, docs/performance.md). `make bench` times both on the host.
    rendering: str = "auto"
    # TensorBoard (rank 0, `--out DIR` -> DIR/tb/, watch.py): central slices of validation cubes
    # next to what the model renders, at epoch 1 and every this many epochs after (0 = scalars only).
    tensorboard_images_every: int = 5

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def rules(self) -> list:
        """Every field's range (schema.build tests them in order); NaN fails every comparison."""
        return [
            (lambda ok=ok: ok, msg)
            for ok, msg in [
                (self.n_components >= 1, "n_components must be >= 1"),
                (
                    len(self.conv_filters) == len(self.conv_kernels) == len(self.conv_strides),
                    "conv_filters, conv_kernels and conv_strides must have the same length",
                ),
                (
                    all(v >= 1 for v in self.conv_filters + self.conv_kernels + self.conv_strides),
                    "conv_filters, conv_kernels and conv_strides must be positive",
                ),
                (self.latent_dim >= 1, "latent_dim must be >= 1"),
                (0 < self.sigma_min < 1, "sigma_min must be in (0, 1)"),
                (0 <= self.corr_max < 1, "corr_max must be in [0, 1)"),
                (self.batch_size >= 1, "batch_size must be >= 1"),
                (0 < self.base_lr < math.inf, "base_lr must be a finite number > 0"),
                (0 <= self.beta_1 < 1, "beta_1 must be in [0, 1)"),
                (0 <= self.beta_2 < 1, "beta_2 must be in [0, 1)"),
                (0 < self.epsilon < math.inf, "epsilon must be a finite number > 0"),
                (0 <= self.seed < 2**32, "seed must be in [0, 2^32): NumPy and TensorFlow seeds are unsigned"),
                (self.warmup_epochs >= 0, "warmup_epochs must be >= 0"),
                (self.max_epochs >= 1, "max_epochs must be >= 1"),
                (0 <= self.target_loss < math.inf, "target_loss must be a finite number >= 0"),
                (self.max_train_cubes >= 0, "max_train_cubes must be >= 0 (0 = all)"),
                (self.intra_op_threads >= 0, "intra_op_threads must be >= 0 (0 = automatic)"),
                (
                    self.allreduce_groups >= 0,
                    "allreduce_groups must be >= 0 (0 = Horovod's default, no explicit groups)",
                ),
                (self.horovod_cycle_ms >= 0, "horovod_cycle_ms must be >= 0 (0 = Horovod's default)"),
                (self.max_pass_batch >= 0, "max_pass_batch must be >= 0 (0 = no limit)"),
                (self.intensity_scaling in ("density", "none"), "intensity_scaling must be 'density' or 'none'"),
                (self.xla in XLA_CHOICES, f"xla must be one of {', '.join(XLA_CHOICES)}"),
                (self.rendering in RENDERING_CHOICES, f"rendering must be one of {', '.join(RENDERING_CHOICES)}"),
                (
                    not (self.rendering == "kernel" and self.xla == "step"),
                    "rendering: kernel cannot run under xla: step (XLA compiles TensorFlow ops only); "
                    "use rendering: auto",
                ),
                (
                    self.epoch_definition in EPOCH_DEFINITIONS,
                    f"epoch_definition must be one of {', '.join(EPOCH_DEFINITIONS)}",
                ),
                (self.stall_patience >= 0, "stall_patience must be >= 0 (0 = off)"),
                (0 <= self.stall_near < math.inf, "stall_near must be a finite fraction >= 0 (0 = off)"),
                (
                    self.stall_near == 0 or self.stall_near_patience >= self.stall_patience,
                    "stall_near_patience must be >= stall_patience: near the target the rule waits longer, never less",
                ),
                (0 <= self.collapse_loss < math.inf, "collapse_loss must be a finite number >= 0 (0 = off)"),
                (self.collapse_patience >= 0, "collapse_patience must be >= 0 (0 = off)"),
                (self.tensorboard_images_every >= 0, "tensorboard_images_every must be >= 0 (0 = no images)"),
                (0 < self.adaptive_theta < math.inf, "adaptive_theta must be a finite number > 0"),
                (self.local_steps >= 1, "local_steps must be >= 1 (1 = average after every step)"),
            ]
        ]


FIELDS = {f.name: f for f in dataclasses.fields(Config)}


def run_plan(
    cfg: Config, mode: str, workers: int, processes: Optional[int] = None, uneven: bool = False
) -> ScalingPlan:
    """The plan of one run, the one place it is made (the per-process plan, the checks before a
    run, the dry run): the policy `mode` at N = `workers` (scaling.rules.workers) with this
    config's B, eta and warmup, over `processes` launched processes; `uneven`: an elastic run's
    N need not divide B. A policy that cannot apply is one line (ConfigError)."""
    try:
        return policies.plan(mode, workers, cfg.batch_size, cfg.base_lr, cfg.warmup_epochs, processes, uneven)
    except PlanError as e:
        raise ConfigError(str(e)) from None


def apply(cfg: Config, updates: dict, source: str) -> Config:
    """`cfg` with `updates` (from `source`: a file or --set) read and checked by the schema."""
    return schema.build(Config, updates, error=ConfigError, what="config key", source=source, base=cfg)


def parse_set(items) -> dict:
    """`key=value` strings to a dict; values are read as YAML scalars (1e-3, true, [1,2])."""
    updates = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not raw.strip():  # else an empty data_path was read as the folder '.'
            raise ConfigError(f"--set {key}= gives {key} no value; write --set {key}=VALUE")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            value = raw
        # Text is the text given: YAML would fold a newline into a space and drop a ' #...' tail
        # or the spaces at either end, and a message would then name another path than the
        # user's. A quoted value ('...' or "...") is still read as YAML reads it.
        updates[key] = raw if isinstance(value, str) and raw[:1] not in ("'", '"') else value
        # YAML 1.1 reads on/off/yes/no as booleans: the word is kept, so that a setting that
        # takes text gets it (--set xla=off, as docs/performance.md says) and a true-or-false
        # setting still reads it as one (schema)
        if isinstance(value, bool) and raw.strip().lower() in schema.BOOLEAN_WORDS:
            updates[key] = raw.strip()
    return updates


def load(path: Optional[str] = None, overrides=None) -> Config:
    """Defaults, then the YAML file at `path`, then `--set key=value` overrides."""
    cfg = Config()
    if path:
        cfg = apply(cfg, read_mapping(path, "config file", ConfigError), path)
    return apply(cfg, parse_set(overrides), "--set")


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key given twice in one mapping is an error (plain YAML keeps
    the last one silently, which is never what the user meant)."""


def _mapping_without_repeats(loader: _StrictLoader, node, deep: bool = False) -> dict:
    first = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is not a setting name", key_node.start_mark
            ) from None
        if key in first:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice (first on line {first[key] + 1})", key_node.start_mark
            )
        first[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_repeats)


def parse_yaml(text: str, where: str, error: type):
    """The YAML document in `text`, or `error` with one line naming `where`, the line and the column."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        if isinstance(e, yaml.constructor.ConstructorError):  # valid YAML, but not what was meant
            raise error(f"{where}, {at}: {e.problem}") from None
        raise error(f"{where} is not valid YAML at {at}: {e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise error(f"{where} is not valid YAML: {str(e).splitlines()[0]}") from None


def read_mapping(path, what: str, error: type, allow_empty: bool = True) -> dict:
    """A YAML file holding a mapping of setting names to values (a config or a study
    preset), or `error` with one line saying what is wrong with it."""
    text = read_text(path, what, error)
    data = parse_yaml(text, f"{what} {path}", error)
    if data is None and not allow_empty:
        raise error(f"{what} {path} is empty; it needs at least the keys that differ from the defaults")
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise error(f"{what} {path} must hold a mapping of key: value")
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise error(f"{what} {path}: key {bad[0]!r} is not a setting name (write names like base_lr)")
    return data
