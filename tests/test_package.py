"""The package as a user installs it: a wheel built by maturin, installed into a fresh
virtual environment, run from an unrelated directory — the live box included, with no
cargo step and no ASYMLINK_BOX.

To keep this quick the fresh environment borrows the third-party dependencies (numpy,
pandas, ...) of the test environment through a `.pth` file and installs only the wheel
(`--no-deps`); what is checked is what the wheel itself carries.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("maturin") is None and shutil.which("cargo") is None:
        pytest.skip("building the wheel needs maturin and cargo")
    work = tmp_path_factory.mktemp("package")
    wheels = work / "wheels"
    # The same profile and target directory as the development install: a warm build.
    built = subprocess.run([sys.executable, "-m", "maturin", "build", "--release", "--quiet",
                            "--out", str(wheels)], cwd=ROOT, capture_output=True, text=True)
    if built.returncode != 0:
        pytest.fail(f"maturin build exited {built.returncode}:\n{built.stderr[-4000:]}")
    (wheel,) = wheels.glob("asymlink-*.whl")
    env_dir = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True)
    py = env_dir / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = subprocess.run([py, "-c", where], check=True, capture_output=True,
                             text=True).stdout.strip()
    deps = [p for p in site.getsitepackages() if Path(p).is_dir()]
    Path(purelib, "_asymlink_test_deps.pth").write_text("\n".join(deps) + "\n")
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
                   check=True)
    return env_dir


def _run(venv: Path, args: list[str], cwd: Path, timeout: float = 120
         ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ASYMLINK_BOX", "VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


BOX_TOML = textwrap.dedent("""\
    [interfaces]
    a = "al-pkg-a"
    b = "al-pkg-b"
    [to_a]
    qdisc = { kind = "fifo", limit = "50p" }
    """)


def test_installed_box_checks_configurations(venv: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "box.toml"
    cfg.write_text(BOX_TOML)
    r = _run(venv, ["asymlink", "box", "--config", str(cfg), "--check"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"ok: {cfg}"
    r = _run(venv, ["asymlink-box", "--config", str(cfg), "--check"], tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == f"ok: {cfg}", r.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text(BOX_TOML.replace('"50p"', '"fifty"'))
    r = _run(venv, ["asymlink-box", "--config", str(bad), "--check"], tmp_path)
    assert r.returncode == 2
    assert "limit" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_installed_package_runs_the_showcase(venv: Path, tmp_path: Path) -> None:
    r = _run(venv, ["asymlink", "run", "--example", "showcase", "--out", str(tmp_path / "o"),
                    "--set", "duration=2s"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "o" / "summary.md").is_file()


def test_installed_lab_runs_from_anywhere(venv: Path, tmp_path: Path, live_ok: None) -> None:
    r = _run(venv, ["asymlink", "lab", "run", "quick", "--out", str(tmp_path / "lab")],
             tmp_path, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert any((tmp_path / "lab").iterdir())
