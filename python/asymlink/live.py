"""Finding, checking and running the live middlebox binary (`asymlink-box`).

The box is a Rust program (signals, privileges and devices are handled there); this
module only locates it and starts it. It looks, in order, at `$ASYMLINK_BOX`, the
workspace's `target/release` and `target/debug` (a source checkout), then `PATH`.
Build it with `cargo build --release -p asymlink-live`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

BINARY = "asymlink-box"


class BoxNotFound(RuntimeError):
    """The binary is not built or not on PATH."""


def _workspace() -> Path:
    return Path(__file__).resolve().parents[2]


def box_binary() -> Path:
    """The path of `asymlink-box`; raises `BoxNotFound` with how to build it."""
    env = os.environ.get("ASYMLINK_BOX")
    if env:
        p = Path(env)
        if p.is_file() and os.access(p, os.X_OK):
            return p
        raise BoxNotFound(f"ASYMLINK_BOX={env} is not an executable file")
    for profile in ("release", "debug"):
        p = _workspace() / "target" / profile / BINARY
        if p.is_file() and os.access(p, os.X_OK):
            return p
    found = shutil.which(BINARY)
    if found:
        return Path(found)
    raise BoxNotFound(
        f"{BINARY} not found: build it with `cargo build --release -p asymlink-live` "
        "(or set ASYMLINK_BOX to its path)"
    )


def check_config(path: Path) -> str | None:
    """Validate a box configuration with the binary itself; returns the error message or
    None when valid. Touches no device."""
    r = subprocess.run([str(box_binary()), "--config", str(path), "--check"],
                       capture_output=True, text=True, timeout=30)
    if r.returncode == 0:
        return None
    return (r.stderr or r.stdout).strip().removeprefix("asymlink-box: ")


def exec_box(config: Path, extra: list[str] | None = None) -> None:
    """Replace this process with the box (the `asymlink box` command): signals reach the
    box directly (SIGHUP reload, SIGINT/SIGTERM clean exit) and its exit status is the
    command's. Does not return."""
    binary = str(box_binary())
    os.execv(binary, [binary, "--config", str(config), *(extra or [])])
