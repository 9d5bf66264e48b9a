"""The command line of `adsl-today`: `python -m asymlink.repro.adsl_today_gen`

* `--write` rewrites the simulator scenarios `scenarios/adsl-today/*.toml` from the lab
  scenarios `today-<arm>.toml`; `--check` exits with status 1 if one is stale (a test
  runs it);
* `--lab OUT [BUFFER ...]` runs every arm (with each buffer, default 50 and 1000 packets)
  in a fresh lab (root, about 35 s per run) and writes `OUT/lab_metrics.json`; put it in
  the entry's output directory and the figure shows the lab beside the simulator.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from asymlink.repro import adsl_today


def main(argv: list[str]) -> int:
    if argv[1:] == ["--check"]:
        bad = adsl_today.stale()
        for p in bad:
            print(f"stale: {p}", file=sys.stderr)
        return 1 if bad else 0
    if argv[1:] == ["--write"]:
        adsl_today.HERE.mkdir(parents=True, exist_ok=True)
        for n, text in adsl_today.generated().items():
            (adsl_today.HERE / f"{n}.toml").write_text(text)
            print(adsl_today.HERE / f"{n}.toml")
        return 0
    if len(argv) >= 3 and argv[1] == "--lab":
        out = Path(argv[2])
        out.mkdir(parents=True, exist_ok=True)
        buffers = [int(b) for b in argv[3:]] or None
        print(json.dumps(adsl_today.run_lab(out, buffers), indent=2))
        return 0
    print("usage: python -m asymlink.repro.adsl_today_gen --write | --check | --lab OUT "
          "[BUFFER ...]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
