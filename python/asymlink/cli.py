"""The `asymlink` command.

User errors (an invalid scenario, a missing file, a bad `--set`) print one line to stderr
and exit with status 2; click's own usage errors exit with 2 as well.
"""

from __future__ import annotations

import json
import sys
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from asymlink import __version__, examples
from asymlink.bench import STANDARD as _BENCH_STANDARD
from asymlink.report import TextTable, fmt_number, plural
from asymlink.scenario import Scenario
from asymlink.validate import ConfigError, ScenarioError

if TYPE_CHECKING:
    from asymlink.repro import Report

USER_ERROR = 2


class UserError(click.ClickException):
    """A mistake in what the user asked for: one line on stderr, exit status 2."""

    exit_code = USER_ERROR


def _os_message(e: OSError) -> str:
    return f"{e.filename}: {e.strerror}" if e.filename else str(e)


class _Cli(click.Group):
    """The command group; turns the library's user-facing errors into `UserError`."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ConfigError as e:
            raise UserError(str(e)) from None
        except OSError as e:
            raise UserError(_os_message(e)) from None


# Width when stdout is not a terminal (a pipe, a file): tables keep their natural width
# instead of rich's 80-column default.
PIPE_WIDTH = 400


def _stdout() -> Console:
    """The console for results: the terminal's width, or `PIPE_WIDTH` when piped."""
    import sys

    return Console(width=None if sys.stdout.isatty() else PIPE_WIDTH)


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="asymlink")
def cli() -> None:
    """Simulate, reproduce and analyse TCP over asymmetric links."""


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="asymlink")


# --- run ---------------------------------------------------------------------------------


def parse_set(assignments: Sequence[str]) -> dict[str, Any]:
    """`KEY=VALUE` pairs; a VALUE that is a TOML value (`3`, `true`, `"x"`, `[1, 2]`) is
    taken as such, anything else (`1Mbit`, `10s`) as a string."""
    overrides: dict[str, Any] = {}
    for item in assignments:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set expects KEY=VALUE (e.g. links.0.rate=1Mbit), got {item!r}")
        try:
            doc = tomllib.loads(f"v = {raw}")
        except tomllib.TOMLDecodeError:
            doc = {}
        overrides[key.strip()] = doc["v"] if list(doc) == ["v"] else raw
    return overrides


def _load(path: Path | None, example: str | None) -> Scenario:
    if path is None and example is None:
        raise UserError("no scenario: give a SCENARIO file or --example NAME "
                        "(`asymlink examples` lists them)")
    if path is not None and example is not None:
        raise UserError("give either a SCENARIO file or --example NAME, not both")
    if example is None:
        assert path is not None
        return Scenario.from_file(path)
    try:
        return examples.load(example)
    except KeyError as e:
        raise UserError(e.args[0]) from None


@cli.command("run")
@click.argument("scenario", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--example", metavar="NAME", help="Run a shipped example (see `asymlink examples`).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Output directory (tables, figures/, summary.md, captures).")
@click.option("--seed", type=click.IntRange(0, 2**64 - 1), help="Override the scenario's seed.")
@click.option("--csv", "as_csv", is_flag=True, help="Write tables as CSV instead of Parquet.")
@click.option("--set", "assignments", multiple=True, metavar="KEY=VALUE",
              help="Override a scenario value, e.g. --set links.0.rate=1Mbit (repeatable).")
@click.option("--interval", default=1.0, type=click.FloatRange(min=0, min_open=True),
              show_default=True, help="Throughput bin width in seconds (figures).")
@click.option("--no-progress", is_flag=True, help="Do not show a progress bar.")
@click.option("--threads", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Divide the nodes between this many threads (a partitioned run: "
                   "deterministic per seed and thread count, its own trace).")
def run_cmd(scenario: Path | None, example: str | None, out_dir: Path, seed: int | None,
            as_csv: bool, assignments: tuple[str, ...], interval: float,
            no_progress: bool, threads: int) -> None:
    """Run SCENARIO (a TOML file) and write its results to --out."""
    from asymlink.plot import standard_figures
    from asymlink.report import print_run_summary, run_summary_markdown
    from asymlink.runner import run

    overrides = parse_set(assignments)
    sc = _load(scenario, example)
    if overrides:
        sc = sc.with_overrides(overrides)
    results = run(sc, seed=seed, out_dir=out_dir, progress=not no_progress, threads=threads)
    (results.to_csv if as_csv else results.to_parquet)(out_dir)
    standard_figures(results, out_dir / "figures", interval)
    (out_dir / "summary.md").write_text(run_summary_markdown(results))
    console = _stdout()
    print_run_summary(results, console)
    console.print(f"results in {out_dir}")


@cli.command("examples")
def examples_cmd() -> None:
    """List the shipped example scenarios with their header (topology drawing, commands)."""
    for i, name in enumerate(examples.names()):
        if i:
            click.echo()
        click.echo(f"{name}  (asymlink run --example {name} --out out/{name})")
        for line in examples.header(name):
            click.echo(f"  {line}".rstrip())


@cli.command("plot")
@click.argument("results_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where to write the PNGs [default: RESULTS_DIR/figures].")
@click.option("--interval", default=1.0, type=click.FloatRange(min=0, min_open=True),
              show_default=True, help="Throughput bin width in seconds.")
def plot_cmd(results_dir: Path, out_dir: Path | None, interval: float) -> None:
    """Draw the standard figures of a results directory."""
    from asymlink.plot import standard_figures
    from asymlink.results import Results

    if not (results_dir / "meta.json").is_file() and results_dir.is_dir():
        raise UserError(_not_a_run_dir(results_dir))
    written = standard_figures(Results.load(results_dir), out_dir or results_dir / "figures",
                               interval)
    for path in written:
        click.echo(path)
    if not written:
        click.echo("no figures: the results have no time series", err=True)


def _not_a_run_dir(d: Path) -> str:
    """Why `d` cannot be plotted, and where the runs' results directories are."""
    runs = sorted(p.parent for p in d.glob("**/meta.json"))
    if not runs:
        return (f"{d}: not a run's results directory (no meta.json); give a directory "
                "written by `asymlink run --out`")
    first = runs[0]
    kind = ("a sweep" if (d / "results.parquet").is_file() or (d / "cache").is_dir()
            else "a reproduction" if (d / "metrics.json").is_file() else "a directory")
    return (f"{d} is {kind} holding {plural(len(runs), 'run')}; each run's results are in "
            f"{first.parent}/<scenario>, e.g. `asymlink plot {first}`")


@cli.command("validate")
@click.argument("scenarios", nargs=-1, required=True,
                type=click.Path(dir_okay=False, path_type=Path))
def validate_cmd(scenarios: tuple[Path, ...]) -> None:
    """Check scenario files with the engine (exit status 2 if any is invalid)."""
    failed = 0
    for path in scenarios:
        try:
            Scenario.from_file(path).validate()
        except ScenarioError as e:
            click.echo(f"Error: {e}", err=True)
            failed += 1
        except OSError as e:
            click.echo(f"Error: {_os_message(e)}", err=True)
            failed += 1
        else:
            click.echo(f"ok: {path}")
    if failed:
        raise click.exceptions.Exit(USER_ERROR)


# --- sweep -------------------------------------------------------------------------------


@cli.command("sweep")
@click.argument("spec_file", metavar="SPEC", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Output directory (results.parquet, aggregate.parquet, figures/, cache/);"
                   " required unless --check.")
@click.option("--scheduler", metavar="ADDRESS",
              help="Run on a Dask cluster (e.g. tcp://10.0.0.5:8786); needs asymlink[cluster].")
@click.option("--workers", type=click.IntRange(min=1),
              help="Local worker processes [default: one per core].")
@click.option("--check", "check_only", is_flag=True,
              help="Check the spec and every point, print the plan, run nothing.")
@click.option("--fresh", is_flag=True, help="Ignore cached points (run everything again).")
@click.option("--keep-runs", is_flag=True, help="Also keep every point's tables in DIR/runs/.")
@click.option("--cache", "cache_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Cache directory, e.g. shared by several sweeps [default: DIR/cache].")
@click.option("--no-progress", is_flag=True, help="Do not show a progress bar.")
def sweep_cmd(spec_file: Path, out_dir: Path | None, scheduler: str | None, workers: int | None,
              check_only: bool, fresh: bool, keep_runs: bool, cache_dir: Path | None,
              no_progress: bool) -> None:
    """Run the grid or random sample of SPEC (a TOML sweep spec) over seeds.

    Finished points are cached: an interrupted sweep continues where it stopped when the
    same command runs again. See docs/sweeps.md."""
    from asymlink.sweep import Cache, SweepError, SweepSpec, SweepSpecError, engine_fingerprint
    from asymlink.sweep.run import CACHE_DIR, RESULTS_FILE

    if scheduler is not None and workers is not None:
        raise UserError("give --workers (local processes) or --scheduler (a Dask cluster), "
                        "not both")
    try:
        spec = SweepSpec.from_file(spec_file)
        plan = spec.plan(engine_fingerprint())
    except SweepSpecError as e:
        raise UserError(str(e)) from None
    configs = len(spec.configurations)
    head = (f"{plural(len(plan), 'point')} ({plural(configs, 'configuration')} × "
            f"{plural(len(spec.seeds), 'seed')})")
    if check_only:
        click.echo(f"ok: {spec_file}: {head}, {plural(len(spec.metrics), 'metric')}, "
                   f"{plural(len(spec.plots), 'plot')}")
        for p in plan[: len(spec.seeds) * 3 : len(spec.seeds)]:
            click.echo(f"  configuration {p.config}: {p.describe().rsplit(', seed=', 1)[0]}")
        if configs > 3:
            click.echo(f"  ... ({configs - 3} more)")
        return
    if out_dir is None:
        raise UserError("give --out DIR (or --check to run nothing)")
    from asymlink.sweep import run_sweep

    try:
        result = run_sweep(spec, out_dir, scheduler=scheduler, workers=workers, fresh=fresh,
                           keep_runs=keep_runs, cache_dir=cache_dir, progress=not no_progress,
                           plan=plan)
    except SweepError as e:
        raise UserError(str(e)) from None
    except KeyboardInterrupt:
        cache = Cache(cache_dir or out_dir / CACHE_DIR)
        done = sum(cache.path(p.key).is_file() for p in plan)
        click.echo(f"interrupted: {done} of {len(plan)} points are cached; run the same "
                   "command again to continue", err=True)
        raise click.exceptions.Exit(130) from None
    click.echo(f"{head}: {result.cached} cached, {result.ran} run, {result.failed} failed "
               f"in {result.wall_s:.1f} s ({result.executor})")
    click.echo(f"results: {out_dir / RESULTS_FILE}")
    for f in result.figures:
        click.echo(f"figure: {f}")
    for w in result.warnings:
        click.echo(f"warning: {w}", err=True)
    if result.failed:
        click.echo(f"Error: {plural(result.failed, 'point')} failed "
                   f"(see {out_dir / 'summary.md'})",
                   err=True)
        raise click.exceptions.Exit(1)


# --- bench -------------------------------------------------------------------------------


@cli.group("bench")
def bench_group() -> None:
    """Benchmarks."""


@bench_group.command("sim")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--flows", type=click.IntRange(min=1), default=None,
              help=f"Number of flows (default: {_BENCH_STANDARD['flows']:g}).")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), default=None,
              help=f"Simulated seconds (default: {_BENCH_STANDARD['duration_s']:g}).")
@click.option("--bottleneck", "bottleneck_bps", type=click.IntRange(min=1), default=None,
              help=f"Bottleneck rate in bit/s (default: {_BENCH_STANDARD['bottleneck_bps']:g}).")
@click.option("--scaling", is_flag=True,
              help="Run the scaling series N = 10, 100, 1000, 10000 (N x 10 Mbit/s).")
@click.option("--cc", type=click.Choice(["new_reno", "cubic", "bbr"]), default=None,
              help="Congestion control of the flows (default: new_reno; bbr paces).")
def bench_sim_cmd(as_json: bool, flows: int | None, duration: float | None,
                  bottleneck_bps: int | None, scaling: bool, cc: str | None) -> None:
    """Time the simulator on the fixed dumbbell: packet-hops and events per wall second."""
    from asymlink import bench

    if scaling:
        rows = bench.run_scaling()
        if as_json:
            click.echo(json.dumps(rows))
            return
        keys = ["flows", "sim_s", "packet_hops", "wall_s", "packet_hops_per_sec",
                "ns_per_hop", "cost_ratio_vs_first", "peak_rss_mb", "trace_hash"]
        table = [[r[k] if isinstance(r[k], str) else fmt_number(r[k], digits=4) for k in keys]
                 for r in rows]
        _stdout().print(TextTable("Simulator scaling", keys, table).rich())
        return
    spec = dict(bench.STANDARD)
    if flows is not None:
        spec["flows"] = flows
    if duration is not None:
        spec["duration_s"] = duration
    if bottleneck_bps is not None:
        spec["bottleneck_bps"] = bottleneck_bps
    result = bench.run_sim(**spec, cc=cc or "")  # type: ignore[arg-type]
    if as_json:
        click.echo(json.dumps(result))
        return
    lines = [[key, v if isinstance(v, str) else fmt_number(v, digits=6)] for key, v in
             result.items()]
    _stdout().print(TextTable("Simulator benchmark", ["metric", "value"], lines).rich())


def _rate_option(name: str, value: str) -> float:
    """A rate option (`1Mbit`, `512kbit`) in bit/s; a `UserError` naming the option."""
    from asymlink import validate

    try:
        return float(validate.rate(value, name))
    except ConfigError as e:
        raise UserError(f"{name}: {e.msg}") from None


@bench_group.command("live")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--seconds", type=click.FloatRange(min=1, max=60), default=5.0, show_default=True,
              help="Length of each measured transfer.")
@click.option("--out", "out_file", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the JSON result to this file.")
@click.option("--io", "io_modes", default="socket", show_default=True,
              metavar="MODE[,MODE...]",
              help="The box's [process] io modes, each measured against the same kernel "
                   "run: socket, mmap, xdp (experimental; not measured, with the reason, "
                   "where AF_XDP is unavailable), a mode with '+tx' (socket+tx, mmap+tx: "
                   "[process] tx_thread = true) and/or '+poll' (busy_poll = 50us), a list "
                   "(socket,xdp), 'both' (socket,mmap) or 'all'.")
@click.option("--latency-rate", "latency_rate", default=None, metavar="RATE",
              help="Pace the latency transfer at this rate (e.g. 1Gbit) for every mode, "
                   "instead of half of each mode's own unshaped goodput.")
@click.option("--workers", "workers_list", default="", metavar="N[,N...]",
              help="Also measure several clients at once through the box with each of these "
                   "[process] workers counts (e.g. 1,2), one client per worker. With "
                   "--subscribers: the box's one workers count (default 2).")
@click.option("--subscribers", "subscribers", type=click.IntRange(min=1, max=16000),
              default=None, metavar="N",
              help="Measure N subscriber lines instead: N addresses on the client side, a "
                   "[[subscribers]] line each, every line saturated by one bulk TCP transfer "
                   "at once; aggregate and per-subscriber rates, an idle subscriber's ping, "
                   "the box's memory.")
@click.option("--saturate", "saturate", type=click.IntRange(min=1), default=None, metavar="M",
              help="With --subscribers: only the first M subscribers download (the others "
                   "stay configured and idle); default all N.")
@click.option("--subscriber-rate", "subscriber_rate", default="1Mbit", show_default=True,
              help="With --subscribers: each subscriber's line rate, both ways.")
@click.option("--direction", type=click.Choice(["down", "up"]), default="down",
              show_default=True,
              help="With --subscribers: downloads (server to subscriber) or uploads.")
def bench_live_cmd(as_json: bool, seconds: float, out_file: Path | None, io_modes: str,
                   latency_rate: str | None, workers_list: str, subscribers: int | None,
                   saturate: int | None, subscriber_rate: str, direction: str) -> None:
    """Forwarding speed of the live box in a namespace lab (needs root): box_gbps,
    kernel_gbps, box_shaped_gbps, added latency at half load; or, with --subscribers N,
    N shaped subscriber lines at once."""
    from asymlink.lab import LabError
    from asymlink.lab.bench import parse_io_modes, run_bench, run_lines_bench

    try:
        io = parse_io_modes(io_modes)
    except LabError as e:
        raise UserError(f"--io: {e}") from None
    try:
        workers = tuple(int(w) for w in workers_list.split(",") if w.strip())
    except ValueError:
        raise UserError(f"--workers: '{workers_list}' is not a list of numbers") from None
    if any(not 1 <= w <= 8 for w in workers):
        raise UserError("--workers: each count must be 1..8 (one client host per worker)")
    if subscribers is not None:
        if len(workers) > 1:
            raise UserError("--workers: one count with --subscribers (the box's workers)")
        if len(io) > 1:
            raise UserError("--io: one mode with --subscribers (socket, mmap or xdp)")
        if io == ("xdp",) and (workers[0] if workers else 2) != 1:
            raise UserError('--io: xdp runs one worker; add --workers 1')
        rate = _rate_option("--subscriber-rate", subscriber_rate)
        if saturate is not None and saturate > subscribers:
            raise UserError(f"--saturate: at most the {subscribers} subscribers")
    elif saturate is not None:
        raise UserError("--saturate: only with --subscribers")
    lat_rate = None if latency_rate is None else _rate_option("--latency-rate", latency_rate)
    if lat_rate is not None and subscribers is not None:
        raise UserError("--latency-rate: not with --subscribers")
    try:
        if subscribers is not None:
            result = run_lines_bench(subscribers, rate, seconds, workers[0] if workers else 2,
                                     direction, io[0], saturate)
        else:
            result = run_bench(seconds=seconds, io=io, workers=workers,
                               latency_rate_bps=lat_rate)
    except LabError as e:
        raise UserError(str(e)) from None
    if out_file is not None:
        out_file.write_text(json.dumps(result, indent=2) + "\n")
    if as_json:
        click.echo(json.dumps(result))
        return
    lines = result.get("subscriber_lines")
    shown = lines if lines is not None else result
    digits = 4 if lines is None else 6   # memory in kB
    rows = [[k, v if isinstance(v, str) else fmt_number(v, digits=digits)]
            for k, v in shown.items() if not isinstance(v, dict | list)]
    if lines is not None:
        # The summaries one level down (per-subscriber quantiles, pings, CPU by kind); not
        # every subscriber's rate, nor the box's whole counters.
        rows += [[f"{k}.{q}", fmt_number(x, digits=digits)] for k, v in lines.items()
                 if isinstance(v, dict) and k not in ("per_subscriber_ip_mbps_all",
                                                      "box_directions")
                 for q, x in v.items() if isinstance(x, int | float)]
    _stdout().print(TextTable("Live box benchmark", ["metric", "value"], rows).rich())
    for key, reason in result["not_measured"].items():
        click.echo(f"not measured: {key}: {reason}", err=True)


# --- live box and lab --------------------------------------------------------------------


@cli.command("box", context_settings={"ignore_unknown_options": True})
@click.option("--config", "config", required=True,
              type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="The box configuration (TOML, see docs/live.md).")
@click.option("--check", is_flag=True, help="Validate the configuration and exit.")
@click.option("--print-effective", is_flag=True,
              help="Print the configuration as the box runs it (a `line` expanded, every "
                   "subscriber listed) and exit.")
@click.option("--seed", type=click.IntRange(0, 2**64 - 1), help="Master seed.")
def box_cmd(config: Path, check: bool, print_effective: bool, seed: int | None) -> None:
    """Run the live middlebox in the foreground (in this process).

    SIGHUP reloads the configuration keeping queued packets; SIGINT/SIGTERM flush the
    captures and stats and exit. Needs CAP_NET_RAW + CAP_NET_ADMIN (or root); privileges
    are dropped once the devices are open."""
    from asymlink.live import check_config, run_box

    if check:
        err = check_config(config)
        if err:
            raise UserError(err)
        click.echo(f"ok: {config}")
        return
    extra = ["--seed", str(seed)] if seed is not None else []
    if print_effective:
        extra.append("--print-effective")
    sys.exit(run_box(["--config", str(config), *extra]))


@cli.group("lab")
def lab_group() -> None:
    """Client/router/server network namespaces with the live box in the router."""


def _lab_errors() -> Any:
    from asymlink.lab import LabError
    from asymlink.live import BoxNotFound

    return (LabError, BoxNotFound)


@lab_group.command("up")
@click.option("--name", help="Lab name (al-XXXX; default: a random one).")
def lab_up_cmd(name: str | None) -> None:
    """Create a lab; prints its name."""
    from asymlink.lab import Lab

    try:
        lab = Lab.up(name)
    except _lab_errors() as e:
        raise UserError(str(e)) from None
    click.echo(lab.name)
    click.echo(f"  client {lab.client} ({lab.addr('client')}), router {lab.router}, "
               f"server {lab.server} ({lab.addr('server')})", err=True)


@lab_group.command("run")
@click.argument("scenario")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Output directory (tables, metrics.json, box stats, pcaps).")
@click.option("--lab", "lab_name", help="Use this lab (default: a fresh one, removed after).")
@click.option("--capture/--no-capture", default=None, help="Write one pcap per direction.")
def lab_run_cmd(scenario: str, out_dir: Path, lab_name: str | None,
                capture: bool | None) -> None:
    """Run SCENARIO (a lab scenario file or a shipped name, see `lab list`) through the box."""
    from asymlink.lab import Lab, LabScenario, run_scenario
    from asymlink.lab.bench import scenario_path

    try:
        sc = LabScenario.from_file(scenario_path(scenario))
        if capture is not None:
            sc.capture = capture
        lab = Lab.load(lab_name) if lab_name else None
        metrics = run_scenario(sc, out_dir, lab)
    except _lab_errors() as e:
        raise UserError(str(e)) from None
    rows = [[f, fmt_number(v, digits=4)] for f, v in metrics["throughput_mbps"].items()]
    _stdout().print(TextTable(f"{sc.name}: throughput (Mbit/s)", ["flow", "Mbit/s"], rows).rich())
    for key in ("echo_latency_ms", "ping_rtt_ms"):
        for probe, st in metrics.get(key, {}).items():
            click.echo(f"{probe}: {key} p50 {fmt_number(st['p50'])} p90 {fmt_number(st['p90'])} "
                       f"({st['count']} samples)")
    click.echo(f"results in {out_dir}")


@lab_group.command("down")
@click.argument("names", nargs=-1)
@click.option("--all", "all_labs", is_flag=True, help="Remove every lab on this machine.")
def lab_down_cmd(names: tuple[str, ...], all_labs: bool) -> None:
    """Remove labs (namespaces, interfaces, processes)."""
    from asymlink.lab import Lab

    targets = Lab.names() if all_labs else list(names)
    if not targets:
        raise UserError("give a lab NAME (see `asymlink lab list`) or --all")
    for n in targets:
        try:
            Lab.load(n).down()
        except _lab_errors() as e:
            raise UserError(str(e)) from None
        click.echo(f"removed {n}")


@lab_group.command("parity")
@click.argument("pairs", nargs=-1)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              required=True, help="Output directory (each arm's lab results, parity.json, "
                                  "parity.md).")
@click.option("--lab", "lab_name", help="Use this lab (default: a fresh one, removed after).")
@click.option("--tolerance", type=float, default=None,
              help="Relative tolerance per metric (default 0.15).")
def lab_parity_cmd(pairs: tuple[str, ...], out_dir: Path, lab_name: str | None,
                   tolerance: float | None) -> None:
    """Run parity experiments (default: all of them) in the simulator and in the lab and
    compare them metric by metric; exit 1 if a metric or an ordering of arms disagrees."""
    import json as _json

    from asymlink.lab import Lab
    from asymlink.lab.parity import PAIRS, TOLERANCE, run_pair

    names = list(pairs) or list(PAIRS)
    unknown = [n for n in names if n not in PAIRS]
    if unknown:
        raise UserError(f"unknown parity experiment {', '.join(unknown)} "
                        f"(known: {', '.join(PAIRS)})")
    tol = TOLERANCE if tolerance is None else tolerance
    if not 0 < tol < 10:
        raise UserError("--tolerance: a relative tolerance, e.g. 0.15")
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        lab = Lab.load(lab_name) if lab_name else Lab.up()
    except _lab_errors() as e:
        raise UserError(str(e)) from None
    outcomes = []
    try:
        for n in names:
            outcomes.append(run_pair(PAIRS[n], out_dir / n, lab, tol))
    except _lab_errors() as e:
        raise UserError(str(e)) from None
    finally:
        if not lab_name:
            lab.down()
    md = "".join(o.markdown() + "\n" for o in outcomes)
    (out_dir / "parity.md").write_text(md)
    (out_dir / "parity.json").write_text(
        _json.dumps([o.to_dict() for o in outcomes], indent=2) + "\n")
    click.echo(md, nl=False)
    bad = [o.pair.name for o in outcomes if not o.ok]
    click.echo(f"results in {out_dir}")
    if bad:
        click.echo(f"parity NOT met: {', '.join(bad)}", err=True)
        raise SystemExit(1)


@lab_group.command("conformance")
@click.argument("cases", nargs=-1)
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("out/conformance"), show_default=True,
              help="Output directory (conformance.md, conformance.json, each run's files).")
@click.option("--lab", "lab_name", help="Use this lab (default: a fresh one, removed after).")
@click.option("--sim-only", is_flag=True,
              help="Run only the simulator half (no root needed).")
def lab_conformance_cmd(cases: tuple[str, ...], out_dir: Path, lab_name: str | None,
                        sim_only: bool) -> None:
    """Run the scripted-loss conformance catalog (default: every case) through the
    simulator's `linux` profile and through real Linux in the lab, SACK and timestamps on
    then off, and compare the senders' retransmissions, recoveries, timeouts, probes and
    ssthresh case by case."""
    from asymlink.lab import Lab
    from asymlink.lab.conformance import load_catalog, run_conformance

    known = {c.name for c in load_catalog()}
    unknown = [c for c in cases if c not in known]
    if unknown:
        raise UserError(f"unknown conformance case {', '.join(unknown)} "
                        f"(known: {', '.join(sorted(known))})")
    lab = None
    if not sim_only:
        try:
            lab = Lab.load(lab_name) if lab_name else Lab.up()
        except _lab_errors() as e:
            raise UserError(str(e)) from None
    try:
        verdicts = run_conformance(out_dir, lab, list(cases) or None)
    except _lab_errors() as e:
        raise UserError(str(e)) from None
    finally:
        if lab is not None and not lab_name:
            lab.down()
    click.echo((out_dir / "conformance.md").read_text(), nl=False)
    if not sim_only:
        agree = sum(v.agree for v in verdicts)
        click.echo(f"{agree} of {len(verdicts)} runs agree; results in {out_dir}")


@lab_group.command("list")
def lab_list_cmd() -> None:
    """List the labs on this machine and the shipped lab scenarios."""
    from asymlink.lab import Lab
    from asymlink.lab.bench import shipped_scenarios

    for n in Lab.names():
        click.echo(f"lab {n}")
    for name, desc in shipped_scenarios():
        click.echo(f"scenario {name}: {desc}")


# --- reproduce ---------------------------------------------------------------------------


@cli.command("reproduce")
@click.argument("entry_ids", metavar="ID...|all", nargs=-1)
@click.option("--list", "list_only", is_flag=True, help="List the catalog.")
@click.option("--quick", is_flag=True, help="Shorter runs, same qualitative outcome.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Output directory (with `all` or several IDs: one subdirectory per entry "
                   "and the HTML report, index.html).")
@click.option("--no-report", is_flag=True,
              help="With `all` or several IDs: do not write the HTML report.")
def reproduce_cmd(entry_ids: tuple[str, ...], list_only: bool, quick: bool,
                  out_dir: Path | None, no_report: bool) -> None:
    """Reproduce a paper's result (ID), several (ID ID ...), or the whole catalog (all).

    With `all` or several IDs each entry goes to DIR/ID and DIR/index.html is a static
    HTML report of them all (paper vs measured, match or mismatch, notes, figures,
    runtimes). An entry that fails is reported and the others still run; the exit status
    is then 1. A mismatch is a result, not an error."""
    from asymlink import repro

    if list_only:
        if entry_ids:
            raise UserError(f"--list takes no ID (got {' '.join(entry_ids)}); "
                            "run `asymlink reproduce --list` alone")
        rows = [[e.id, e.paper, e.title] for e in repro.entries()]
        if rows:
            _stdout().print(TextTable("Reproductions", ["id", "paper", "title"], rows).rich())
        else:
            click.echo("no reproductions registered yet")
        return
    if not entry_ids or out_dir is None:
        raise UserError("give an ID (several, or `all`) and --out DIR, or use --list")
    if "all" in entry_ids:
        if len(entry_ids) > 1:
            raise UserError("give `all` alone, or a list of IDs")
        entries = repro.entries()
        if not entries:
            click.echo("no reproductions registered yet")
            return
    else:
        try:
            entries = [repro.get(i) for i in dict.fromkeys(entry_ids)]
        except KeyError as e:
            raise UserError(e.args[0]) from None
    if len(entries) == 1 and entry_ids != ("all",):
        _print_report(repro.reproduce(entries[0], out_dir, quick=quick))
        return
    import time

    from asymlink.report_html import outcome_of, write_report

    start = time.perf_counter()
    outcomes = []
    for entry in entries:
        outcome = outcome_of(entry, out_dir / entry.id, quick)
        outcomes.append(outcome)
        if outcome.report is not None:
            _print_report(outcome.report)
        else:
            last = outcome.error.strip().splitlines()[-1]
            click.echo(f"Error: {entry.id} failed after {outcome.wall_s:.1f} s: {last}", err=True)
    failed = [o.entry.id for o in outcomes if o.report is None]
    total = time.perf_counter() - start
    if not no_report:
        index = write_report(outcomes, out_dir, quick, total)
        click.echo(f"report: {index}")
    click.echo(f"{len(outcomes)} entries in {total:.1f} s"
               + (f"; failed: {', '.join(failed)}" if failed else ""))
    if failed:
        raise click.exceptions.Exit(1)


def _print_report(report: Report) -> None:
    console = _stdout()
    rows = [[c.metric, c.paper, c.measured, c.status] for c in report.checks]
    console.print(TextTable(f"{report.entry.id}: {report.entry.title}",
                            ["metric", "paper", "measured", "match?"], rows).rich())
    matched = sum(c.ok for c in report.checks)
    console.print(f"{matched} of {len(report.checks)} checks match; "
                  f"{report.wall_s:.1f} s; see {report.out_dir / 'summary.md'}")
