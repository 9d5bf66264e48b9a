"""Checking configuration tables: one error type and one set of checks for every file the
Python layer reads itself (sweep specs, a reproduction's `paper.toml`, lab scenarios).

Errors name the key: `ConfigError(path, msg)` reads "path: msg" on one line, where `path`
is where the value sits (`flows[0].rate`, or a file name followed by the key). A scenario
the engine refuses raises `ScenarioError`, a `ConfigError` that also names the file, so
`except ConfigError` catches every configuration mistake. Quantities
are parsed by the core (`asymlink._native`), so a rate, size or duration is accepted here
exactly when a scenario file accepts it:

    >>> rate("1.5Mbit/s", "flows[0].rate")
    1500000
    >>> seconds("2min", "duration")
    120.0
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from difflib import get_close_matches
from typing import Any

# `asymlink._native` is imported where it is used: the native module imports this one
# (for `ScenarioError`) while it initialises.


class ConfigError(ValueError):
    """A configuration value is wrong: `path` (where) and `msg` (what). `str(e)` is
    "path: msg"."""

    def __init__(self, path: str, msg: str) -> None:
        super().__init__(f"{path}: {msg}" if path else msg)
        self.path = path
        self.msg = msg

    def within(self, prefix: str) -> ConfigError:
        """The same error (same class) with `prefix` in front of its path."""
        if not prefix:
            return self
        path = prefix if not self.path else (
            f"{prefix}{self.path}" if self.path.startswith("[") else f"{prefix}.{self.path}")
        return type(self)(path, self.msg)

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuild from the fields (the default would pass the formatted message alone),
        # so the error survives a process pool or a Dask worker.
        return (type(self), (self.path, self.msg))


_LINE = re.compile(r"\((?:at )?line (\d+)")


class ScenarioError(ConfigError):
    """A scenario is invalid. `origin` is the file (or "<string>"), `key` the key path
    (`links[1].to_a.rate`; empty for the whole file; also `path`), `msg` what is wrong and
    `line` the line the message names (None if it names none). `str(e)` is
    "origin: key: msg". The engine raises it (through `asymlink._native`), and so do
    `Scenario` and `run`."""

    def __init__(self, origin: str, key: str, msg: str) -> None:
        super().__init__(key, msg)
        self.args = (f"{origin}: {self.args[0]}",)
        self.origin = origin
        lines = _LINE.findall(msg)
        self.line: int | None = int(lines[-1]) if lines else None

    @property
    def key(self) -> str:
        return self.path

    def within(self, prefix: str) -> ScenarioError:
        return ScenarioError(self.origin, ConfigError(self.path, self.msg).within(prefix).path,
                             self.msg)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.origin, self.path, self.msg))


def only(item: Mapping[str, Any], allowed: Iterable[str], where: str) -> None:
    """Refuse keys outside `allowed`, suggesting the closest allowed one."""
    allowed = set(allowed)
    for key in item:
        if key not in allowed:
            close = get_close_matches(str(key), sorted(allowed), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                where, f"unknown key {key!r}{hint}; allowed: {', '.join(sorted(allowed))}")


def table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(where, f"expected a table, got {value!r}")
    return value


def string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(where, f"expected a string, got {value!r}")
    return value


def boolean(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(where, f"expected true or false, got {value!r}")
    return value


def is_number(value: Any) -> bool:
    """An int or float, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def integer(value: Any, where: str, minimum: int | None = None,
            maximum: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(where, f"expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(where, f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(where, f"must be <= {maximum}, got {value}")
    return value


def number(value: Any, where: str) -> float:
    if not is_number(value) or not math.isfinite(value):
        raise ConfigError(where, f"expected a finite number, got {value!r}")
    return float(value)


def _quantity(parse: Callable[[str], int], value: Any, where: str) -> int:
    if not isinstance(value, str):
        raise ConfigError(where, f"expected a string with a unit, got {value!r}")
    try:
        return int(parse(value))
    except ValueError as e:
        raise ConfigError(where, str(e)) from None


def rate(value: Any, where: str) -> int:
    """A rate (`512kbit`, `1.5Mbit/s`, `10Kibit`) in bit/s."""
    from asymlink import _native

    return _quantity(_native.parse_rate, value, where)


def size(value: Any, where: str) -> int:
    """A size (`1500B`, `64KB`, `64KiB`, `1.5MB`) in bytes."""
    from asymlink import _native

    return _quantity(_native.parse_size, value, where)


def nanoseconds(value: Any, where: str) -> int:
    """A duration (`250ns`, `200ms`, `1.5s`, `2min`) in integer nanoseconds."""
    from asymlink import _native

    return _quantity(_native.parse_duration, value, where)


def seconds(value: Any, where: str) -> float:
    """A duration in seconds."""
    return nanoseconds(value, where) / 1e9
