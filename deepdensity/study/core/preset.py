"""A study preset (deepdensity/study/presets/NAME.yaml): which cells the study runs, on what
data and with which seeds; read and checked by the same schema engine as the run settings."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from deepdensity.config import Config, ConfigError, apply, read_mapping
from deepdensity.scaling import policies, rules
from deepdensity.utils import schema
from deepdensity.utils.errors import StudyError

PRESETS = Path(__file__).resolve().parents[1] / "presets"
DATA_KEYS = ("n", "val", "seed")


# What isa_check accepts: "auto", or a cap oneDNN's ONEDNN_MAX_CPU_ISA takes (its documented names).
ISA_CHECKS = ("auto", "SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX512_CORE", "AVX512_CORE_VNNI", "AVX512_CORE_BF16")


def isa_to_check(setting: Optional[str], machine_isa: str) -> Optional[str]:
    """The cap to re-run under: the preset's, or for "auto" one below this machine's (AVX2 on an
    AVX-512 machine, SSE41 on an AVX2 one, as oneDNN names them); None when not checked."""
    if setting != "auto":
        return setting
    return "AVX2" if "AVX-512" in machine_isa or "AMX" in machine_isa else "SSE41"


# The batch sweep's runs end only at the target, a non-finite loss or the cap (the paper's
# "missed"): the stall rule counts passes, and a pass at batch b is floor(1844 / b) steps, so
# at b = 1024 it would stop a run after 3 steps without a new best (docs/beyond.md, amendment
# of 2026-11-27). collapse_loss 0 turns the collapse rule off.
SWEEP_STOPPING = {"stall_patience": 0, "collapse_loss": 0.0}
# The sequential model at twice eta (the paper's last claim): its unit and cell's mode name, and
# the name of its runs before their seed
DOUBLE_ETA = "2eta"
DOUBLE_ETA_RUN = "seq-2eta-s"
# The sequential run Fig. 1 draws, trained for its weights in a folder of its own: the study's
# own sequential run may come from the ledger, trained on another stack or machine, and a run
# trained again here in its place would change the path the strong-scaling cells read off it
FIG1_PREFIX = "fig1-"


def figure1_run(root: Path, seed: int) -> Path:
    """The run whose weights Fig. 1 draws: the one trained for it (FIG1_PREFIX), else, in a runs
    folder from before there was one, the sequential run itself."""
    own = root / f"{FIG1_PREFIX}seq-s{seed}"
    return own if (own / "weights.h5").is_file() else root / f"seq-s{seed}"


# Beneath a preset's `train`: the study's runs go side by side, each on one intra-op thread
# unless the preset says otherwise (deterministic kernels repeat bit for bit at a thread count).
RUN_DEFAULTS = {"intra_op_threads": 1}


@dataclass
class Study:
    data: dict = field(default_factory=lambda: {"n": 2100, "val": 256, "seed": 0})
    train: dict = field(default_factory=dict)
    calibration_epochs: int = 100
    # Seeds of sequential runs that only set the target (the median of their losses after
    # calibration_epochs), so that no seed of a cell reaches it by construction. Empty: the
    # first seed's own sequential run sets it, as the paper describes with its one run.
    calibration_seeds: list = field(default_factory=list)
    target_loss: Optional[float] = None
    workers: list = field(default_factory=lambda: [1, 2, 4, 8, 16, 32])
    modes: list = field(default_factory=lambda: list(policies.paper()))
    seeds: list = field(default_factory=lambda: [0])
    # The seeds of the edge-of-stability search (base_lr: edge). eta is chosen because these
    # seeds converge at it, so the sequential runs (strong scaling at every N, N = 1 of every
    # mode, 2 x eta) take other seeds: sequential_seeds().
    edge_seeds: list = field(default_factory=lambda: [0, 1, 2])
    # The sequential design (plan/study_plan.py): after `seeds` in every cell, one more seed at a time
    # to every cell below max_seeds, whatever its outcomes, while the invocation is within
    # budget_minutes (null: no more seeds).
    max_seeds: int = 0
    budget_minutes: Optional[float] = None
    # The second look (docs/decision-rules.md, "Second look", fixed before its runs): every cell
    # whose call was inconclusive at its first look (`seeds`) gets the next seeds up to this many
    # in all, every one trained whatever the ones before show, and its call is made on all of
    # them with exact intervals at second_look_confidence; no third look. 0: no second look.
    second_look_seeds: int = 0
    second_look_confidence: float = 0.975
    # Runs side by side: "auto" is the cores over each run's intra_op_threads.
    parallel_runs: object = "auto"
    # "edge": the sequential model's edge of stability found on this data (the paper's
    # premise, section VI); a number: that base lr, fixed (the paper's literal is 0.00105).
    base_lr: object = "edge"
    # N at which strong scaling also runs for real (horovodrun -np N on this host, the first
    # seed, alone, after the other runs) beside its derivation from the sequential run.
    real_strong: list = field(default_factory=list)
    # {mode: [N, ...]}: run a mode at fewer N than `workers` (its costly cells), e.g. to fit a budget.
    mode_workers: dict = field(default_factory=dict)
    # Beyond the paper, part 2 (Gahlot et al. 2020): modes of the paper to train again on data
    # filtered by the sequential run's features and on the random control, each at the N
    # cells.filter_n picks from the default study's cells (where it is slowest or fails).
    filter_modes: list = field(default_factory=list)
    # Global batches of a sweep of the sequential model (one worker), at eta and at the linear
    # rule's eta * b / B: epochs and time to target against batch size.
    batch_sweep: list = field(default_factory=list)
    # Stability across instruction sets (issue: verdicts that survive a change of machine): the
    # first seed of every trained cell run again with oneDNN and the rendering kernel capped at
    # this instruction set (ONEDNN_MAX_CPU_ISA), and every verdict judged again with those runs
    # in place of the originals. "auto": AVX2 on a machine above it, else SSE41; null: not checked.
    isa_check: Optional[str] = None
    # The stall rule checked with runs: the runs it stopped, trained again to the cap with the
    # rule off; every one at N >= 16, and a sample of this many of the others (0: not checked).
    stall_check: int = 0
    # With --executor slurm: what each job asks for (launch/slurm_jobs.py SlurmOptions: partition,
    # account, time, cpus_per_task, gpus_per_task, max_jobs, retries, poll_seconds, sbatch).
    slurm: dict = field(default_factory=dict)

    def rules(self) -> list:
        """The checks of a preset, in order (each may rely on the ones before)."""
        return [
            *self._data_rules(),
            *self._seed_rules(),
            *self._second_look_rules(),
            *self._budget_rules(),
            *self._mode_rules(),
            *self._check_rules(),
        ]

    def _data_rules(self) -> list:
        """The checks of the data, the runs' settings and the target."""
        d = self.data
        return [
            (lambda: isinstance(d, dict), f"data must be a mapping like {{n: 2100, val: 256, seed: 0}}, got {d!r}"),
            (
                lambda: set(d) <= set(DATA_KEYS),
                f"unknown data keys {sorted(map(str, set(d) - set(DATA_KEYS))) if isinstance(d, dict) else ''}; "
                f"known: n, val, seed",
            ),
            (lambda: self._complete_data(), f"data needs integers n > val > 0 and a seed in [0, 2^32), got {d!r}"),
            (lambda: isinstance(self.train, dict), f"train must be a mapping of training settings, got {self.train!r}"),
            (
                lambda: schema.is_int(self.calibration_epochs) and self.calibration_epochs >= 1,
                f"calibration_epochs must be an integer >= 1, got {self.calibration_epochs!r}",
            ),
            (
                lambda: self.target_loss is None or 0 <= self.target_loss < math.inf,
                f"target_loss must be null (calibrate) or a finite number >= 0, got {self.target_loss!r}",
            ),
        ]

    def _seed_rules(self) -> list:
        """The checks of the workers and of every list of seeds."""
        return [
            *_integer_list("workers", self.workers, 1),
            (lambda: 1 in self.workers, "workers must include 1 (the sequential baseline)"),
            *_integer_list("seeds", self.seeds, 0),
            *_integer_list("calibration_seeds", self.calibration_seeds, 0, nonempty=False),
            *_integer_list("edge_seeds", self.edge_seeds, 0),
            *_integer_list("real_strong", self.real_strong, 2, nonempty=False),
            (
                lambda: (
                    not set(self.calibration_seeds) & set(self.seeds) and max(self.calibration_seeds, default=0) < 2**32
                ),
                f"calibration_seeds must be below 2^32 and none of the study's seeds (they only set the target), "
                f"got {self.calibration_seeds!r}",
            ),
            (lambda: all(s < 2**32 for s in self.seeds), "seeds must be below 2^32"),
            (
                lambda: schema.is_int(self.max_seeds) and (self.max_seeds == 0 or self.max_seeds >= len(self.seeds)),
                f"max_seeds must be 0 (no more seeds) or an integer >= the number of seeds, got {self.max_seeds!r}",
            ),
        ]

    def _budget_rules(self) -> list:
        """The checks of the invocation's minutes and of the runs side by side."""
        return [
            (
                lambda: (
                    self.budget_minutes is None
                    or (schema.is_number(self.budget_minutes) and 0 < self.budget_minutes < math.inf)
                ),
                f"budget_minutes must be null or a positive number of minutes, got {self.budget_minutes!r}",
            ),
            (
                lambda: self.parallel_runs == "auto" or (schema.is_int(self.parallel_runs) and self.parallel_runs >= 1),
                f"parallel_runs must be 'auto' or an integer >= 1, got {self.parallel_runs!r}",
            ),
        ]

    def _mode_rules(self) -> list:
        """The checks of the modes, their base lr and the N each runs at."""
        return [
            (
                lambda: isinstance(self.modes, list) and self.modes and set(self.modes) <= set(policies.names()),
                f"modes must be a non-empty list of {', '.join(policies.names())}, got {self.modes!r}",
            ),
            (
                lambda: not policies.goes_beyond_the_paper(self.modes) or policies.SEQUENTIAL in self.modes,
                "a study of adaptive or local compares them with strong scaling: add strong to modes",
            ),
            (
                lambda: (
                    self.base_lr in ("edge", "default_study")
                    or (schema.is_number(self.base_lr) and 0 < self.base_lr < math.inf)
                ),
                f"base_lr must be 'edge', 'default_study' or a positive number, got {self.base_lr!r}",
            ),
            (lambda: isinstance(self.mode_workers, dict), "mode_workers must map a mode to a list of N"),
            *[
                (
                    lambda ns=ns, mode=mode: (
                        mode in self.modes and isinstance(ns, list) and set(ns) <= set(self.workers) and 1 in ns
                    ),
                    f"mode_workers.{mode} must list N from workers, 1 included, for a mode of the study; got {ns!r}",
                )
                for mode, ns in (self.mode_workers.items() if isinstance(self.mode_workers, dict) else ())
            ],
        ]

    def _check_rules(self) -> list:
        """The checks of what the study runs beside its cells: filtered data, the batch sweep, the
        stall rule's and the instruction set's checks."""
        return [
            (
                lambda: (
                    isinstance(self.filter_modes, list)
                    and set(self.filter_modes) <= set(policies.large_batch())
                    and len(set(self.filter_modes)) == len(self.filter_modes)
                ),
                f"filter_modes must list some of {', '.join(policies.large_batch())} (the large-batch modes), "
                f"got {self.filter_modes!r}",
            ),
            *_integer_list("batch_sweep", self.batch_sweep, 1, nonempty=False),
            (
                lambda: schema.is_int(self.stall_check) and self.stall_check >= 0,
                f"stall_check must be an integer >= 0 (runs to continue to the cap), got {self.stall_check!r}",
            ),
            (
                lambda: self.isa_check is None or self.isa_check in ISA_CHECKS,
                f"isa_check must be null or one of {', '.join(ISA_CHECKS)}, got {self.isa_check!r}",
            ),
        ]

    def _second_look_rules(self) -> list:
        """The checks of the second look's settings (docs/decision-rules.md, "Second look")."""
        return [
            (
                lambda: (
                    schema.is_int(self.second_look_seeds)
                    and (self.second_look_seeds == 0 or self.second_look_seeds > len(self.seeds))
                ),
                f"second_look_seeds must be 0 (no second look) or an integer above the number of seeds (the "
                f"first look's), got {self.second_look_seeds!r}",
            ),
            (
                lambda: schema.is_number(self.second_look_confidence) and 0.95 < self.second_look_confidence < 1,
                f"second_look_confidence must be a number between the first look's 0.95 and 1, got "
                f"{self.second_look_confidence!r}",
            ),
            (
                lambda: not (self.second_look_seeds and self.max_seeds > len(self.seeds)),
                "a preset has a second look (second_look_seeds) or the sequential design (max_seeds), not both",
            ),
        ]

    @functools.cached_property
    def runs(self) -> Config:
        """The preset's training settings (`train`, RUN_DEFAULTS beneath them) parsed once into
        the runs' Config; a bad key or value is a ConfigError (load_study names the preset)."""
        return apply(Config(), {**RUN_DEFAULTS, **self.train}, "train")

    def trained_cells(self, real_runner: bool = False) -> list:
        """[(mode, N)] of the cells the study trains runs for: every N > 1 of every mode except
        those that follow the sequential path (strong scaling), which are read off the
        sequential runs unless every cell is a real multi-worker run."""
        return [
            (mode, n)
            for mode in self.modes
            for n in self.mode_workers.get(mode, self.workers)
            if n > 1 and (real_runner or not policies.get(mode).follows_sequential_path)
        ]

    def impossible_cells(self, runs: Config) -> list:
        """The cells no run could train, each in words: its policy's plan at its N, and a step at
        least in an epoch of the study's training cubes (`runs`: the runs' settings). Checked as
        the preset loads, before a clock or a run starts."""
        n_train = self.data["n"] - self.data["val"]
        n_used = min(n_train, runs.max_train_cubes or n_train)
        said = []
        for mode, n in self.trained_cells(real_runner=True):  # every N > 1; N = 1 is the sequential run
            try:
                plan = policies.plan(mode, n, runs.batch_size, runs.base_lr, runs.warmup_epochs)
                rules.steps_per_epoch(n_used, plan, runs.epoch_definition)
            except rules.PlanError as e:
                said.append(f"{mode} at N = {n}: {e}")
        return said

    def sequential_seeds(self) -> list:
        """The seeds of the sequential runs: as many as `seeds`, the smallest integers that are
        neither the edge search's seeds (when it set eta, here or in the default study whose eta
        this one takes: they converge at eta by construction) nor calibration seeds (they set the
        target)."""
        # the edge search's seeds, this study's or the default study's whose eta it takes
        chose_eta = self.base_lr in ("edge", "default_study")
        taken = set(self.calibration_seeds) | (set(self.edge_seeds) if chose_eta else set())
        if not taken & set(self.seeds):
            return list(self.seeds)
        free = (s for s in range(2**32) if s not in taken)
        return [next(free) for _ in self.seeds]

    def first_look_seeds(self, mode: str, n: int) -> list:
        """A cell's first look: the sequential runs' seeds where the cell is read off them or is
        one (strong scaling, N = 1, 2 x eta), the preset's seeds for every trained cell; the seeds
        a second look adds come after them (docs/decision-rules.md, "Second look")."""
        return self.sequential_seeds() if mode in (policies.STRONG, DOUBLE_ETA) or n == 1 else list(self.seeds)

    def doubles_eta(self) -> bool:
        """Whether the study runs the paper's "further increasing the lr diverges" at 2 x eta
        (the paper's four modes; a beyond study compares with the default study instead)."""
        return not policies.goes_beyond_the_paper(self.modes)

    def _complete_data(self) -> bool:
        """Fill the data keys the preset leaves out from the defaults; are they in range?"""
        self.data = d = {**Study().data, **self.data}
        return all(schema.is_int(d[k]) for k in d) and 0 < d["val"] < d["n"] and 0 <= d["seed"] < 2**32


def _integer_list(key: str, value, lo: int, nonempty: bool = True) -> list:
    return [
        (
            lambda: (
                isinstance(value, list)
                and (bool(value) or not nonempty)
                and all(schema.is_int(v) and v >= lo for v in value)
            ),
            f"{key} must be a {'non-empty ' if nonempty else ''}list of integers >= {lo}, got {value!r}",
        ),
        (lambda: len(set(value)) == len(value), f"{key} lists a value twice: {value!r}"),
    ]


def load_study(preset: str) -> tuple:
    """(name, Study) of a preset's name (deepdensity/study/presets/NAME.yaml) or a .yaml path."""
    path = Path(preset) if preset.endswith(".yaml") else PRESETS / f"{preset}.yaml"
    if not path.exists():  # a folder or a FIFO at the path is read_mapping's to name
        names = sorted(p.stem for p in PRESETS.glob("*.yaml"))
        raise StudyError(f"no study preset {preset!r}; choose one of {', '.join(names)} or a .yaml path")
    raw = read_mapping(path, "study preset", StudyError, allow_empty=False)
    study = schema.build(Study, raw, error=StudyError, what="study key", source=str(path), prefix=f"{path}: ")
    try:  # the runs' settings, by the run settings' own schema
        runs = study.runs
    except ConfigError as e:
        raise StudyError(f"{path}: {e}" if str(e).startswith("train") else f"{path}: train: {e}") from None
    impossible = study.impossible_cells(runs)
    if impossible:
        more = f" (and {len(impossible) - 1} more cell(s))" if len(impossible) > 1 else ""
        raise StudyError(
            f"{path}: no run can train the cell {impossible[0]}{more}; take that N out of workers (or mode_workers)"
        )
    return path.stem, study
