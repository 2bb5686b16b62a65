"""One schema engine for every settings file: the run settings (config.Config) and the
study presets (study.preset.Study).

A schema is a dataclass. Its defaults are the defaults; its type hints say how a YAML or
`--set` value is read (`coerce`: scalars and tuples of integers are converted where that is
lossless; lists, mappings and `object` pass through to the rules); and its `rules()`
lists the checks of the whole, each a (test, message) pair, tested in order so that a
later test may rely on an earlier one. `build` applies all three and names the first
problem in one line.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from typing import Any, Tuple


def build(cls, values: dict, *, error: type, what: str, source: str = "", base=None, prefix: str = ""):
    """A `cls` from `base` (default: the defaults) updated by `values`.

    Raises `error`: for an unknown key (with the closest known one; `prefix` first), for a value its type
    hint cannot read (`source: ...`), or for the first rule that fails (`prefix` + its
    message)."""
    names = [f.name for f in dataclasses.fields(cls)]
    hints = typing.get_type_hints(cls)
    current = {n: getattr(base, n) for n in names} if base is not None else {}
    for key, value in values.items():
        if key not in names:
            raise error(prefix + unknown_key(key, names, what))
        try:
            current[key] = coerce(key, hints[key], value, error)
        except error as e:
            raise error(f"{source}: {e}" if source else str(e)) from None
    obj = cls(**current)
    for test, message in obj.rules():
        if not test():
            raise error(prefix + message)
    return obj


def unknown_key(key: str, known, what: str) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown {what} {key!r}{hint}; known keys: {', '.join(known)}"


def coerce(key: str, hint, value: Any, error: type) -> Any:
    """Check `value` against the type hint of `key`, converting where it is lossless."""
    origin = typing.get_origin(hint)
    if origin in (tuple, Tuple):
        if isinstance(value, str):
            value = [v for v in value.replace("[", "").replace("]", "").split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise error(f"{key} expects a list of integers like [32, 32, 32], got {value!r}")
        return tuple(_scalar(key, int, v, error) for v in value)
    if origin is typing.Union:  # Optional[X]: None, or an X
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        return None if value is None else coerce(key, inner[0], value, error)
    if hint in (bool, int, float, str):
        return _scalar(key, hint, value, error)
    return value  # lists, mappings, object: the rules check them


# YAML 1.1's words for true and false besides those (config.parse_set keeps them as given)
TRUE_WORDS = ("yes", "on")
BOOLEAN_WORDS = (*TRUE_WORDS, "no", "off")


def _scalar(key: str, typ: type, value: Any, error: type) -> Any:
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in (*BOOLEAN_WORDS, "true", "false", "1", "0"):
            return value.lower() in ("true", "1", *TRUE_WORDS)
        raise error(f"{key} expects true or false, got {value!r}")
    if typ is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        raise error(f"{key} expects an integer, got {value!r}")
    if typ is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads 1e-3 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
        raise error(f"{key} expects a number, got {value!r}")
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, bool):  # YAML 1.1 read on/off/yes/no as one; the word is lost
        raise error(
            f"{key} expects a string, got {value!r} (YAML reads true, false, on, off, yes and no as "
            f"true or false: quote the word, as in {key}: 'off')"
        )
    raise error(f"{key} expects a string, got {value!r}")


def is_int(v) -> bool:
    """An integer and not a bool (YAML's true is an int to Python)."""
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
