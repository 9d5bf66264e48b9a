"""Running the live middlebox, which ships inside the package.

The box's Rust code (event loop, signals, privileges, devices) is compiled into the
extension module `asymlink._native`, so `pip install` is all it takes: no separate
binary to build or find. `python -m asymlink.live ARGS` (also installed as the
`asymlink-box` command) runs it as its own process, with the GIL released for the whole
run; `asymlink box` and the lab use that. `$ASYMLINK_BOX` may name another executable
taking the same arguments (for instance a standalone `cargo build -p asymlink-live`).

This module imports nothing heavy: starting the box does not load pandas or matplotlib.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


class BoxNotFound(RuntimeError):
    """`$ASYMLINK_BOX` names something that is not an executable file."""


def box_command() -> list[str]:
    """The command that runs the box; append the box's arguments (`--config FILE` ...)."""
    env = os.environ.get("ASYMLINK_BOX")
    if env:
        p = Path(env)
        if p.is_file() and os.access(p, os.X_OK):
            return [str(p)]
        raise BoxNotFound(f"ASYMLINK_BOX={env} is not an executable file")
    return [sys.executable, "-m", "asymlink.live"]


def check_config(path: Path) -> str | None:
    """Validate a box configuration; returns the one-line error, or None when valid.
    Touches no device."""
    from asymlink._native import box_check

    err = box_check(str(path))
    return None if err is None else err


def run_box(argv: list[str]) -> int:
    """Run the box in this process (arguments as for `asymlink-box`); returns its exit
    status. SIGINT/SIGTERM stop it cleanly and SIGHUP reloads, as for the binary."""
    from asymlink._native import box_main

    return box_main(argv)


def main() -> None:
    """Entry point of `python -m asymlink.live` and of the `asymlink-box` command."""
    sys.exit(run_box(sys.argv[1:]))


if __name__ == "__main__":
    main()
