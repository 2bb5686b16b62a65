"""The study's one error type. It is raised by every stage (preset, clock, runner, Slurm,
reports), so it lives apart from any of them."""
from deepdensity.utils.errors import UserError


class StudyError(UserError):
    """A study that cannot go on as asked: one line naming the file, the key or the run."""
