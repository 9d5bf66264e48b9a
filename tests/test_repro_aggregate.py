"""The aggregate rate control reproductions: their files check and are what the generator
writes, their orderings hold on --quick, the arms differ only where they should, and the
fairness functions and the pcap reader measure what they claim."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asymlink import repro
from asymlink.analysis import jain_index, max_min_fairness_index, max_min_shares
from asymlink.repro import aggregate, aggregate_gen

ENTRIES = ["aggregate-shaping", "aggregate-policing", "aggregate-window"]


def test_registered_and_generated() -> None:
    ids = [e.id for e in repro.entries()]
    for e in ENTRIES:
        assert e in ids
    assert aggregate_gen.stale() == [], "run python -m asymlink.repro.aggregate_gen"


@pytest.mark.parametrize("entry_id", ENTRIES)
def test_files_check(entry_id: str) -> None:
    repro.get(entry_id).check()


@pytest.mark.parametrize("entry_id", ENTRIES)
def test_orderings_hold_on_quick(entry_id: str, tmp_path: Path) -> None:
    repro.assert_expectations(entry_id, tmp_path)


def test_shaping_reports_the_issue_keys(tmp_path: Path) -> None:
    report = repro.reproduce("aggregate-shaping", tmp_path, quick=True)
    m: Any = report.metrics
    schemes = ["none", "partitioned", "partitioned_rtt", "common_sequential", "common_fcfs",
               "common_lru", "logical"]
    for key in ("fairness_index", "utilization"):
        node = m[key]
        assert sorted(node) == sorted(schemes)
        for scheme in schemes:
            assert sorted(node[scheme]) == ["equal", "unequal"]
    # The shaper never lets the aggregate exceed r_m (plus B over the window).
    for scheme in schemes[1:]:
        for links in ("equal", "unequal"):
            assert m["utilization"][scheme][links] <= 1.02
    summary = (tmp_path / "summary.md").read_text()
    assert "| fairness_index.common_fcfs.equal | 0.95" in summary
    assert (tmp_path / "figures" / "schemes.png").exists()


def test_shaping_arms_differ_only_by_the_conditioner() -> None:
    e = aggregate.SHAPING
    ref = e.scenario("none-equal", quick=False).data
    for name in e.scenario_names():
        data = e.scenario(name, quick=False).data
        links = name.split("-")[1]
        for key in ("flows", "tcp", "duration", "seed"):
            assert data[key] == ref[key], f"{name}: {key}"
        assert data["nodes"][1:] == ref["nodes"][1:]
        rates = [lk["rate"] for lk in data["links"][2:]]
        assert rates == [f"{r}kbit" for r in aggregate_gen.LINK_RATES[links]]
        cond = data["nodes"][0].get("conditioner")
        assert (cond is None) == name.startswith("none")


def test_max_min_shares_and_index() -> None:
    # §2.2: 500 kbit/s among clients limited to 1000, 500, 100: 200, 200, 100.
    np.testing.assert_allclose(max_min_shares(500, [1000, 500, 100]), [200, 200, 100])
    np.testing.assert_allclose(max_min_shares(1000, [1000, 500, 100]), [450, 450, 100])
    np.testing.assert_allclose(max_min_shares(90, [np.inf] * 3), [30, 30, 30])
    # Demand below capacity: everyone gets its limit.
    np.testing.assert_allclose(max_min_shares(10, [1, 2, 3]), [1, 2, 3])
    # Throughputs at their max-min shares are perfectly fair; Jain's index is not 1.
    assert max_min_fairness_index([200, 200, 100], [200, 200, 100]) == pytest.approx(1.0)
    assert jain_index([200, 200, 100]) == pytest.approx(25 / 27)
    # Equal shares: the modified index is Jain's.
    x = [480, 10, 10]
    assert max_min_fairness_index(x, [1, 1, 1]) == pytest.approx(jain_index(x))
    assert jain_index([500, 0, 0]) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="shares"):
        max_min_fairness_index([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="positive"):
        max_min_fairness_index([1, 2], [1, 0])
    with pytest.raises(ValueError):
        max_min_shares(-1, [1])


def _pcap(path: Path, packets: list[tuple[float, int, int]]) -> None:
    """A nanosecond RAW pcap of (time, DSCP, IP length) with 40-byte snaps."""
    out = bytearray(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 40, 101))
    for t, dscp, length in packets:
        ip = bytes([0x45, dscp << 2]) + length.to_bytes(2, "big") + bytes(36)
        out += struct.pack("<IIII", int(t), round((t % 1) * 1e9), len(ip), length) + ip
    path.write_bytes(bytes(out))


def test_pcap_bytes_counts_marked_packets_in_the_window(tmp_path: Path) -> None:
    f = tmp_path / "c.pcap"
    _pcap(f, [(0.5, 10, 1040), (1.5, 0, 1040), (2.5, 10, 1040), (3.5, 10, 540), (9.0, 10, 1040)])
    assert aggregate.pcap_bytes(f, 1.0, 4.0) == (1040 + 1040 + 540, 1040 + 540)
    with pytest.raises(ValueError, match="magic"):
        (tmp_path / "bad.pcap").write_bytes(bytes(24))
        aggregate.pcap_bytes(tmp_path / "bad.pcap", 0, 1)
