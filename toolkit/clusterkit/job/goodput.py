"""How often a job should checkpoint, from how often a job of its size fails (pure arithmetic).

A job on ``G`` GPUs that each fail at ``r`` per hour fails, on average, every ``1 / (G r)`` hours
(its mean time between failures, ``M``).  A checkpoint that takes ``d`` seconds to save is
worth taking every ``tau`` seconds of work, where Young's first-order optimum is
``sqrt(2 d M)`` and Daly's higher-order one (used here) corrects it for saves that are not
small against ``M``.  Daly's model of the whole run then gives the share of wall time spent on
work that is kept (ETTR, effective training time ratio) for a restart that costs ``R`` seconds:

    ETTR = tau / (M * exp(R / M) * (exp((tau + d) / M) - 1))

Sources: J. W. Young, "A first order approximation to the optimum checkpoint interval",
CACM 17(9), 1974; J. T. Daly, "A higher order estimate of the optimum checkpoint interval for
restart dumps", FGCS 22(3), 2006 (equations 20 and 37).  The default failure rate is the
Llama 3 report's: 419 unexpected interruptions in 54 days on 16,384 GPUs, 1.97e-5 per
GPU-hour ("The Llama 3 Herd of Models", Meta, 2024, section 3.3.4).  See docs/jobs.md,
"How often to checkpoint".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

LLAMA3_FAILURES_PER_GPU_HOUR = 1.97e-5
LLAMA3_SOURCE = "Llama 3 report: 419 interruptions in 54 days on 16,384 GPUs"


def mtbf_s(gpus: int, failures_per_gpu_hour: float) -> float:
    """The mean time between failures, in seconds, of a job on ``gpus`` GPUs."""
    if gpus < 1 or failures_per_gpu_hour <= 0:
        raise ValueError("gpus must be at least 1 and the failure rate above 0")
    return 3600.0 / (gpus * failures_per_gpu_hour)


def young_interval_s(save_s: float, mtbf: float) -> float:
    """Young's first-order optimum: seconds of work between the starts of two saves."""
    return math.sqrt(2.0 * save_s * mtbf)


def daly_interval_s(save_s: float, mtbf: float) -> float:
    """Daly's higher-order optimum (his equation 37): seconds of work between two saves.

    For a save that takes as long as two mean times between failures or longer, no interval
    helps; Daly's answer is then ``M`` itself."""
    if save_s <= 0:
        raise ValueError("the save time must be above 0")
    if save_s >= 2.0 * mtbf:
        return mtbf
    x = save_s / (2.0 * mtbf)
    return math.sqrt(2.0 * save_s * mtbf) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - save_s


def expected_ettr(interval_s: float, save_s: float, restart_s: float, mtbf: float) -> float:
    """The share of wall time that is work kept (Daly's equation 20, exponential failures).

    Failures strike during work, saves and restarts alike; each one loses the work since the
    last completed save and costs a restart."""
    if interval_s <= 0 or save_s < 0 or restart_s < 0 or mtbf <= 0:
        raise ValueError("interval and MTBF must be above 0, save and restart times not below 0")
    wall = mtbf * math.exp(restart_s / mtbf) * math.expm1((interval_s + save_s) / mtbf)
    return interval_s / wall


@dataclass(frozen=True)
class Cadence:
    """The checkpoint cadence a job is told (``CK_CHECKPOINT_INTERVAL_S``) and what it rests on."""

    gpus: int
    failures_per_gpu_hour: float
    rate_from: str          # where the rate came from: the site file, or the default and its source
    mtbf_s: float
    save_s: float
    restart_s: float
    interval_s: int         # Daly's optimum, whole seconds, at least 1
    ettr: float             # expected share of wall time kept, at that interval

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def worded(self) -> str:
        """One line for ``render`` and ``submit``."""
        return (f"checkpoint every {_duration(self.interval_s)} (CK_CHECKPOINT_INTERVAL_S={self.interval_s}): "
                f"{self.gpus} GPU(s) at {self.failures_per_gpu_hour:g} failures per GPU-hour fail every "
                f"{_duration(self.mtbf_s)} on average; with {self.save_s:g} s saves and {self.restart_s:g} s "
                f"restarts about {self.ettr:.1%} of the time is work kept")


def cadence(gpus: int, failures_per_gpu_hour: float | None, save_s: float, restart_s: float) -> Cadence:
    """The cadence for ``gpus`` GPUs; ``failures_per_gpu_hour`` None takes the Llama 3 rate."""
    rate, source = ((LLAMA3_FAILURES_PER_GPU_HOUR, f"default ({LLAMA3_SOURCE})")
                    if failures_per_gpu_hour is None else (failures_per_gpu_hour, "site"))
    m = mtbf_s(gpus, rate)
    tau = daly_interval_s(save_s, m)
    return Cadence(gpus=gpus, failures_per_gpu_hour=rate, rate_from=source, mtbf_s=round(m, 1),
                   save_s=save_s, restart_s=restart_s, interval_s=max(1, round(tau)),
                   ettr=round(expected_ettr(tau, save_s, restart_s, m), 4))


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"
