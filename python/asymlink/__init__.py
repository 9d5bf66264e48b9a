"""asymlink: TCP over asymmetric and low-bandwidth links.

The Python front end of the asymlink engine: load and edit scenarios, run them in the
discrete-event simulator, and analyse, plot and report the results.

>>> import asymlink
>>> results = asymlink.run(asymlink.examples.load("showcase"))   # doctest: +SKIP
>>> results.flows.head()                                          # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from asymlink._native import __version__
from asymlink.validate import ConfigError, ScenarioError

if TYPE_CHECKING:
    from asymlink import examples
    from asymlink.results import Results
    from asymlink.runner import run
    from asymlink.scenario import Scenario

__all__ = ["ConfigError", "Results", "Scenario", "ScenarioError", "__version__", "examples", "run"]

# The public names load on first use (PEP 562), so that `python -m asymlink.live` (the
# live box) starts without importing pandas and matplotlib.
_LAZY = {"examples": ("asymlink.examples", None), "Results": ("asymlink.results", "Results"),
         "run": ("asymlink.runner", "run"), "Scenario": ("asymlink.scenario", "Scenario")}


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'asymlink' has no attribute {name!r}") from None
    value = importlib.import_module(module)
    value = value if attr is None else getattr(value, attr)
    globals()[name] = value
    return value
