"""asymlink: TCP over asymmetric and low-bandwidth links.

The Python front end of the asymlink engine: load and edit scenarios, run them in the
discrete-event simulator, and analyse, plot and report the results.

>>> import asymlink
>>> results = asymlink.run(asymlink.examples.load("showcase"))   # doctest: +SKIP
>>> results.flows.head()                                          # doctest: +SKIP
"""

from asymlink import examples
from asymlink._native import ScenarioError, __version__
from asymlink.results import Results
from asymlink.runner import run
from asymlink.scenario import Scenario

__all__ = ["Results", "Scenario", "ScenarioError", "__version__", "examples", "run"]
