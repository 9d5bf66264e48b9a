"""Reproductions of the papers' headline results (`asymlink reproduce`).

Each catalog entry lives in a module of this package that calls `register(Entry(...))`;
its scenario files and `paper.toml` are package data under `scenarios/<id>/`. See
`asymlink.repro.base` for the format and the contract.
"""

from asymlink.repro import (
    _selftest,  # noqa: F401  (registers the internal self-test)
    ackdelay_router,  # noqa: F401  (ackdelay-router)
    ackdelay_satellite,  # noqa: F401  (ackdelay-satellite)
    ackfilter,  # noqa: F401  (ackfilter-threshold, -delayed, -multi)
    adsl,  # noqa: F401  (adsl-problem, -linksharing, -ackfifo, -atm)
    adsl_today,  # noqa: F401  (adsl-today)
    aggregate,  # noqa: F401  (aggregate-shaping, -policing, -window)
    receiver,  # noqa: F401  (receiver-telnet, -web, -loss)
    today_mechanisms,  # noqa: F401  (today-ack-mechanisms)
)
from asymlink.repro.base import (
    Check,
    Entry,
    Expectation,
    FixedParameter,
    PaperData,
    PaperDataError,
    PaperValue,
    Report,
    assert_expectations,
    check_expectations,
    entries,
    evaluate,
    get,
    plain_metrics,
    register,
    reproduce,
)

# Catalog entries: import each entry's module above (e.g. `ackfilter`), so that it
# registers itself.

__all__ = [
    "Check",
    "Entry",
    "Expectation",
    "FixedParameter",
    "PaperData",
    "PaperDataError",
    "PaperValue",
    "Report",
    "assert_expectations",
    "check_expectations",
    "entries",
    "evaluate",
    "get",
    "plain_metrics",
    "register",
    "reproduce",
]
