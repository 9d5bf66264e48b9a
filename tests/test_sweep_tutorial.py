"""docs/tutorial.md works: every `$ ` command of its console blocks runs, in order, in a
fresh directory, after the files it shows (`<!-- write: NAME -->` before a code block) are
written; each documented output line appears (numbers may differ); the install commands
are the ones scripts/env.sh runs; the tutorial's stated finding holds. Reduced scale:
`reproduce all` runs two entries instead of the catalog."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = ROOT / "docs" / "tutorial.md"

#: command as documented -> command as tested (each must occur in the tutorial)
REDUCED = {
    "asymlink reproduce all --quick --out out/report":
        "asymlink reproduce _selftest adsl-problem --quick --out out/report",
}

_BLOCK = re.compile(r"(?:<!-- write: (?P<name>[^ ]+) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)```",
                    re.S)


def blocks() -> list[tuple[str, str | None, str]]:
    """(language, file to write or None, text) of every fenced block, in order."""
    return [(m["lang"], m["name"], m["body"]) for m in _BLOCK.finditer(TUTORIAL.read_text())]


def commands(text: str) -> list[tuple[str, list[str]]]:
    """The `$ ` commands of a console block with the output lines documented under each."""
    out: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out and line.strip():
            out[-1][1].append(line)
    return out


def _loose(line: str) -> re.Pattern[str]:
    """A documented output line as a pattern in which any number matches any number."""
    parts = re.split(r"\d+(?:\.\d+)?", line)
    return re.compile(r"\d+(?:\.\d+)?".join(re.escape(p) for p in parts))


def test_install_commands_are_the_scripts() -> None:
    env = (ROOT / "scripts" / "env.sh").read_text()
    install = [b for lang, _, b in blocks() if lang == "sh"][0]
    assert 'pip install -e ".[dev]"' in install
    # env.sh installs the extras named by ASYMLINK_EXTRAS, "dev" unless told otherwise.
    assert 'pip install -v -e ".${extras:+[$extras]}"' in env and "ASYMLINK_EXTRAS-dev" in env
    assert ". .venv/bin/activate" in install and ". .venv/bin/activate" in env
    assert "-m venv .venv" in install and '-m venv .venv' in env


def test_reduced_commands_are_in_the_tutorial() -> None:
    text = TUTORIAL.read_text()
    for documented in REDUCED:
        assert f"$ {documented}\n" in text


def test_tutorial_runs(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("ASYMLINK_SEED", None)
    try:
        import distributed  # noqa: F401
        have_dask = True
    except ImportError:
        have_dask = False
    ran = 0
    for lang, name, body in blocks():
        if name is not None:
            (tmp_path / name).write_text(body)
            continue
        if lang != "console":
            continue
        for command, expected in commands(body):
            if command == "python cluster.py" and not have_dask:
                continue     # dev installs dask[distributed]; without it this step is skipped
            command = REDUCED.get(command, command)
            proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=600, check=False)
            assert proc.returncode == 0, f"$ {command}\n{proc.stdout}\n{proc.stderr}"
            lines = proc.stdout.splitlines()
            for want in expected:
                pattern = _loose(want)
                assert any(pattern.fullmatch(got.rstrip()) for got in lines), \
                    f"$ {command}: no line like {want!r} in:\n{proc.stdout}"
            if command == "python cluster.py":
                assert "identical to the local run: True" in proc.stdout
            ran += 1
    assert ran >= 12
    # what the tutorial says the sweep shows
    agg = pd.read_parquet(tmp_path / "out" / "ackprio" / "aggregate.parquet")
    by = agg.set_index(["links.1.to_a.rate", "links.1.to_a.queue"])
    for rate in (256, 512, 1024):
        gain = (by.loc[(rate, "acks-first"), "download_mbps_mean"]
                - by.loc[(rate, "fifo"), "download_mbps_mean"])
        assert 1.4 < gain < 2.6, (rate, gain)
        assert (by.loc[(rate, "acks-first"), "upload_kbps_mean"]
                < by.loc[(rate, "fifo"), "upload_kbps_mean"])
    assert (tmp_path / "out" / "ackprio" / "tradeoff.png").stat().st_size > 10_000
    assert (tmp_path / "out" / "report" / "index.html").is_file()
    assert len(list((tmp_path / "out" / "ackprio" / "figures").glob("*.png"))) == 2


if __name__ == "__main__":
    pytest.main([__file__, "-q"])
