"""Reports of a run: `summary.md` and the same tables printed with rich."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table as RichTable

from asymlink.analysis import flow_starts, flow_totals, queue_totals
from asymlink.results import Results


@dataclass(frozen=True)
class TextTable:
    """A small table of already formatted cells, rendered as Markdown or with rich."""

    title: str
    headers: Sequence[str]
    rows: Sequence[Sequence[str]]

    def markdown(self) -> str:
        """A GitHub-flavoured Markdown table (with `title` as a heading of level 2);
        "(none)" when there are no rows."""
        lines = [f"## {self.title}", ""]
        if not self.rows:
            return "\n".join([*lines, "(none)", ""])
        lines.append("| " + " | ".join(self.headers) + " |")
        lines.append("|" + "|".join("---" for _ in self.headers) + "|")
        lines.extend("| " + " | ".join(_md_escape(c) for c in row) + " |" for row in self.rows)
        return "\n".join([*lines, ""])

    def rich(self) -> RichTable:
        """The same table for a rich console; a cell too wide for the terminal folds onto
        the next line instead of being cut."""
        table = RichTable(title=self.title)
        for header in self.headers:
            table.add_column(header, overflow="fold")
        for row in self.rows:
            table.add_row(*row)
        return table


def _md_escape(cell: str) -> str:
    return cell.replace("|", "\\|")


def plural(n: int, word: str, words: str | None = None) -> str:
    """`1 seed`, `2 seeds` (`words` for an irregular plural)."""
    return f"{n} {word if n == 1 else (words or word + 's')}"


def fmt_number(x: float | None, unit: str = "", scale: float = 1.0, digits: int = 3) -> str:
    """`x × scale` with `digits` significant digits and a unit; "n/a" for None or NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x * scale:.{digits}g}{(' ' + unit) if unit else ''}"


def _phases(results: Results) -> list[tuple[float, float, list[str]]]:
    """The run cut where a flow starts or stops: (start, end, active flows) per phase. A
    flow is active from its first sent byte to its last delivered one."""
    f = results.flows
    duration = float(results.meta.get("duration_s", f["t"].max() if len(f) else 0.0))
    starts = flow_starts(f)
    spans = {}
    for flow, rows in f.sort_values("t").groupby("flow", sort=True):
        t = rows["t"].to_numpy(float)
        if str(flow) not in starts:
            continue
        delivered = rows["bytes_delivered"].to_numpy(float)
        last = np.flatnonzero(delivered < delivered[-1])
        start = starts[str(flow)]
        done = float(t[last[-1] + 1]) if len(last) and last[-1] + 1 < len(t) else duration
        # a flow that delivers nothing for a while at the end has finished; a short lull
        # (a starved flow) does not cut the run into phases
        end = done if duration - done > max(1.0, 0.1 * duration) else duration
        spans[str(flow)] = (start, min(end, duration))
    cuts = sorted({0.0, duration, *(x for span in spans.values() for x in span)})
    phases: list[tuple[float, float, list[str]]] = []
    for t0, t1 in zip(cuts, cuts[1:], strict=False):
        active = [n for n, (a, b) in spans.items() if a < t1 and b > t0]
        if t1 - t0 > 1e-9 and active:
            if phases and phases[-1][2] == active:
                phases[-1] = (phases[-1][0], t1, active)
            else:
                phases.append((t0, t1, active))
    return phases


def _delta_at(rows: pd.DataFrame, column: str, t0: float, t1: float) -> float:
    t = rows["t"].to_numpy(float)
    v = rows[column].to_numpy(float)
    a, b = np.interp([t0, t1], t, v, left=0.0)
    return float(b - a)


def headline_table(results: Results) -> TextTable | None:
    """What a user looks at first: the run cut into phases where a flow starts or stops,
    and for each phase every active flow's goodput and smoothed RTT and the delay of the
    queue that delayed packets most (mean time from offer to transmission). For the
    showcase: the download alone, then with the upload, and the uplink's delay. None
    without flow series."""
    f = results.flows
    if f.empty or "bytes_delivered" not in f.columns:
        return None
    phases = _phases(results)
    if len(phases) < 1:
        return None
    q = results.queues
    slow = None
    if not q.empty and "sojourn_ms" in q.columns and q["sojourn_ms"].max() > 0:
        slow = str(q["queue"].iloc[int(q["sojourn_ms"].to_numpy(float).argmax())])
    by_flow = {str(k): v.sort_values("t") for k, v in f.groupby("flow", sort=True)}
    rows = []
    for t0, t1, active in phases:
        parts = []
        for name in active:
            rate = _delta_at(by_flow[name], "bytes_delivered", t0, t1) * 8 / (t1 - t0)
            text = f"{name} {fmt_number(rate, 'Mbit/s', 1e-6)}"
            if "srtt_ms" in f.columns:
                r = by_flow[name]
                srtt = r[(r["t"] > t0) & (r["t"] <= t1)]["srtt_ms"].mean()
                if np.isfinite(srtt):
                    text += f" (RTT {fmt_number(srtt, 'ms')})"
            parts.append(text)
        row = [f"{t0:g}–{t1:g} s", " + ".join(active) + (" alone" if len(active) == 1 else ""),
               "; ".join(parts)]
        if slow is not None:
            qr = q[(q["queue"] == slow) & (q["t"] > t0) & (q["t"] <= t1)]
            sent: np.ndarray = (np.diff(qr["dequeued"].to_numpy(float), prepend=np.nan)[1:]
                                if len(qr) else np.zeros(0))
            s = qr["sojourn_ms"].to_numpy(float)[1:]
            delay = float((s * sent).sum() / sum(sent)) if len(qr) > 1 and sum(sent) > 0 else 0.0
            row.append(fmt_number(delay, "ms"))
        rows.append(row)
    headers = ["time", "flows", "goodput (mean RTT)"]
    if slow is not None:
        headers.append(f"{slow} queue delay")
    return TextTable("Headline", headers, rows)


#: The run summary lists at most this many link directions, the busiest.
BUSIEST_LINKS = 12


def busiest_links(results: Results, n: int = BUSIEST_LINKS) -> TextTable:
    """The `n` link directions of largest mean utilization over the run (all of them when
    there are fewer), busiest first."""
    links = results.links
    rows: list[list[str]] = []
    if not links.empty:
        per = links.groupby("link").agg(mean=("utilization", "mean"), sent=("tx_bytes", "sum"))
        per = per.sort_values("mean", ascending=False, kind="stable")
        rows = [[str(link), fmt_number(100.0 * float(r["mean"]), "%"),
                 fmt_number(float(r["sent"]), "MB", 1e-6)]
                for link, r in per.head(n).iterrows()]
        if len(per) > n:
            rows.append([f"... {len(per) - n} more", "", ""])
    return TextTable("Busiest links", ["link", "mean utilization", "sent"], rows)


def run_tables(results: Results) -> list[TextTable]:
    """The headline (phases), per-flow throughput, per-queue drops and the busiest links."""
    flows = flow_totals(results)
    queues = queue_totals(results)
    headline = headline_table(results)
    return [
        *([headline] if headline is not None else []),
        TextTable(
            "Flows",
            ["flow", "delivered", "mean throughput"],
            [
                [str(flow), fmt_number(delivered, "MB", 1e-6), fmt_number(rate, "Mbit/s", 1e-6)]
                for flow, delivered, rate in zip(
                    flows["flow"],
                    flows["delivered_bytes"].to_numpy(dtype=float),
                    flows["throughput_bps"].to_numpy(dtype=float),
                    strict=True,
                )
            ],
        ),
        TextTable(
            "Queues",
            ["queue", "drops", "filtered"],
            [
                [str(queue), str(drops), str(filtered)]
                for queue, drops, filtered in zip(
                    queues["queue"],
                    queues["drops"].to_numpy(dtype=int),
                    queues["filtered"].to_numpy(dtype=int),
                    strict=True,
                )
            ],
        ),
        busiest_links(results),
    ]


def run_summary_markdown(results: Results) -> str:
    """`summary.md` of a run: run facts, the headline (phases), the per-flow and per-queue
    tables."""
    m = results.meta
    head = [
        f"# {m.get('scenario', 'scenario')}",
        "",
        f"- seed: {m.get('seed')}",
        f"- simulated: {fmt_number(m.get('duration_s', math.nan), 's')}",
        f"- wall clock: {fmt_number(m.get('wall_s', math.nan), 's')}",
        f"- events: {m.get('events')}, packet hops: {m.get('packet_hops')}",
        f"- trace hash: {m.get('trace_hash', 0):016x}",
    ]
    if m.get("threads", 1) > 1:
        head.append(f"- threads: {m['threads']} (a partitioned run; packets handed over late: "
                    f"{m.get('late_handovers', 0)})")
    head.append("")
    return "\n".join([*head, *(t.markdown() for t in run_tables(results))])


def print_run_summary(results: Results, console: Console) -> None:
    """Print the per-flow and per-queue tables ("(none)" for an empty one)."""
    for table in run_tables(results):
        console.print(table.rich() if table.rows else f"{table.title}: (none)")
