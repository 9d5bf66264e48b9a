"""Generate the link traces shipped with asymlink, and their plots.

    python scripts/gen_traces.py            # writes python/asymlink/traces/*.trace
                                            # and docs/img/trace-*.png

Each trace is 60 s long, in mahimahi's format (one millisecond timestamp per line, one
1500-byte delivery opportunity each; the trace repeats), drawn from a fixed seed so that
running the script again reproduces the committed files byte for byte. They are synthetic:
shapes that exercise a mechanism the way such links do, not measurements of any network.

* `cellular` — an LTE-like link: mean about 8 Mbit/s, slow shadowing (a log-normal AR(1)
  process, 6 dB spread, 2 s correlation), fast fading (Rayleigh-like power, about 50 ms
  coherence) and per-millisecond scheduling noise, capped to 0.1–40 Mbit/s; and outages
  (a Poisson process, one per 15 s on average, 0.2–1.5 s each, no opportunity at all).
* `leo` — a LEO-satellite-like link: the terminal is reassigned to another satellite
  every 15 s (at 12, 27, 42 and 57 s, as Starlink's scheduler does on the wall clock);
  each reconfiguration drops the link for 20–80 ms and starts a new base rate
  (uniform 8–20 Mbit/s), with ±20 % variation around it (100 ms correlation).
* `dsl` — a DSL line that retrains: 6 Mbit/s for 25 s, no capacity for 15 s while the
  modems retrain, then 4.5 Mbit/s (resynchronised lower) to 60 s; the loop brings the
  6 Mbit/s back.

The rate of each millisecond becomes opportunities by accumulating bytes: 1500 bytes
of credit make one opportunity at that millisecond (several in one millisecond at rates
above 12 Mbit/s). The last line is always 60000 (the period).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "python" / "asymlink" / "traces"
IMG = ROOT / "docs" / "img"
PERIOD_MS = 60_000
MTU = 1500
SEED = 20_240_601


def ar1(rng: np.random.Generator, n: int, corr_ms: float, sigma: float) -> np.ndarray:
    """A stationary AR(1) series of `n` ms, correlation time `corr_ms`, std `sigma`."""
    a = float(np.exp(-1.0 / corr_ms))
    noise = rng.normal(0.0, sigma * np.sqrt(1 - a * a), n)
    x = np.empty(n)
    x[0] = rng.normal(0.0, sigma)
    for i in range(1, n):
        x[i] = a * x[i - 1] + noise[i]
    return x


def cellular(rng: np.random.Generator) -> np.ndarray:
    """Rate in bit/s for each millisecond."""
    n = PERIOD_MS
    shadow_db = ar1(rng, n, 2000.0, 6.0)
    # Rayleigh-like fading: the power of a complex Gaussian with ~50 ms coherence.
    i = ar1(rng, n, 50.0, 1.0)
    q = ar1(rng, n, 50.0, 1.0)
    fading = (i * i + q * q) / 2.0
    sched = rng.uniform(0.7, 1.3, n)
    rate = 8e6 * 10 ** (shadow_db / 10.0) * (0.3 + 0.7 * fading) * sched
    rate = np.clip(rate, 0.1e6, 40e6)
    t = 0.0
    while True:
        t += rng.exponential(15_000.0)
        if t >= n:
            break
        d = rng.uniform(200.0, 1500.0)
        rate[int(t) : int(min(n, t + d))] = 0.0
    return rate


def leo(rng: np.random.Generator) -> np.ndarray:
    n = PERIOD_MS
    rate = np.empty(n)
    bounds = [0, 12_000, 27_000, 42_000, 57_000, n]
    for a, b in zip(bounds, bounds[1:], strict=False):
        rate[a:b] = rng.uniform(8e6, 20e6)
    rate *= 1.0 + np.clip(ar1(rng, n, 100.0, 0.1), -0.2, 0.2)
    for b in bounds[1:-1]:
        rate[b : b + int(rng.uniform(20, 80))] = 0.0
    return rate


def dsl(_rng: np.random.Generator) -> np.ndarray:
    rate = np.full(PERIOD_MS, 6e6)
    rate[25_000:40_000] = 0.0
    rate[40_000:] = 4.5e6
    return rate


def opportunities(rate_bps: np.ndarray) -> list[int]:
    """Millisecond timestamps (1-based: the bytes of ms i go at i + 1) of the
    opportunities the rate gives, ending with the period."""
    out: list[int] = []
    credit = 0.0
    for ms, r in enumerate(rate_bps):
        credit += r / 8000.0
        k = int(credit // MTU)
        if k:
            credit -= k * MTU
            out.extend([ms + 1] * k)
    if not out or out[-1] != PERIOD_MS:
        out.append(PERIOD_MS)
    return out


def plot(name: str, times: list[int], title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bins = np.arange(0, PERIOD_MS + 100, 100)
    counts, _ = np.histogram(np.asarray(times) - 1, bins=bins)
    mbps = counts * MTU * 8 / 0.1 / 1e6
    fig, ax = plt.subplots(figsize=(7, 2.4), dpi=100)
    ax.plot(bins[:-1] / 1000.0, mbps, lw=0.8)
    ax.set_xlim(0, PERIOD_MS / 1000)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("Mbit/s (100 ms)")
    mean = len(times) * MTU * 8 / (PERIOD_MS / 1000) / 1e6
    ax.set_title(f"builtin:{name} — {title}; mean {mean:.1f} Mbit/s", fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    IMG.mkdir(parents=True, exist_ok=True)
    out = IMG / f"trace-{name}.png"
    # A fixed creation date keeps the PNG byte-identical from run to run.
    fig.savefig(out, metadata={"Software": None})
    plt.close(fig)
    return out


GENERATORS = {
    "cellular": (cellular, "LTE-like fading with outages"),
    "leo": (leo, "LEO satellite, reconfiguration every 15 s"),
    "dsl": (dsl, "DSL line with a retrain"),
}


def main() -> int:
    TRACES.mkdir(parents=True, exist_ok=True)
    for k, (name, (gen, title)) in enumerate(GENERATORS.items()):
        rng = np.random.default_rng([SEED, k])
        times = opportunities(gen(rng))
        path = TRACES / f"{name}.trace"
        path.write_text("".join(f"{t}\n" for t in times))
        png = plot(name, times, title)
        mean = len(times) * MTU * 8 / (PERIOD_MS / 1000) / 1e6
        print(f"{path.relative_to(ROOT)}: {len(times)} opportunities, mean {mean:.2f} Mbit/s;"
              f" {png.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
