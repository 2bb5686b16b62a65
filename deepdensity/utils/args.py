"""Command lines that explain themselves: the module docstring as description and examples,
and every flag's default in `--help`."""

from __future__ import annotations

import argparse

from deepdensity.utils import stack
from deepdensity.utils.errors import UserError


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The docstring's examples kept as written; ' (default: X)' after every flag's help that
    has a default (not after a required flag, a switch or a flag that is off unless given)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or action.default == [] or action.required:
            return action.help
        return super()._get_help_string(action)


def version() -> str:
    """'deepdensity X.Y.Z' from the installed distribution (pyproject.toml's version), then the
    Python, TensorFlow, Keras and Horovod found here and whether the project supports them
    (utils/stack.py)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        own = f"deepdensity {installed('deepdensity')}"
    except PackageNotFoundError:  # run from a checkout that was never installed
        own = "deepdensity (not installed)"
    return "\n".join([own, *stack.describe(stack.found())])


class VersionAction(argparse.Action):
    """--version: like argparse's, but the text is made when asked for, not with every parser
    (it reads the installed distributions)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(
            option_strings,
            dest=dest,
            default=default,
            nargs=0,
            help=help or "print the version, the TensorFlow, Keras and Horovod found, and exit",
        )

    def __call__(self, parser, namespace, values, option_string=None):
        print(version())
        parser.exit()


SEED_LIMIT = 2**32  # NumPy's and TensorFlow's seeds are unsigned 32-bit


class CheckedParser(argparse.ArgumentParser):
    """Values every command shares are checked once here, after parsing: a bad one is a
    UserError, one line and exit status 2 as every bad input (utils.errors.command), never a
    traceback from deep in NumPy. (argparse turns a type function's ValueError into a usage
    message instead, so the check cannot live in `type=`.)"""

    def parse_args(self, args=None, namespace=None):
        ns = super().parse_args(args, namespace)
        seed = getattr(ns, "seed", None)
        if seed is not None and not 0 <= seed < SEED_LIMIT:
            raise UserError(f"--seed must be an integer in [0, 2^32), got {seed}")
        return ns


def parser(doc: str, prog: str) -> argparse.ArgumentParser:
    """A parser whose description is the docstring's first paragraph and whose epilog is the
    rest, with --version."""
    first, _, rest = doc.strip().partition("\n\n")
    ap = CheckedParser(prog=prog, description=first, epilog=rest.strip("\n") or None, formatter_class=HelpFormatter)
    ap.add_argument("--version", action=VersionAction)
    return ap
