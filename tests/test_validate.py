"""The one validation module: quantities parsed by the core, errors naming the key."""

from __future__ import annotations

import pytest

from asymlink import validate
from asymlink.lab import LabError, LabScenario
from asymlink.repro.base import PaperDataError
from asymlink.sweep import SweepSpecError
from asymlink.validate import ConfigError


def test_quantities_are_the_cores() -> None:
    assert validate.rate("512kbit", "r") == 512_000
    assert validate.rate("1.5Mbit/s", "r") == 1_500_000
    assert validate.rate("2Mibit", "r") == 2 * 1024 * 1024
    assert validate.size("64KiB", "s") == 65_536
    assert validate.size("1.5MB", "s") == 1_500_000
    assert validate.nanoseconds("250ns", "d") == 250
    assert validate.seconds("2min", "d") == 120.0


@pytest.mark.parametrize(("fn", "value", "needle"), [
    (validate.rate, "8mbps", "bytes"),          # the core explains kbps/Mbps
    (validate.rate, "100", "no unit"),
    (validate.size, "-5KB", "negative"),
    (validate.seconds, 5, "string with a unit"),
])
def test_bad_quantities_name_the_key(fn, value, needle) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError) as info:
        fn(value, "flows[0].x")
    assert info.value.path == "flows[0].x"
    assert str(info.value).startswith("flows[0].x: ")
    assert needle in info.value.msg
    assert "\n" not in str(info.value)


def test_within_places_the_error() -> None:
    e = ConfigError("rate", "must be positive").within("links[1].to_a")
    assert (e.path, str(e)) == ("links[1].to_a.rate", "links[1].to_a.rate: must be positive")
    assert ConfigError("[0].x", "m").within("bands").path == "bands[0].x"


def test_one_error_type() -> None:
    assert SweepSpecError is ConfigError and PaperDataError is ConfigError


def test_lab_accepts_what_scenario_files_accept() -> None:
    # The lab's own regexes refused fractional sizes and binary rate prefixes.
    flow = {"from": "server", "to": "client", "window": "1.5MB", "rate": "2Mibit"}
    sc = LabScenario.from_dict({"flows": [flow]})
    assert sc.flows[0].window == 1_500_000
    assert sc.flows[0].rate == 2 * 1024 * 1024


def test_lab_errors_name_the_key() -> None:
    flow = {"from": "server", "to": "client", "window": "64KiBB"}
    with pytest.raises(LabError) as info:
        LabScenario.from_dict({"flows": [flow]})
    assert isinstance(info.value, ConfigError)
    assert info.value.path == "flows[0].window"
    assert str(info.value).startswith("flows[0].window: ")
