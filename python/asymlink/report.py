"""Reports of a run: `summary.md` and the same tables printed with rich."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table as RichTable

from asymlink.analysis import flow_totals, queue_totals
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
        """The same table for a rich console."""
        table = RichTable(title=self.title)
        for header in self.headers:
            table.add_column(header)
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


def run_tables(results: Results) -> list[TextTable]:
    """Per-flow throughput and per-queue drops."""
    flows = flow_totals(results)
    queues = queue_totals(results)
    return [
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
    ]


def run_summary_markdown(results: Results) -> str:
    """`summary.md` of a run: run facts and the per-flow and per-queue tables."""
    m = results.meta
    head = [
        f"# {m.get('scenario', 'scenario')}",
        "",
        f"- seed: {m.get('seed')}",
        f"- simulated: {fmt_number(m.get('duration_s', math.nan), 's')}",
        f"- wall clock: {fmt_number(m.get('wall_s', math.nan), 's')}",
        f"- events: {m.get('events')}, packet hops: {m.get('packet_hops')}",
        f"- trace hash: {m.get('trace_hash', 0):016x}",
        "",
    ]
    return "\n".join([*head, *(t.markdown() for t in run_tables(results))])


def print_run_summary(results: Results, console: Console) -> None:
    """Print the per-flow and per-queue tables ("(none)" for an empty one)."""
    for table in run_tables(results):
        console.print(table.rich() if table.rows else f"{table.title}: (none)")
