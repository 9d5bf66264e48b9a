"""Parameter sweeps: a grid or a random sample over scenario keys × seeds.

```python
from asymlink.sweep import SweepSpec, run_sweep

spec = SweepSpec.from_file("sweep.toml")          # checked: raises SweepSpecError
result = run_sweep(spec, "out/sweep")             # local processes; scheduler="tcp://..." for Dask
result.data          # one row per point: parameters, seed, metrics, trace_hash, ...
result.aggregate     # one row per configuration: <metric>_mean, _ci_low, _ci_high, _n
```

The spec format and the output directory are described in `docs/sweeps.md`.
"""

from asymlink.sweep.run import (
    Cache,
    PointTask,
    SweepError,
    SweepResult,
    engine_fingerprint,
    make_executor,
    run_point,
    run_sweep,
)
from asymlink.sweep.spec import Metric, Parameter, Plot, Point, Setting, SweepSpec, SweepSpecError
from asymlink.sweep.stats import aggregate, mean_ci, t_quantile

__all__ = [
    "Cache",
    "Metric",
    "Parameter",
    "Plot",
    "Point",
    "PointTask",
    "Setting",
    "SweepError",
    "SweepResult",
    "SweepSpec",
    "SweepSpecError",
    "aggregate",
    "engine_fingerprint",
    "make_executor",
    "mean_ci",
    "run_point",
    "run_sweep",
    "t_quantile",
]
