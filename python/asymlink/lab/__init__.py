"""The namespace lab: real Linux TCP through the live box.

`asymlink lab up` creates a client, a router and a server network namespace;
`asymlink lab run SCENARIO --out DIR` runs the box in the router with the scenario's
configuration, real TCP transfers, pings and typed-echo probes through it, and writes the
simulator's tables plus `metrics.json`; `asymlink lab down` removes everything.
See `docs/live.md`.
"""

from asymlink.lab.box import BoxProcess, start_box
from asymlink.lab.netns import Lab, LabError, can_run_labs
from asymlink.lab.scenario import LabScenario, run_scenario

__all__ = ["BoxProcess", "Lab", "LabError", "LabScenario", "can_run_labs", "run_scenario",
           "start_box"]
