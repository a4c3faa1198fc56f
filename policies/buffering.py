"""What lifts a skew-limited vertex: buffering, not parallelism.

A hot key's records all go to one subtask, however many there are (policies/skew.py), and
each costs that subtask a state read and write. Folding a key's records in memory before
the state is touched (in-memory buffering, as in "Apache Flink: towards a 20x throughput
improvement using in-memory buffers", Koliopoulos) turns n accesses into one per flush.

- SQL jobs have it built in: mini-batch aggregation (`table.exec.mini-batch.*`) buffers
  input per key, and two-phase aggregation (`table.optimizer.agg-phase-strategy:
  TWO_PHASE`) pre-aggregates before the shuffle (LocalGroupAggregate →
  GlobalGroupAggregate), so the hot key's subtask receives one partial per upstream task
  and batch. Both take effect at the next (re)start of the job.
- DataStream jobs: flink-plugin's `PreAggregation` (docs/flink-plugin.md), flushed on
  size, time and checkpoint barriers, exact across restores.

Pure: names and settings only; the controller decides where they go (Events, and, with
`spec.skew.applySqlSettings` in Active mode, the FlinkDeployment).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from policies.decision import SkewFinding

MINI_BATCH_ENABLED = "table.exec.mini-batch.enabled"
MINI_BATCH_LATENCY = "table.exec.mini-batch.allow-latency"
MINI_BATCH_SIZE = "table.exec.mini-batch.size"
AGG_PHASE = "table.optimizer.agg-phase-strategy"
SQL_KEYS = (MINI_BATCH_ENABLED, MINI_BATCH_LATENCY, MINI_BATCH_SIZE, AGG_PHASE)

# Flink SQL's physical aggregation operators, as they name their job vertices, matched as
# parts of the name: GroupAggregate also names Global-, Local- and IncrementalGroupAggregate,
# WindowAggregate also GroupWindowAggregate.
_SQL_AGGREGATES = ("GroupAggregate", "WindowAggregate")


def sql_settings(latency_s: float, size: int) -> dict[str, str]:
    """Mini-batch and two-phase aggregation, as flinkConfiguration strings."""
    return {
        MINI_BATCH_ENABLED: "true",
        MINI_BATCH_LATENCY: f"{max(1, round(latency_s * 1000))} ms",
        MINI_BATCH_SIZE: str(size),
        AGG_PHASE: "TWO_PHASE",
    }


def is_sql_aggregate(vertex_name: str) -> bool:
    """A job vertex that runs one of Flink SQL's aggregation operators."""
    return any(name in vertex_name for name in _SQL_AGGREGATES)


def missing(settings: Mapping[str, str], configuration: Mapping[str, object]) -> list[str]:
    """The keys of `settings` the job's flinkConfiguration does not hold as wanted."""
    return [k for k, v in settings.items()
            if str(configuration.get(k, "")).strip().lower() != v.lower()]


def described(finding: SkewFinding, settings: Mapping[str, str]) -> str:
    """A skew-limited vertex as the Skewed condition, its Event and `explain` say it: the
    finding, then its one remedy."""
    return f"{finding.message}. {remedy(finding, settings)}"


def remedy(finding: SkewFinding, settings: Mapping[str, str]) -> str:
    """One sentence: what would lift a skew-limited vertex."""
    name = finding.vertex_name or finding.vertex_id
    if is_sql_aggregate(finding.vertex_name):
        rendered = ", ".join(f"{k}: {v}" for k, v in settings.items())
        return (f"{name} is a SQL aggregation: mini-batch and two-phase (local-global) "
                f"aggregation fold the hot key before the shuffle ({rendered}; "
                f"spec.skew.applySqlSettings applies them in Active mode)")
    return (f"{name}: pre-aggregate per key before the keyBy (flink-plugin's "
            f"PreAggregation: in-memory, flushed on size, time and checkpoint barriers); "
            f"more tasks will not help")


def sql_vertices(findings: Iterable[SkewFinding]) -> list[SkewFinding]:
    """Skew-limited findings on SQL aggregations: what the SQL settings can lift."""
    return [f for f in findings if is_sql_aggregate(f.vertex_name)]
