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


def header(name: str) -> list[str]:
    """The example's leading `#` comment block, one string per line (without the `# `),
    so that drawings and commands keep their lines."""
    lines = []
    for line in load(name).to_toml().splitlines():
        if not line.startswith("#"):
            break
        text = line[1:]
        lines.append(text[1:] if text.startswith(" ") else text)
    return lines


def describe(name: str) -> str:
    """The example's description: the first paragraph of its header, joined."""
    lines = header(name)
    first = lines[: lines.index("")] if "" in lines else lines
    return " ".join(line.strip() for line in first)
