"""Example scenarios shipped inside the package (`asymlink run --example NAME`)."""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable

from asymlink.scenario import Scenario


def _directory() -> Traversable:
    return files(__name__)


def names() -> list[str]:
    """The names of the shipped examples, sorted."""
    return sorted(
        entry.name.removesuffix(".toml")
        for entry in _directory().iterdir()
        if entry.name.endswith(".toml")
    )


def load(name: str) -> Scenario:
    """The example `name` as a Scenario (origin `example:NAME`). Raises `KeyError` naming
    the available examples when there is none of that name."""
    if name not in names():
        raise KeyError(f"no example named {name!r} (available: {', '.join(names())})")
    text = _directory().joinpath(f"{name}.toml").read_text(encoding="utf-8")
    return Scenario.from_toml(text, origin=f"example:{name}")


def describe(name: str) -> str:
    """The example's description: its leading `#` comment lines joined."""
    lines = []
    for line in load(name).to_toml().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return " ".join(lines)
