"""Scenarios: TOML text plus the parsed data, with dotted-path overrides.

The schema belongs to the Rust engine; this module only reads, edits and writes TOML and
asks the engine to validate.
"""

from __future__ import annotations

import copy
import tomllib
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

import tomli_w

from asymlink import _native
from asymlink.validate import ScenarioError

STRING_ORIGIN = "<string>"


class Scenario:
    """An immutable scenario: its TOML text, the parsed data and where it came from."""

    __slots__ = ("_data", "_origin", "_text")

    def __init__(self, text: str, data: dict[str, Any], origin: str) -> None:
        """Prefer the `from_*` constructors; `data` must be what `text` parses to."""
        self._text = text
        self._data = data
        self._origin = origin

    @classmethod
    def from_toml(cls, text: str, origin: str = STRING_ORIGIN) -> Scenario:
        """Parse TOML text. Raises `ScenarioError` for invalid TOML."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ScenarioError(origin, "", str(e)) from None
        return cls(text, data, origin)

    @classmethod
    def from_file(cls, path: str | PathLike[str]) -> Scenario:
        """Read a TOML file (UTF-8). Raises `OSError` if unreadable, `ScenarioError`
        if not UTF-8 text or not TOML."""
        p = Path(path)
        return cls.from_toml(read_text_file(p), origin=str(p))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], origin: str = STRING_ORIGIN) -> Scenario:
        """Serialise `data` to TOML (tomli-w). Raises `TypeError` for values TOML
        cannot hold."""
        plain = copy.deepcopy(dict(data))
        return cls(tomli_w.dumps(plain), plain, origin)

    @property
    def name(self) -> str:
        """The scenario's `name`, else the file name without extension."""
        name = self._data.get("name")
        if isinstance(name, str) and name:
            return name
        return Path(self._origin).stem if self._origin != STRING_ORIGIN else "scenario"

    @property
    def origin(self) -> str:
        """The file it was read from, or "<string>"."""
        return self._origin

    @property
    def data(self) -> dict[str, Any]:
        """A copy of the parsed data (editing it does not change the scenario)."""
        return copy.deepcopy(self._data)

    def to_toml(self) -> str:
        """The TOML text: the original for a parsed scenario (comments kept), tomli-w
        output after `from_dict` or `with_overrides`."""
        return self._text

    def get(self, path: str) -> Any:
        """The value at a dotted path such as `links.0.rate`. Raises `ScenarioError`
        naming the path when it does not exist."""
        return copy.deepcopy(_walk(self._data, _split(path, self._origin), self._origin))

    def with_overrides(self, overrides: Mapping[str, Any]) -> Scenario:
        """A copy with values replaced at dotted paths such as `links.access.rate` or
        `flows.1.tcp.mss` (integers index arrays; a name picks the table of that `name`
        in an array of named tables). Every container on the path must
        exist; the last key of a table may be new. Raises `ScenarioError` naming the
        path otherwise. When every path names a value written in the text, the values
        are replaced in place, so comments and line numbers (in error messages) stay
        those of the original; otherwise the text is re-serialised (tomli-w)."""
        data = copy.deepcopy(self._data)
        for path, value in overrides.items():
            _set_path(data, path, value, self._origin)
        text = _patch_text(self._text, overrides, data)
        return Scenario(tomli_w.dumps(data) if text is None else text, data, self._origin)

    def simulation(
        self, *, seed: int | None = None, out_dir: str | PathLike[str] | None = None,
        threads: int = 1,
    ) -> _native.Simulation:
        """Build the native simulation (`threads` > 1: a partitioned run, see
        docs/performance.md "Two cores"). Raises `ScenarioError`."""
        return _native.Simulation(self._text, self._origin, out_dir, seed, threads)

    def validate(self) -> None:
        """Check the scenario with the engine (builds and discards a simulation)."""
        self.simulation()

    def __repr__(self) -> str:
        return f"Scenario(name={self.name!r}, origin={self._origin!r})"


def read_text_file(path: Path) -> str:
    """The UTF-8 text of `path`. Raises `OSError` if unreadable and `ScenarioError`
    (one line, naming the file and the first bad byte) if it is not UTF-8 text."""
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ScenarioError(
            str(path), "",
            f"not a UTF-8 text file (byte 0x{raw[e.start]:02x} at line {line}); "
            "scenarios and sweep specs are TOML text",
        ) from None


def _inline(value: Any) -> str | None:
    """`value` as a one-line TOML value, or None if it cannot be written on one line."""
    if isinstance(value, dict):
        items = []
        for k, v in value.items():
            inner = _inline(v)
            if inner is None:
                return None
            key = k if k and all(c.isalnum() or c in "_-" for c in k) else _inline(k)
            items.append(f"{key} = {inner}")
        return "{ " + ", ".join(items) + " }" if items else "{}"
    try:
        text = tomli_w.dumps({"v": value}).partition("=")[2].strip()
    except TypeError:
        return None
    return text if text and "\n" not in text else None


def _patch_text(text: str, overrides: Mapping[str, Any], data: dict[str, Any]) -> str | None:
    """`text` with each overridden value replaced where it is written, or None when that is
    not possible (a new key, a value spread over lines) or would not give `data`."""
    raw = text.encode("utf-8")
    for path, value in overrides.items():
        span = _native.value_span(raw.decode("utf-8"), path)
        new = _inline(value)
        if span is None or new is None or b"\n" in raw[span[0]:span[1]]:
            return None
        raw = raw[: span[0]] + new.encode("utf-8") + raw[span[1]:]
    patched = raw.decode("utf-8")
    try:
        same = tomllib.loads(patched) == data
    except tomllib.TOMLDecodeError:
        same = False
    return patched if same else None


def _split(path: str, origin: str) -> list[str]:
    parts = path.split(".")
    if any(not p for p in parts):
        raise ScenarioError(origin, path, "empty component in key path")
    return parts


def _walk(data: dict[str, Any], parts: list[str], origin: str) -> Any:
    """The value at `parts`; the error names the prefix of the path that failed."""
    node: Any = data
    for depth, part in enumerate(parts):
        node = _child(node, part, ".".join(parts[: depth + 1]), origin)
    return node


def _set_path(data: dict[str, Any], path: str, value: Any, origin: str) -> None:
    parts = _split(path, origin)
    node = _walk(data, parts[:-1], origin)
    last = parts[-1]
    if isinstance(node, list):
        node[_index(node, last, path, origin)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise _not_container(origin, path, ".".join(parts[:-1]), node)


def _child(node: Any, part: str, prefix: str, origin: str) -> Any:
    if isinstance(node, list):
        return node[_index(node, part, prefix, origin)]
    if isinstance(node, dict):
        if part not in node:
            keys = ", ".join(sorted(node)) or "none"
            raise ScenarioError(
                origin, prefix, f"no such key (existing keys: {keys})"
            )
        return node[part]
    parent = prefix.rpartition(".")[0]
    raise _not_container(origin, prefix, parent, node)


def _index(node: list[Any], part: str, prefix: str, origin: str) -> int:
    """The element `part` of an array: an integer index, or the name of a table in an
    array of named tables (`links.access.rate`)."""
    if not (part.isascii() and part.isdigit()):
        names = [item.get("name") for item in node if isinstance(item, dict)]
        if part in names:
            return names.index(part)
        known = ", ".join(repr(n) for n in names if isinstance(n, str))
        raise ScenarioError(
            origin,
            prefix,
            f"expected an array index or a name, got {part!r} (the array has {len(node)} "
            f"elements{'; names: ' + known if known else ''})",
        )
    i = int(part)
    if i >= len(node):
        raise ScenarioError(
            origin, prefix, f"index out of range (the array has {len(node)} elements)"
        )
    return i


def _not_container(origin: str, path: str, parent: str, value: Any) -> ScenarioError:
    return ScenarioError(
        origin, path, f"{parent} is a {type(value).__name__} ({value!r}), not a table or array"
    )
