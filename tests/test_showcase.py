"""The built-in showcase shows what it claims: a download near the line rate collapses
when an upload starts on the same asymmetric line (numbers from the run, not constants)."""

from __future__ import annotations

import asymlink
from asymlink import examples
from asymlink.analysis import throughput


def test_download_collapses_when_the_upload_starts() -> None:
    res = asymlink.run(examples.load("showcase"))
    tp = throughput(res.flows, interval=1.0)
    down = tp[tp["flow"] == "download"]
    alone = down[(down["t"] > 3) & (down["t"] <= 10)]["throughput_bps"].mean()
    shared = down[(down["t"] > 15) & (down["t"] <= 30)]["throughput_bps"].mean()
    # 64 KiB window, ~60 ms RTT: close to the 8 Mbit/s line alone ...
    assert alone > 6.5e6, alone
    # ... and less than half of it once ACKs wait behind upload data in the modem.
    assert shared < 0.5 * alone, (alone, shared)
    drops = res.queue_summary.set_index("queue").loc["line:to_a", "dropped"]
    assert drops > 0
