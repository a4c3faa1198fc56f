"""flink-autoscaler's options read as our DS2 parameters, and where our DS2 differs from it.

Upstream is the Flink Kubernetes Operator's `flink-autoscaler`, release 1.10.0 (the newest
on Maven Central, the one `bench/peer/` runs); option keys and semantics are from its
`config/AutoScalerOptions.java`, `ScalingMetricEvaluator`, `JobVertexScaler` and
`ScalingExecutor`. `DEVIATIONS` is the one list of differences: docs/policies.md shows
it (a test keeps the two equal) and the conformance cases name an entry wherever our
decision differs from upstream's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from policies.spec import CpuScaling, ParallelismOverride

PREFIX = "job.autoscaler."

_FLINK_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")
_FLINK_UNITS = {
    "": 0.001, "ms": 0.001, "milli": 0.001, "millis": 0.001, "millisecond": 0.001,
    "milliseconds": 0.001, "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0, "d": 86400.0, "day": 86400.0, "days": 86400.0,
}

# Keys that change no single decision of DS2 (when and whether the autoscaler runs,
# what it reports), or whose feature upstream ships disabled and we lack (a
# deviation below), accepted so that a real upstream configuration reads cleanly.
IGNORED = frozenset(
    PREFIX + k for k in (
        "enabled", "scaling.enabled", "metrics.window", "stabilization.interval",
        "excluded.periods", "scaling.event.interval", "flink.rest-client.timeout",
        "history.max.count", "history.max.age", "restart.time-tracking.enabled",
        "restart.time-tracking.limit", "observed-true-processing-rate.lag-threshold",
        "observed-true-processing-rate.switch-threshold",
        "observed-true-processing-rate.min-observations", "scaling.effectiveness.threshold",
        "memory.tuning.enabled", "memory.tuning.overhead",
        "memory.tuning.scale-down-compensation.enabled",
        "memory.tuning.maximize-managed-memory",
    )
)


def flink_duration(key: str, text: str) -> float:
    """Seconds of a Flink duration ('5 min', '30s', '1h'; a bare number is milliseconds)."""
    match = _FLINK_DURATION.match(text.lower())
    if not match or match.group(2) not in _FLINK_UNITS:
        raise ValueError(f"{key}: invalid duration {text!r}, use forms such as '30 s' or '5 min'")
    return float(match.group(1)) * _FLINK_UNITS[match.group(2)]


def _number(key: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{key}: not a number: {text!r}") from None


def cpu_scaling(options: Mapping[str, str]) -> CpuScaling:
    """Our DS2 parameters for upstream's `job.autoscaler.*` options (upstream defaults for
    unset ones). Raises ValueError naming the key for a value we cannot honour."""
    known = {
        "target.utilization", "target.utilization.boundary", "vertex.min-parallelism",
        "vertex.max-parallelism", "scale-up.max-factor", "scale-down.max-factor",
        "scale-down.interval", "catch-up.duration", "restart.time",
        "backlog-processing.lag-threshold", "vertex.exclude.ids",
        "metrics.busy-time.aggregator", "scaling.effectiveness.detection.enabled",
        "memory.gc-pressure.threshold", "memory.heap-usage.threshold",
    }
    for key in options:
        if key.startswith(PREFIX) and key not in IGNORED and key[len(PREFIX):] not in known:
            raise ValueError(f"{key}: not an option our DS2 can follow")

    def get(name: str, default: str) -> str:
        return options.get(PREFIX + name, default).strip()

    target = _number(PREFIX + "target.utilization", get("target.utilization", "0.7"))
    boundary = _number(
        PREFIX + "target.utilization.boundary", get("target.utilization.boundary", "0.3")
    )
    low, high = target - boundary, min(target + boundary, 1.0)
    if low <= 0:
        raise ValueError(
            f"{PREFIX}target.utilization.boundary: {boundary:g} leaves no lower bound above 0"
            " (upstream then never scales down); our utilizationMin must be > 0"
        )
    aggregator = get("metrics.busy-time.aggregator", "MAX").upper()
    if aggregator != "AVG":
        raise ValueError(
            f"{PREFIX}metrics.busy-time.aggregator: our DS2 uses the mean busy time over"
            f" subtasks (AVG), not {aggregator} (deviation busy-time-mean)"
        )
    for name in ("memory.gc-pressure.threshold", "memory.heap-usage.threshold"):
        if _number(PREFIX + name, get(name, "1.0")) < 1.0:
            raise ValueError(f"{PREFIX}{name}: memory-pressure guards are not modelled")
    if get("scaling.effectiveness.detection.enabled", "false").lower() == "true":
        raise ValueError(
            f"{PREFIX}scaling.effectiveness.detection.enabled: ineffective-scaling"
            " detection is not modelled"
        )
    excluded = tuple(
        ParallelismOverride(vertex_id=vid.strip(), exclude=True)
        for vid in get("vertex.exclude.ids", "").replace(";", ",").split(",")
        if vid.strip()
    )
    return CpuScaling(
        utilization_target=target,
        utilization_min=low,
        utilization_max=high,
        min_parallelism=int(get("vertex.min-parallelism", "1")),
        max_parallelism=int(get("vertex.max-parallelism", "200")),
        max_scale_up_factor=_number(PREFIX + "scale-up.max-factor", get("scale-up.max-factor",
                                                                        "100000")),
        max_scale_down_factor=_number(
            PREFIX + "scale-down.max-factor", get("scale-down.max-factor", "0.6")
        ),
        scale_down_delay=flink_duration(PREFIX + "scale-down.interval",
                                        get("scale-down.interval", "1 h")),
        catch_up_duration=flink_duration(PREFIX + "catch-up.duration",
                                         get("catch-up.duration", "30 min")),
        restart_time=flink_duration(PREFIX + "restart.time", get("restart.time", "5 min")),
        backlog_lag_threshold=flink_duration(
            PREFIX + "backlog-processing.lag-threshold",
            get("backlog-processing.lag-threshold", "5 min"),
        ),
        overrides=excluded,
    )


@dataclass(frozen=True)
class Deviation:
    id: str
    ours: str
    upstream: str
    reason: str


DEVIATIONS: tuple[Deviation, ...] = (
    Deviation(
        "hard-bounds",
        "[minParallelism, maxParallelism] (and per-vertex overrides) are hard bounds: a vertex"
        " outside them is moved inside",
        "widens the bounds to include the current parallelism",
        "the bounds are the tenant's limits; a pinned vertex must stay pinned",
    ),
    Deviation(
        "idle-vertex",
        "a vertex with no busy time (capacity unknown) keeps its parallelism and never"
        " triggers",
        "takes its true processing rate as infinite and scales it down by the maximum"
        " scale-down factor",
        "zero busy time is as often a missing or too coarse metric as an idle vertex;"
        " shrinking on it restarts the job for no evidence",
    ),
    Deviation(
        "busy-time-mean",
        "busyness is the mean busy time over subtasks (upstream's"
        " `metrics.busy-time.aggregator: AVG`); the conformance runs upstream with AVG",
        "defaults to MAX, the busiest subtask",
        "MAX sizes every subtask for the hottest one (skew); the Justin paper's busyness"
        " is the mean",
    ),
    Deviation(
        "alignment-direction",
        "key-group alignment keeps the current parallelism when its result would not move"
        " in the sized direction (also when the vertex is sized to stay)",
        "1.10 aligns every sized vertex with a hash input, so a vertex sized to stay, or"
        " one whose fallback lands on the other side, changes or inverts (1.11+ guards"
        " this as we do)",
        "a rescale that goes against the measured need (or happens without one) is a"
        " restart for nothing; upstream fixed it after 1.10",
    ),
    Deviation(
        "scale-down-latest",
        "once a scale-down has been wanted for scaleDownDelay, the latest recommendation"
        " applies, and a delayed scale-down rides along when another vertex triggers (as"
        " 1.10)",
        "1.11+ applies the maximum recommendation within the interval and does not let"
        " delayed scale-downs ride along",
        "the conformance peer is 1.10.0; one timestamp per vertex is all the policy's"
        " status keeps",
    ),
    Deviation(
        "output-ratio-per-vertex",
        "output ratios are per vertex (records out / records in), the same for every"
        " outgoing edge",
        "estimates a ratio per edge from the downstream vertex's input when it has one"
        " input",
        "Flink counts records out per vertex; the two agree unless a vertex feeds several"
        " vertices at different rates",
    ),
    Deviation(
        "not-modelled",
        "no observed true processing rate for sources, no source-partition alignment, no"
        " ineffective-scaling detection, no GC/heap guards, no observed scalability",
        "has them (all but the observed true processing rate off or inert by default)",
        "we collect no partition counts or TaskManager JVM metrics yet; the conformance"
        " cases keep the observed rate out of play (every lag under 30 s of input)",
    ),
    Deviation(
        "scale-in-floor",
        "a scale-down never returns a vertex to a parallelism it was scaled out from for being"
        " above utilizationMax on the target alone (catch-up excluded), nor below, while its"
        " target rate is at least 90 % of that step's and its memory level no higher; it stops"
        " halfway between, aligned to the key groups (the stored history's last 10 steps)",
        "1.10 has no such guard; its 1-h scale-down interval spaces scale-downs out (older"
        " versions blocked any scale-down for a 1-h grace period after a scale-up)",
        "DS2's estimate is linear in the tasks: where fewer tasks each hold more state and miss"
        " the cache, the scale-in it sizes falls short and the next window scales out again;"
        " with our 5-min scaleDownDelay that loop restarted q11 40 times in 5 hours",
    ),
    Deviation(
        "defaults",
        "defaults follow the Justin paper: utilization 0.5 in [0.2, 0.8], restart time 0,"
        " max scale-up factor 10, scale-down delay 5 min; catch-up 30 min, as upstream"
        " (the paper sizes none)",
        "0.7 ± 0.3, catch-up 30 min, restart time 5 min, scale-up factor 100000,"
        " scale-down interval 1 h",
        "our published comparisons are with the paper; `cpu_scaling()` maps upstream's"
        " options one to one. Catch-up was 5 min until measured: it sized steps for"
        " backlogs the utilization target's headroom drains anyway (\"The catch-up default,"
        " measured and changed\")",
    ),
)


def deviation(identifier: str) -> Deviation:
    for d in DEVIATIONS:
        if d.id == identifier:
            return d
    raise KeyError(f"no deviation {identifier!r}; known: {', '.join(d.id for d in DEVIATIONS)}")


def deviations_markdown() -> str:
    """The list as docs/policies.md shows it."""
    return "\n".join(
        f"- **`{d.id}`**: we: {d.ours}. Upstream: {d.upstream}. Why: {d.reason}."
        for d in DEVIATIONS
    ) + "\n"
