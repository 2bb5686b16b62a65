"""Decisions the ranks take together. Every collective that makes ranks agree on a value goes
through `Ranks`, so that the reason for each one (only rank 0 reads the run folder, only
rank 0 writes the data, every rank must stop at the same epoch) is said in one place and
one process runs them all as no-ops."""

from __future__ import annotations

from deepdensity.config import ConfigError
from deepdensity.utils.errors import UserError


class Ranks:
    """The processes of one run, seen from one of them."""

    def __init__(self, backend):
        self.backend = backend

    @property
    def rank(self) -> int:
        return self.backend.rank()

    @property
    def size(self) -> int:
        return self.backend.size()

    def any(self, flag: bool) -> bool:
        """True on every rank when it is true on one (e.g. rank 0 alone knows a run is finished)."""
        if self.size == 1:
            return bool(flag)
        return self.backend.allreduce_max(float(bool(flag))) > 0

    def from_chief(self, value):
        """Rank 0's `value` on every rank (what rank 0 read from the run folder)."""
        if self.size == 1:
            return value
        return self.backend.broadcast_object(value)

    def chief_check(self, check, on_chief: bool):
        """Run `check` where `on_chief` (rank 0 alone reads and writes the run folder) and
        return its value there, None elsewhere; a refusal it raises (a UserError) is raised on
        every rank, so that no rank goes on into a collective that rank 0 has left (under
        horovodrun the others then crashed there, each with its own traceback)."""
        value, refusal = None, None
        if on_chief:
            try:
                value = check()
            except UserError as e:
                refusal = e
        if self.size > 1:
            refusal = self.backend.broadcast_object(refusal)
        if refusal is not None:
            raise refusal
        return value

    def wait_for_chief(self) -> None:
        """Every rank waits here until rank 0 arrives (after it wrote a file the others read)."""
        if self.size > 1:
            self.backend.allreduce_max(0.0)

    def require_same(self, settings: dict) -> None:
        """Every rank must train with the same settings and data: ranks started with other ones
        (a wrapper script, a stale config on one host) would otherwise train silently apart,
        crash deep in TensorFlow or hang. All ranks stop here with one line naming the difference."""
        if self.size == 1:
            return
        every = self.backend.gather(settings)
        differ = sorted({k for other in every for k in set(settings) | set(other) if other.get(k) != every[0].get(k)})
        if differ:
            shown = "; ".join(
                f"{k}: " + ", ".join(f"rank {r} {s.get(k)!r}" for r, s in enumerate(every)) for k in differ
            )
            raise ConfigError(
                f"the {self.size} ranks were started with different settings ({shown}); "
                f"start every rank with the same command, config and data"
            )
