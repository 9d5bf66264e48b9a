"""The command line of `today-ack-mechanisms`: `python -m asymlink.repro.today_mechanisms_gen`

* `--write` rewrites the simulator scenarios `scenarios/today-ack-mechanisms/*.toml`;
  `--check` exits with status 1 if one is stale (a test runs it);
* `--lab OUT [SEEDS] [--quick]` runs the lab half (root): the cases `LAB_CASES` and their
  baseline, SEEDS (default 5) paired seeds of 60 s runs (`--quick`: 10 s, as the
  simulator's), in a fresh lab; writes `OUT/lab_metrics.json` and `OUT/lab_verdicts.md`;
  in the entry's output directory, the figures add the lab beside the simulator.
"""

from __future__ import annotations

import sys
from pathlib import Path

from asymlink.repro import today_mechanisms as tm


def main(argv: list[str]) -> int:
    if argv[1:] == ["--check"]:
        bad = tm.stale()
        for p in bad:
            print(f"stale: {p}", file=sys.stderr)
        return 1 if bad else 0
    if argv[1:] == ["--write"]:
        tm.HERE.mkdir(parents=True, exist_ok=True)
        for n, text in tm.generated().items():
            (tm.HERE / f"{n}.toml").write_text(text)
            print(tm.HERE / f"{n}.toml")
        return 0
    quick = "--quick" in argv
    args = [a for a in argv if a != "--quick"]
    if len(args) in (3, 4) and args[1] == "--lab":
        out = Path(args[2])
        out.mkdir(parents=True, exist_ok=True)
        seeds = int(args[3]) if len(args) == 4 else 5
        tm.run_lab(out, seeds, quick)
        print((out / "lab_verdicts.md").read_text())
        return 0
    print("usage: python -m asymlink.repro.today_mechanisms_gen --write | --check | "
          "--lab OUT [SEEDS] [--quick]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
