"""The static HTML report of the reproduction catalog (`asymlink reproduce all`).

`write_report(outcomes, out_dir)` writes `out_dir/index.html` (every entry: its paper,
how many checks match, its runtime, a thumbnail) and `out_dir/<id>/index.html` per entry
(the paper's numbers beside the measured ones with match or mismatch, the expected
orderings, the parameters fixed before the runs with their reasons, the notes, the
figures, the runtime, links to `metrics.json`, `summary.md` and the scenario files, copied
in beside the page). Links are relative and nothing is loaded from elsewhere, so the
directory can be moved, archived or opened from disk.

`browser_check(out_dir)` loads every page in headless Chromium and returns the problems:
images that did not load (naturalWidth 0), links that do not resolve (including
`#fragments`), external references, pages that did not render.
"""

from __future__ import annotations

import html
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from asymlink.repro.base import Check, Entry, Report

INDEX = "index.html"
REPORT_JSON = "report.json"


@dataclass(frozen=True)
class Outcome:
    """One entry's part of the report: its `Report`, or the error that stopped it."""

    entry: Entry
    out_dir: Path
    report: Report | None
    error: str = ""
    wall_s: float = 0.0

    @property
    def status(self) -> str:
        """`match` (every check), `mismatch` (some do not), `error` (did not finish)."""
        if self.report is None:
            return "error"
        return "match" if self.report.ok else "mismatch"


def outcome_of(entry: Entry, out_dir: Path, quick: bool) -> Outcome:
    """Run `entry` with `reproduce`, catching any error into the outcome."""
    import traceback

    from asymlink.repro import reproduce

    start = time.perf_counter()
    try:
        report = reproduce(entry, out_dir, quick=quick)
    except Exception:  # noqa: BLE001 - one broken entry must not hide the others
        return Outcome(entry, out_dir, None, traceback.format_exc(),
                       time.perf_counter() - start)
    return Outcome(entry, out_dir, report, "", report.wall_s)


# --- writing --------------------------------------------------------------------------------

CSS = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px;
       padding: 0 1em; color: #1d1d1f; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { margin-top: 1.6em; font-size: 1.25em; }
table { border-collapse: collapse; margin: .6em 0; width: 100%; }
th, td { border: 1px solid #d0d0d5; padding: .3em .5em; text-align: left; vertical-align: top; }
th { background: #f2f2f5; } td.num { text-align: right; white-space: nowrap; }
.yes { background: #e3f5e1; } .NO { background: #fde2e1; } .missing { background: #fff3cd; }
.match { color: #146c2e; font-weight: 600; } .mismatch { color: #9a6700; font-weight: 600; }
.error { color: #b3261e; font-weight: 600; }
.facts { color: #555; } .facts li { margin: .1em 0; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { color: #555; font-size: .9em; }
img.thumb { width: 160px; border: 1px solid #ddd; }
pre { background: #f6f6f8; padding: .8em; overflow-x: auto; font-size: .85em; }
code { background: #f2f2f5; padding: 0 .2em; }
nav { margin-bottom: 1em; }
"""


def _page(title: str, body: list[str]) -> str:
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title>",
        f"<style>{CSS}</style>",
        "</head>",
        "<body>",
        *body,
        "</body>",
        "</html>",
        "",
    ])


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _href(path: str) -> str:
    """A relative URL for a relative file path (each segment percent-encoded)."""
    from urllib.parse import quote

    return "/".join(quote(part) for part in Path(path).parts)


def _inline(text: str) -> str:
    """Escaped text with `code` and **bold** spans."""
    out = _e(text)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)


def notes_html(notes: str) -> str:
    """The notes of `paper.toml` (a little Markdown: paragraphs, `- ` lists, `code`,
    **bold**) as HTML."""
    parts = []
    for block in re.split(r"\n\s*\n", notes.strip()):
        lines = block.splitlines()
        if lines and all(re.match(r"\s*[-*] ", ln) or ln.startswith("  ") for ln in lines):
            items: list[str] = []
            for ln in lines:
                if re.match(r"\s*[-*] ", ln):
                    items.append(re.sub(r"^\s*[-*] ", "", ln))
                else:
                    items[-1] += " " + ln.strip()
            parts.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + "</ul>")
        elif block.strip():
            parts.append(f"<p>{_inline(' '.join(ln.strip() for ln in lines))}</p>")
    return "\n".join(parts)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]],
           classes: Sequence[str] | None = None) -> str:
    head = "<tr>" + "".join(f"<th>{_e(h)}</th>" for h in headers) + "</tr>"
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{classes[i]}"' if classes and classes[i] else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>")
    return "<table>\n" + head + "\n" + "\n".join(body) + "\n</table>"


def _checks_table(checks: Sequence[Check], paper_header: str) -> str:
    rows = [[_e(c.metric), _e(c.paper), _e(c.measured),
             f'<span class="{_e(c.status)}">{_e(c.status)}</span>'] for c in checks]
    return _table(["metric", paper_header, "measured", "match?"], rows,
                  [c.status for c in checks])


def _matched(checks: Sequence[Check]) -> str:
    return f"{sum(c.ok for c in checks)} of {len(checks)}"


def _collect_figures(outcome: Outcome, entry_dir: Path) -> list[str]:
    """The entry's figures as paths relative to its page, copying in any that lie
    outside its directory."""
    if outcome.report is None:
        return []
    rel = []
    for fig in outcome.report.figures:
        src = Path(fig)
        try:
            rel.append(str(src.resolve().relative_to(entry_dir.resolve())))
        except ValueError:
            dest = entry_dir / "figures" / src.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
            rel.append(str(dest.relative_to(entry_dir)))
    return rel


def _copy_scenarios(entry: Entry, entry_dir: Path) -> list[str]:
    """Copy the entry's checked-in scenario files and paper.toml beside its page."""
    target = entry_dir / "scenarios"
    target.mkdir(parents=True, exist_ok=True)
    names = []
    for f in sorted(entry.scenario_dir.iterdir(), key=lambda f: f.name):
        if f.name.endswith(".toml"):
            (target / f.name).write_text(f.read_text(encoding="utf-8"), encoding="utf-8")
            names.append(f"scenarios/{f.name}")
    return names


def entry_page(outcome: Outcome, quick: bool) -> str:
    """The HTML page of one entry (written to its directory as index.html)."""
    from asymlink.repro.base import fixed_parameters_table

    entry, report = outcome.entry, outcome.report
    entry_dir = outcome.out_dir
    try:
        scenarios = _copy_scenarios(entry, entry_dir)
    except OSError:      # a broken entry still gets its page
        scenarios = []
    figures = _collect_figures(outcome, entry_dir)
    body = [
        f'<nav><a href="../{INDEX}">&larr; all reproductions</a></nav>',
        f'<h1 id="top">{_e(entry.id)}: {_e(entry.title)}</h1>',
        '<ul class="facts">',
        f"<li>paper: {_e(entry.paper)}</li>",
        f"<li>mode: {'quick' if quick else 'full'}</li>",
        f"<li>runtime: {outcome.wall_s:.1f} s</li>",
        f'<li>status: <span class="{outcome.status}">{outcome.status}</span>'
        + (f" ({_matched(report.checks)} checks match)" if report else "") + "</li>",
    ]
    files = [f'<a href="{_href(f)}">{_e(f)}</a>' for f in ("metrics.json", "summary.md")
             if (entry_dir / f).is_file()]
    if files:
        body.append(f"<li>results: {', '.join(files)}</li>")
    if scenarios:
        body.append("<li>scenario files: " + ", ".join(
            f'<a href="{_href(s)}">{_e(Path(s).name)}</a>' for s in scenarios) + "</li>")
    body.append("</ul>")
    sections = []
    if report is None:
        sections.append(("error", "Error"))
        body += ['<h2 id="error">Error</h2>',
                 "<p>The entry did not finish; its checks could not be evaluated.</p>",
                 f"<pre>{_e(outcome.error)}</pre>"]
    else:
        values = [c for c in report.checks if c.kind == "paper"]
        orderings = [c for c in report.checks if c.kind == "expect"]
        body.append('<h2 id="paper-values">The paper\'s numbers and ours</h2>')
        body.append(_checks_table(values, "paper (± tolerance)") if values
                    else "<p>The paper reports no numbers to match for this entry.</p>")
        body.append('<h2 id="orderings">Expected orderings</h2>')
        body.append(_checks_table(orderings, "expected") if orderings
                    else "<p>No orderings are stated for this entry.</p>")
    try:
        paper = entry.paper_data
        fixed = fixed_parameters_table(entry, paper, quick)
        rows = [[_e(c) for c in row] for row in fixed.rows]
        notes = paper.notes
    except Exception:  # noqa: BLE001 - a broken entry still gets its page
        rows, notes = [], ""
    if rows:
        body += ['<h2 id="fixed">Parameters fixed before the runs</h2>',
                 _table(["parameter", "value", "scenarios", "reason"], rows)]
    if notes:
        body += ['<h2 id="notes">Notes</h2>', notes_html(notes)]
    if figures:
        body.append('<h2 id="figures">Figures</h2>')
        for f in figures:
            body.append(f'<figure><a href="{_href(f)}"><img src="{_href(f)}" '
                        f'alt="{_e(Path(f).stem)}" loading="eager"></a>'
                        f"<figcaption>{_e(Path(f).name)}</figcaption></figure>")
    body.append('<p><a href="#top">back to top</a></p>')
    return _page(f"{entry.id}: {entry.title}", body)


def index_page(outcomes: Sequence[Outcome], quick: bool, total_s: float,
               thumbs: dict[str, str]) -> str:
    """The index: every entry with its status, checks, runtime and a thumbnail."""
    from asymlink import __version__

    counts = {s: sum(o.status == s for o in outcomes) for s in ("match", "mismatch", "error")}
    rows = []
    for o in outcomes:
        link = f'<a href="{_href(o.entry.id)}/{INDEX}">{_e(o.entry.id)}</a>'
        if o.report is not None:
            values = [c for c in o.report.checks if c.kind == "paper"]
            orderings = [c for c in o.report.checks if c.kind == "expect"]
            checks = [_matched(values) if values else "-",
                      _matched(orderings) if orderings else "-"]
        else:
            checks = ["-", "-"]
        thumb = thumbs.get(o.entry.id)
        img = (f'<a href="{_href(o.entry.id)}/{INDEX}#figures"><img class="thumb" '
               f'src="{_href(o.entry.id + "/" + thumb)}" alt="{_e(o.entry.id)} figure"></a>'
               if thumb else "")
        rows.append([link, _e(o.entry.paper), _e(o.entry.title),
                     f'<span class="{o.status}">{o.status}</span>', *checks,
                     f"{o.wall_s:.1f} s", img])
    body = [
        '<h1 id="top">asymlink: reproductions of the papers\' results</h1>',
        '<ul class="facts">',
        f"<li>mode: {'quick (shorter runs, same qualitative outcome)' if quick else 'full'}</li>",
        f"<li>entries: {len(outcomes)} &mdash; every check matching: {counts['match']}, "
        f"with mismatches: {counts['mismatch']}, errors: {counts['error']}</li>",
        f"<li>total runtime: {total_s:.1f} s</li>",
        f"<li>asymlink {_e(__version__)}, Python {_e(platform.python_version())}, "
        f"{_e(platform.machine())}, {time.strftime('%Y-%m-%d %H:%M')}</li>",
        f'<li>machine-readable: <a href="{REPORT_JSON}">{REPORT_JSON}</a></li>',
        "</ul>",
        "<p>Each entry runs checked-in scenario files and compares what the simulation "
        "measured with the paper's reported values (within a stated tolerance) and the "
        "orderings the paper shows. A mismatch is a result, explained in the entry's "
        "notes; it is not an error.</p>",
        _table(["entry", "paper", "title", "status", "paper's numbers matching",
                "orderings holding", "runtime", "figure"], rows),
    ]
    return _page("asymlink reproductions", body)


def write_report(outcomes: Sequence[Outcome], out_dir: Path, quick: bool,
                 total_s: float | None = None) -> Path:
    """Write the index, one page per entry and `report.json`; returns the index path.
    Each outcome's `out_dir` must be a directory directly under `out_dir` named after
    its entry (as `asymlink reproduce all` lays it out)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    thumbs: dict[str, str] = {}
    summary = []
    for o in outcomes:
        if o.out_dir.resolve() != (out_dir / o.entry.id).resolve():
            raise ValueError(f"{o.entry.id}: results in {o.out_dir}, expected "
                             f"{out_dir / o.entry.id}")
        o.out_dir.mkdir(parents=True, exist_ok=True)
        (o.out_dir / INDEX).write_text(entry_page(o, quick), encoding="utf-8")
        figures = _collect_figures(o, o.out_dir)
        if figures:
            thumbs[o.entry.id] = figures[0]
        summary.append({
            "id": o.entry.id, "paper": o.entry.paper, "title": o.entry.title,
            "status": o.status, "wall_s": round(o.wall_s, 3), "error": o.error,
            "page": f"{o.entry.id}/{INDEX}",
            "figures": [f"{o.entry.id}/{f}" for f in figures],
            "checks": [] if o.report is None else [
                {"kind": c.kind, "metric": c.metric, "paper": c.paper,
                 "measured": c.measured, "status": c.status} for c in o.report.checks],
        })
    total = total_s if total_s is not None else sum(o.wall_s for o in outcomes)
    index = out_dir / INDEX
    index.write_text(index_page(outcomes, quick, total, thumbs), encoding="utf-8")
    (out_dir / REPORT_JSON).write_text(json.dumps(
        {"quick": quick, "total_s": round(total, 3), "entries": summary}, indent=2) + "\n")
    return index


# --- checking in a browser ------------------------------------------------------------------

HARNESS = "/__asymlink_check__.html"

_HARNESS_HTML = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>report check</title></head>
<body><pre id="result">running</pre>
<script>
const problems = [], pages = [];
const queue = ["/index.html"], seen = new Set(queue);
const external = (v) => /^[a-z][a-z0-9+.-]*:/i.test(v) || v.startsWith("//");
const cache = new Map();
async function fetchText(url) {
  if (!cache.has(url)) {
    cache.set(url, fetch(url).then(async r => ({ok: r.ok, status: r.status,
      text: r.ok && url.endsWith(".html") ? await r.text() : ""})));
  }
  return cache.get(url);
}
async function load(url) {
  const frame = document.createElement("iframe");
  frame.style.width = "1200px"; frame.style.height = "900px";
  const loaded = new Promise(resolve => frame.onload = resolve);
  frame.src = url;
  document.body.appendChild(frame);
  await loaded;
  return frame;
}
async function checkPage(path) {
  const frame = await load(path);
  const doc = frame.contentDocument;
  const base = frame.contentWindow.location.href;
  if (!doc || !doc.querySelector("h1")) { problems.push(path + ": did not render (no h1)"); }
  for (const img of Array.from(doc.images)) {
    if (!img.complete) await new Promise(r => { img.onload = r; img.onerror = r; });
    if (!(img.naturalWidth > 0)) problems.push(path + ": image " + img.getAttribute("src") +
                                               " did not load");
  }
  for (const el of Array.from(doc.querySelectorAll("[src], link[href]"))) {
    const v = el.getAttribute("src") || el.getAttribute("href");
    if (external(v)) problems.push(path + ": external resource " + v);
  }
  for (const a of Array.from(doc.querySelectorAll("a[href]"))) {
    const href = a.getAttribute("href");
    if (external(href)) { problems.push(path + ": external link " + href); continue; }
    const target = new URL(href, base);
    const file = target.origin + target.pathname;
    const r = await fetchText(file);
    if (!r.ok) { problems.push(path + ": link " + href + " -> HTTP " + r.status); continue; }
    if (target.hash) {
      const id = decodeURIComponent(target.hash.slice(1));
      const d = file === base.split("#")[0] ? doc
        : new DOMParser().parseFromString(r.text, "text/html");
      if (!d.getElementById(id)) problems.push(path + ": link " + href + " -> no #" + id);
    }
    if (target.pathname.endsWith(".html") && !seen.has(target.pathname)) {
      seen.add(target.pathname); queue.push(target.pathname);
    }
  }
  frame.remove();
}
(async () => {
  try {
    while (queue.length) { const p = queue.shift(); await checkPage(p); pages.push(p); }
  } catch (e) { problems.push("harness: " + e); }
  document.getElementById("result").textContent =
    "RESULT " + JSON.stringify({pages: pages, problems: problems});
})();
</script></body></html>
"""


def find_chromium() -> str | None:
    """The Chromium binary: $CHROMIUM, else `chromium` or `chromium-browser` on PATH."""
    env = os.environ.get("CHROMIUM")
    if env:
        return env
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@contextmanager
def _serve(directory: Path, harness: bytes) -> Iterator[tuple[str, list[tuple[str, int]]]]:
    """Serve `directory` (and the harness page) on 127.0.0.1; yields the base URL and
    the log of (path, status) requests."""
    log: list[tuple[str, int]] = []

    class Handler(SimpleHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path == HARNESS:
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(harness)))
                self.end_headers()
                self.wfile.write(harness)
                return
            super().do_GET()

        def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
            log.append((self.path, int(code) if str(code).isdigit() else 0))

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 partial(Handler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", log
    finally:
        server.shutdown()
        server.server_close()


def browser_check(out_dir: Path, chromium: str | None = None,
                  timeout_s: float = 300) -> dict[str, Any]:
    """Load every page reachable from `out_dir/index.html` in headless Chromium (served
    on 127.0.0.1) and check that every image loaded, every link resolves and nothing is
    external. Returns `{"pages": [...], "problems": [...]}`. Raises `FileNotFoundError`
    when there is no Chromium, `RuntimeError` when the check did not complete."""
    binary = chromium or find_chromium()
    if binary is None:
        raise FileNotFoundError("no Chromium found (install Debian's chromium, or set "
                                "$CHROMIUM)")
    with tempfile.TemporaryDirectory(prefix="asymlink-chromium-") as profile, \
            _serve(out_dir, _HARNESS_HTML.encode()) as (base, log):
        cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--disable-extensions",
               "--disable-default-apps", "--mute-audio", f"--user-data-dir={profile}",
               "--virtual-time-budget=120000", "--dump-dom", base + HARNESS]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    match = re.search(r"RESULT (\{.*\})", html.unescape(proc.stdout))
    if not match:
        raise RuntimeError(f"the browser check did not complete (exit {proc.returncode}):\n"
                           f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(match.group(1))
    missing = sorted({p for p, status in log if status >= 400 and p != "/favicon.ico"})
    result["problems"] += [f"server: {p} -> 404" for p in missing
                           if not any(p in q for q in result["problems"])]
    result["requests"] = len(log)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m asymlink.report_html check DIR`: the browser check, from a shell."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "check":
        print("usage: python -m asymlink.report_html check REPORT_DIR", file=sys.stderr)
        return 2
    result = browser_check(Path(args[1]))
    for p in result["problems"]:
        print(f"problem: {p}")
    print(f"{len(result['pages'])} pages, {result['requests']} requests, "
          f"{len(result['problems'])} problems")
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
