"""Type stubs of the private native module (crates/asymlink-py)."""

from os import PathLike
from typing import Any, TypedDict, final, type_check_only

import numpy as np
import numpy.typing as npt

from asymlink.validate import ScenarioError as ScenarioError

__all__ = [
    "__version__", "Simulation", "ScenarioError", "bench_sim", "value_span",
    "box_main", "box_check", "parse_rate", "parse_size", "parse_duration",
]

__version__: str

def value_span(src: str, key: str) -> tuple[int, int] | None:
    """Byte range of the value at dotted path `key` in TOML `src`; None if not written."""

def parse_rate(text: str) -> int:
    """A rate such as "512kbit" or "1.5Mbit/s" in bit/s, parsed by the core exactly as in
    scenario files; ValueError (the core's message) otherwise."""

def parse_size(text: str) -> int:
    """A size such as "1500B", "64KB" or "64KiB" in bytes, parsed by the core."""

def parse_duration(text: str) -> int:
    """A duration such as "200ms", "1.5s" or "2min" in integer nanoseconds, parsed by the
    core."""

@type_check_only
class Meta(TypedDict):
    scenario: str
    seed: int
    duration_s: float
    wall_s: float
    events: int
    packet_hops: int
    trace_hash: int

_Column = npt.NDArray[np.float64] | npt.NDArray[np.int64] | list[str]

@type_check_only
class NativeResults(TypedDict):
    meta: Meta
    tables: dict[str, dict[str, _Column]]

@final
class Simulation:
    """A simulation built from a TOML scenario, advanced in steps."""

    def __new__(
        cls,
        toml_text: str,
        origin: str,
        out_dir: str | PathLike[str] | None = None,
        seed: int | None = None,
        threads: int = 1,
    ) -> Simulation: ...
    @property
    def now(self) -> float:
        """Current simulated time in seconds."""
    @property
    def end(self) -> float:
        """End of the run in seconds."""
    @property
    def finished(self) -> bool:
        """Whether the run reached its end."""
    @property
    def monitor_interval(self) -> float:
        """The monitors' sampling interval in seconds."""
    @property
    def monitors(self) -> tuple[bool, bool, bool]:
        """Which time series are recorded: (flows, queues, links)."""
    def run_until(self, t_seconds: float) -> None:
        """Process events up to and including `t_seconds` (capped at the end); releases
        the GIL. Raises ValueError for a negative or non-finite time."""
    def run(self) -> None:
        """Run to the end; releases the GIL."""
    def results(self) -> NativeResults:
        """Results so far."""


def bench_sim(
    flows: int,
    duration_s: float,
    bottleneck_bps: int,
    access_bps: int = 1_000_000_000,
    rtt_s: float = 0.02,
    profile: str = "rfc",
    cc: str | None = None,
) -> dict[str, Any]:
    """Run the simulator benchmark (dumbbell, one-BDP buffer; `cc` replaces the
    profile's congestion control) without the GIL; returns
    flows, sim_s, wall_s, setup_s, packet_hops, events, packet_hops_per_sec,
    events_per_sec, ns_per_hop, bottleneck_utilization."""


def box_main(argv: list[str]) -> int:
    """Run the live middlebox command (`asymlink-box` arguments, program name excluded)
    in this process without the GIL; returns its exit status (0, 1 runtime, 2 invalid)."""


def box_check(path: str | PathLike[str]) -> str | None:
    """Validate a live box configuration without touching devices: None or the error."""
