"""Acting on skew (policies/buffering.py): the Skewed message names the remedy, and a
skew-limited SQL aggregation gets mini-batch and two-phase aggregation written into the
FlinkDeployment only with spec.skew.applySqlSettings, in Active mode."""

from __future__ import annotations

from controller.adapters.twin import MemoryEvents, twin_ports
from controller.adapters.twin import flink_deployment as twin_deployment
from controller.api import ConditionType, SkewSpec, Status
from controller.loop import reconcile
from controller.record import Reason
from controller.simulate import NAME, NAMESPACE, closed_loop_policy
from policies import buffering
from policies.decision import SkewFinding
from simulator.results import GRANULARITY_S, STABILIZATION_S, WINDOW_S
from simulator.twin import Twin

from .test_skewed import keyed_job

SQL_NAME = "GroupAggregate(groupBy=[k], select=[k, COUNT(*)])"


def run(apply: bool, name: str = SQL_NAME, windows: int = 3, max_parallelism: int | None = None
        ) -> tuple[dict[str, str], Status, MemoryEvents]:
    model = keyed_job({"kind": "zipf", "s": 1.4}, 50)
    model = model.model_copy(update={"operators": [
        o.model_copy(update={"name": name}) if o.uid == "count" else o
        for o in model.operators]})
    twin = Twin(model, seed=0)
    ports, _, _ = twin_ports(twin, twin_deployment(model, NAME, NAMESPACE),
                          job_started_s=-STABILIZATION_S)
    hsp = closed_loop_policy(model, "ds2")
    spec = hsp.spec.model_copy(update={"skew": SkewSpec(apply_sql_settings=apply)})
    if max_parallelism is not None:
        spec = spec.model_copy(update={
            "cpu": spec.cpu.model_copy(update={"max_parallelism": max_parallelism})})
    hsp = hsp.model_copy(update={"spec": spec})
    status = Status()
    while twin.time + 1e-9 < windows * WINDOW_S:
        twin.advance(GRANULARITY_S)
        status = reconcile(hsp, 1, status, ports).status
    deployment = ports.deployments.get(NAMESPACE, NAME) or {}
    assert isinstance(ports.events, MemoryEvents)
    return dict(deployment["spec"]["flinkConfiguration"]), status, ports.events


def test_a_skew_limited_sql_aggregation_gets_the_settings_only_when_asked() -> None:
    wanted = buffering.sql_settings(2.0, 5000)
    conf, status, events = run(apply=True)
    assert status.step >= 1
    assert {k: conf.get(k) for k in wanted} == wanted
    [applied] = [e for e in events.events if e[2] == Reason.SQL_BUFFERING]
    assert applied[1] == "Normal" and "GroupAggregate" in applied[3]
    skewed = status.condition(ConditionType.SKEWED)
    assert skewed is not None and "table.optimizer.agg-phase-strategy: TWO_PHASE" in (
        skewed.message)

    conf, status, events = run(apply=False)
    assert status.step >= 1
    assert not any(k in conf for k in wanted)
    assert Reason.SQL_BUFFERING not in [e[2] for e in events.events]
    skewed = status.condition(ConditionType.SKEWED)
    assert skewed is not None and "applySqlSettings" in skewed.message


def test_the_settings_are_a_step_of_their_own_when_no_scaling_step_comes() -> None:
    """maxParallelism holds the aggregation at its 4 tasks: DS2's scale-out is clipped
    away, so only the settings restart the job, once, at the same configuration."""
    wanted = buffering.sql_settings(2.0, 5000)
    conf, status, events = run(apply=True, max_parallelism=4, windows=5)
    assert {k: conf.get(k) for k in wanted} == wanted
    assert status.step == 1 and len(status.history) == 1
    assert [o.parallelism for o in status.operators if o.name == SQL_NAME] == [4]
    [applied] = [e for e in events.events if e[2] == Reason.SQL_BUFFERING]
    assert "step 1" in applied[3]
    assert Reason.SCALED_OUT not in [e[2] for e in events.events]

    conf, status, events = run(apply=False, max_parallelism=4, windows=5)
    assert status.step == 0 and not any(k in conf for k in wanted)


def test_a_datastream_vertex_is_pointed_at_pre_aggregation_and_never_gets_sql_settings() -> None:
    conf, status, _ = run(apply=True, name="Count")
    assert not any(k in conf for k in buffering.SQL_KEYS)
    skewed = status.condition(ConditionType.SKEWED)
    assert skewed is not None and "PreAggregation" in skewed.message


def finding(name: str) -> SkewFinding:
    return SkewFinding(vertex_id="v", vertex_name=name, parallelism=4, keyed=True,
                       hottest_busyness=1.0, mean_busyness=0.4, ratio=2.5, hottest_share=0.6,
                       from_records=True, saturated=True, scale_out_helps=False, message="m")


def test_settings_names_and_what_is_missing() -> None:
    settings = buffering.sql_settings(0.5, 100)
    assert settings == {"table.exec.mini-batch.enabled": "true",
                        "table.exec.mini-batch.allow-latency": "500 ms",
                        "table.exec.mini-batch.size": "100",
                        "table.optimizer.agg-phase-strategy": "TWO_PHASE"}
    assert buffering.missing(settings, {**settings, "table.exec.mini-batch.enabled": "TRUE"}) == []
    assert buffering.missing(settings, {}) == list(settings)
    assert buffering.is_sql_aggregate("GlobalGroupAggregate(groupBy=[k])")
    assert buffering.is_sql_aggregate("GroupWindowAggregate(window=[...])")
    assert not buffering.is_sql_aggregate("counter -> sink: Writer")
    assert "mini-batch" in buffering.remedy(finding(SQL_NAME), settings)
    assert "PreAggregation" in buffering.remedy(finding("Count"), settings)
