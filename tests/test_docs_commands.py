"""Every `asymlink` command the docs and the examples print works.

Commands are taken from the fenced code blocks of README.md and docs/*.md and from the
header comments of the shipped scenario and sweep files. Each is parsed by the real
command-line interface (an unknown option or command fails here); those that can run
quickly do run, shortened: `run` with `--set duration=1s`, `sweep` with `--check`,
`bench sim` with two flows for half a second, `validate`, `plot`, `examples` and
`reproduce --list` as written. A Markdown block's commands run in order in one
directory, so `plot out/x` finds what `run --out out/x` wrote just before. Reproductions
are checked by ID (CI runs the quick catalog elsewhere). Commands that need root (`box`,
`lab`, `bench live`) are parsed here and run, shortened, in the root-gated suite:
`lab list` as written, `lab run` on the shipped scenario with its times scaled to 3 s,
`box` with `--check` / `--print-effective` on the line-mode configuration of
docs/live.md, `bench live` for 1 s per measurement (`--subscribers` with 4 lines, 2 of
them saturated with `--saturate`).
`lab parity` and `lab conformance` (minutes together) are parsed here and run as
printed, one experiment or all cases at a time, by tests/test_parity.py and
tests/test_conformance.py, not a second time here.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import tomli_w
from click.testing import CliRunner

from asymlink import repro
from asymlink.cli import cli
from asymlink.validate import seconds

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "python" / "asymlink"
# Words of a synopsis line ("asymlink run SCENARIO --out DIR [...]"): not runnable.
SYNOPSIS = re.compile(r"^\[|\.\.\.|^\|$|^(SCENARIO|DIR|SPEC|ID|NAME|FILE|RESULTS_DIR|ADDRESS|S|N)"
                      r"(\.\.\.)?\]?$")
ROOT_ONLY = {("box",), ("lab",), ("bench", "live")}


@dataclass(frozen=True)
class Command:
    source: str          # file:line
    base: Path           # where relative file arguments are looked up
    block: str           # commands of one block run in order in one directory
    args: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.source}: asymlink {shlex.join(self.args)}"


def _join_continuations(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, text in lines:
        if pending is not None:
            pending = (pending[0], pending[1] + " " + text.strip())
        else:
            pending = (number, text.strip())
        if pending[1].endswith("\\"):
            pending = (pending[0], pending[1][:-1].rstrip())
            continue
        out.append(pending)
        pending = None
    if pending is not None:
        out.append(pending)
    return out


def _commands_in(lines: list[tuple[int, str]], source: Path, base: Path, block: str
                 ) -> list[Command]:
    found = []
    for number, text in _join_continuations(lines):
        text = text.removeprefix("$ ").strip()
        if not text.startswith("asymlink ") or "$" in text or "<" in text:
            continue
        args = tuple(shlex.split(text, comments=True))[1:]
        if any(SYNOPSIS.search(a) for a in args):
            continue
        rel = source.relative_to(REPO)
        found.append(Command(f"{rel}:{number}", base, block, args))
    return found


def markdown_commands() -> list[Command]:
    commands = []
    for md in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        in_block, block, start = False, [], 0
        for number, line in enumerate(md.read_text().splitlines(), 1):
            if line.lstrip().startswith("```"):
                if in_block:
                    commands += _commands_in(block, md, REPO, f"{md.name}:{start}")
                in_block, block, start = not in_block, [], number
            elif in_block:
                block.append((number, line))
    return commands


def example_commands() -> list[Command]:
    commands = []
    files = [*sorted((PACKAGE / "examples").glob("*.toml")),
             *sorted((REPO / "examples").rglob("*.toml")),
             *sorted((PACKAGE / "repro" / "scenarios").rglob("*.toml"))]
    for f in files:
        header = []
        for number, line in enumerate(f.read_text().splitlines(), 1):
            if not line.startswith("#"):
                break
            header.append((number, line[1:]))
        commands += _commands_in(header, f, f.parent, str(f))
    return commands


def _one_per_pattern(commands: list[Command]) -> list[Command]:
    """Generated scenario families print the same command with another file name
    (`n01.toml` ... `n20.toml`): keep the first of each directory and pattern."""
    seen, kept = set(), []
    for c in commands:
        key = (c.base, re.sub(r"\d+", "#", shlex.join(c.args)))
        if key not in seen:
            seen.add(key)
            kept.append(c)
    return kept


ALL = markdown_commands() + _one_per_pattern(example_commands())


def _parse(args: list[str]) -> tuple[tuple[str, ...], dict[str, object]]:
    """The subcommand path (`("bench", "sim")`) and its parsed parameters, parsing every
    level the way click does: an unknown command or option fails here."""
    ctx = cli.make_context("asymlink", list(args))
    command: click.Command = cli
    path: list[str] = []
    rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
    while isinstance(command, click.Group) and rest:
        name, sub, rest = command.resolve_command(ctx, rest)
        assert sub is not None and name is not None
        path.append(name)
        ctx = sub.make_context(name, list(rest), parent=ctx)
        command = sub
        rest = ([*getattr(ctx, "_protected_args", []), *ctx.args]
                if isinstance(sub, click.Group) else [])
    return tuple(path), dict(ctx.params)


def _resolve_files(args: list[str], base: Path) -> list[str]:
    """Arguments naming files that exist (relative to the file that printed the command,
    or to the repository) as absolute paths."""
    out = []
    for a in args:
        for root in (base, REPO):
            if not a.startswith("-") and a.endswith(".toml") and (root / a).is_file():
                a = str(root / a)
                break
        out.append(a)
    return out


def _exists(a: str) -> bool:
    return Path(a).is_file()


def _runnable(path: tuple[str, ...], args: list[str]) -> list[str] | None:
    """The shortened command to run, or None when it is only parsed."""
    files = [a for a in args if a.endswith(".toml")]
    if path == ("run",):
        if files and not all(map(_exists, files)):
            return None
        return [*args, "--set", "duration=1s", "--no-progress"]
    if path == ("sweep",):
        return [*args, "--check"] if files and all(map(_exists, files)) else None
    if path == ("validate",):
        return args if files and all(map(_exists, files)) else None
    if path == ("bench", "sim"):
        return None if "--scaling" in args else [*args, "--flows", "2", "--duration", "0.5"]
    if path == ("plot",):
        return args if Path(args[1]).is_dir() else None  # results of an earlier command
    if path in {("examples",), ()} or args == ["reproduce", "--list"]:
        return args
    return None


def test_the_docs_and_examples_print_commands() -> None:
    sources = {c.source.split(":")[0] for c in ALL}
    assert "README.md" in sources and "docs/cli.md" in sources
    assert "python/asymlink/examples/showcase.toml" in sources
    assert any(c.args[:1] == ("sweep",) for c in ALL)


@pytest.mark.parametrize("block", sorted({c.block for c in ALL}))
def test_printed_commands_work(block: str, tmp_path_factory: pytest.TempPathFactory,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path_factory.mktemp("cmd"))
    runner = CliRunner()
    for command in [c for c in ALL if c.block == block]:
        args = _resolve_files(list(command.args), command.base)
        if args == ["--version"]:
            path: tuple[str, ...] = ()
        elif tuple(args[:1]) in ROOT_ONLY or tuple(args[:2]) in ROOT_ONLY:
            # parsed only; their config files are the user's own (box.toml)
            try:
                _parse(args)
            except click.BadParameter as e:
                assert "does not exist" in str(e), f"{command}: {e}"
            continue
        else:
            path, params = _parse(args)
            if path == ("reproduce",) and not params["list_only"]:
                for entry_id in params["entry_ids"]:  # type: ignore[attr-defined]
                    if entry_id != "all":
                        repro.get(entry_id)  # a KeyError names an unknown ID
                continue
        if path[:1] in ROOT_ONLY or path in ROOT_ONLY:
            continue
        shortened = _runnable(path, args)
        if shortened is None:
            continue
        result = runner.invoke(cli, shortened)
        assert result.exit_code == 0, f"{command}\n{result.output}{result.stderr}"


def test_bench_sim_defaults_in_help_match_the_docs() -> None:
    from asymlink.bench import STANDARD

    help_text = " ".join(CliRunner().invoke(cli, ["bench", "sim", "--help"]).output.split())
    doc = (REPO / "docs" / "cli.md").read_text()
    section = " ".join(doc.split("## `asymlink bench sim`")[1].split("\n## ")[0].split())
    for option, key, doc_phrase in (("--flows", "flows", "flows (default {})"),
                                    ("--duration", "duration_s", "seconds (default {})"),
                                    ("--bottleneck", "bottleneck_bps", "bit/s (default {}")):
        value = f"{STANDARD[key]:g}"
        assert f"(default: {value})" in help_text.split(option, 1)[1].split(" --", 1)[0]
        assert doc_phrase.format(value) in section, (option, section)
    # the keys the docs name are the keys the benchmark reports
    named = set(re.findall(r"`([a-z_]+)`", section))
    out = CliRunner().invoke(cli, ["bench", "sim", "--json", "--flows", "1", "--duration",
                                   "0.1"]).output
    reported = set(json.loads(out))
    assert named - {"asymlink"} <= reported, named - reported
    assert {"flows", "sim_s", "packet_hops_per_sec", "peak_rss_mb"} <= named


# --- commands that need root, run shortened in the root-gated suite ------------------------

LAB_SCENARIOS = PACKAGE / "lab" / "scenarios"
#: `lab run` scenarios are scaled to this length (their flows and windows with them).
LAB_SECONDS = 3.0


def _root_key(args: list[str]) -> str:
    """What a root command runs, shortened: without its `--out` directory; for `bench
    live`, the options as a set, without the values the shortened run replaces
    (`--seconds`, `--subscribers`, `--saturate`) and with its `--io` modes as a set (an
    order or a group name that names the same modes runs the same code)."""
    args = list(args)
    if args[:2] != ["bench", "live"]:
        return re.sub(r"--out \S+", "", shlex.join(args))
    from asymlink.lab.bench import IO_GROUPS
    out: list[str] = []
    i = 2
    while i < len(args):
        a = args[i]
        if a in ("--seconds", "--subscribers", "--saturate", "--out", "--io") \
                and i + 1 < len(args):
            v = args[i + 1]
            if a == "--io":
                modes = {m for x in v.split(",") for m in IO_GROUPS.get(x, (x,))}
                out.append(f"--io={','.join(sorted(modes))}")
            elif a in ("--subscribers", "--saturate"):
                out.append(a)
            i += 2
            continue
        out.append(a)
        i += 1
    return "bench live " + " ".join(sorted(out))


def _root_commands() -> list[Command]:
    """Each root command once (`lab run NAME` printed twice, with other `--out`
    directories, runs once; see `_root_key`)."""
    seen, kept = set(), []
    for c in ALL:
        key = _root_key(c.args)
        if (tuple(c.args[:1]) in ROOT_ONLY or tuple(c.args[:2]) in ROOT_ONLY) \
                and key not in seen:
            seen.add(key)
            kept.append(c)
    return kept


def _shortened_lab_scenario(name: str, directory: Path) -> Path:
    """The shipped lab scenario `name` with every time in it scaled to `LAB_SECONDS`."""
    doc = tomllib.loads((LAB_SCENARIOS / f"{name}.toml").read_text())
    scale = min(1.0, LAB_SECONDS / seconds(doc.get("duration", "10s"), "duration"))

    def scaled(v: str) -> str:
        return f"{seconds(v, 'time') * scale:.3f}s"

    doc["duration"] = scaled(doc.get("duration", "10s"))
    doc["windows"] = {k: [scaled(a), scaled(b)] for k, (a, b) in doc.get("windows", {}).items()}
    for item in [*doc.get("flows", []), *doc.get("probes", [])]:
        for key in ("start", "stop"):
            if key in item:
                item[key] = scaled(item[key])
    path = directory / f"{name}.toml"
    path.write_text(tomli_w.dumps(doc))
    return path


def _box_config(directory: Path) -> Path:
    """The line-mode box configuration docs/live.md shows."""
    doc = (REPO / "docs" / "live.md").read_text()
    block = next(b for b in re.findall(r"```toml\n(.*?)```", doc, re.S)
                 if b.startswith("line = "))
    path = directory / "box.toml"
    path.write_text(block)
    return path


def _root_runnable(path: tuple[str, ...], args: list[str], directory: Path) -> list[str] | None:
    if path == ("lab", "list"):
        return args
    if path == ("lab", "run"):
        name = args[2]
        if not (LAB_SCENARIOS / f"{name}.toml").is_file():
            return None
        return ["lab", "run", str(_shortened_lab_scenario(name, directory)), *args[3:]]
    if path == ("box",):
        config = str(_box_config(directory))
        rest = [a for a in args[1:] if a not in ("--config", "box.toml")]
        return ["box", "--config", config, *(rest or ["--check"])]
    if path == ("bench", "live"):
        if "--subscribers" in args:
            # A thousand lines take minutes to set up and measure; four show the command.
            i = args.index("--subscribers")
            args = [*args[:i + 1], "4", *args[i + 2:]]
        if "--saturate" in args:
            i = args.index("--saturate")
            args = [*args[:i + 1], "2", *args[i + 2:]]
        if "--seconds" not in args:
            return [*args, "--seconds", "1"]
        i = args.index("--seconds")
        return [*args[:i + 1], "1", *args[i + 2:]]
    return None


@pytest.mark.xdist_group("lab")   # one lab at a time, beside the other lab modules
@pytest.mark.parametrize("command", _root_commands(), ids=str)
def test_printed_root_commands_run(command: Command, live_ok: None, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    args = list(command.args)
    path, _ = _parse(_resolve_files(args, command.base)) if args[0] != "box" else (("box",), {})
    shortened = _root_runnable(path, args, tmp_path)
    if shortened is None:
        # run by tests/test_parity.py and tests/test_conformance.py
        assert path in {("lab", "parity"), ("lab", "conformance")}, f"{command}: not run"
        return
    result = CliRunner().invoke(cli, shortened)
    assert result.exit_code == 0, f"{command}\n{result.output}{result.stderr}"
