"""Command lines that explain themselves: the module docstring as description and examples,
and every flag's default in `--help`."""
from __future__ import annotations

import argparse


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The docstring's examples kept as written; ' (default: X)' after every flag's help that
    has a default (not after a required flag, a switch or a flag that is off unless given)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False or action.default == [] or action.required:
            return action.help
        return super()._get_help_string(action)


def parser(doc: str, prog: str) -> argparse.ArgumentParser:
    """A parser whose description is the docstring's first paragraph and whose epilog is the rest."""
    first, _, rest = doc.strip().partition("\n\n")
    return argparse.ArgumentParser(prog=prog, description=first, epilog=rest.strip("\n") or None,
                                   formatter_class=HelpFormatter)
