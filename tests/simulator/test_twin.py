"""The twin's dynamics: backpressure, lag, downtime, catch-up, noise, load patterns."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.model import VertexConfig
from policies.restart_cost import MEASURED, Enactment, expected_downtime_s
from simulator.model import Episodes, JobModel, Noise, Reconfiguration, RocksDB, load_model
from simulator.twin import CPU_LIMIT_FACTOR_KEY, Twin, cpu_limit_factor, paper_resources


def vid(model: JobModel, uid: str) -> str:
    return model.operator(uid).vertex_id


def test_an_undersized_operator_backpressures_the_source_and_lag_grows():
    model = load_model("q11")
    twin = Twin(model, seed=1)
    twin.advance(120)
    obs = twin.observe(60)
    session = obs.vertices[vid(model, "q11-session")]
    source = obs.vertices[vid(model, "q11-source")]
    sink = obs.vertices[vid(model, "q11-sink")]
    capacity = twin.cost(vid(model, "q11-session")).capacity
    assert session.busy_ms_per_s > 950
    assert session.records_in_per_s == pytest.approx(capacity, rel=0.05)
    assert source.backpressured_ms_per_s > 900  # upstream of the bottleneck
    assert sink.backpressured_ms_per_s == 0  # downstream of it: idle
    assert source.pending_records_growth_per_s == pytest.approx(100_000 - capacity, rel=0.05)
    assert twin.lag() == pytest.approx(120 * (100_000 - capacity), rel=0.02)
    assert session.has_state_backend_metrics and not sink.has_state_backend_metrics
    assert session.cache_hit_rate is not None and session.cache_hit_rate < 0.8
    assert session.state_latency_ns is not None and session.state_latency_ns > 0
    assert obs.missing(twin.job_graph()) == ()


def test_true_processing_rate_is_the_capacity_when_not_backpressured():
    model = load_model("q11").model_copy(update={"noise": Noise.off()})
    session = vid(model, "q11-session")
    twin = Twin(model, seed=2, configuration={session: VertexConfig(24, 0)})
    twin.advance(60)
    metrics = twin.observe(60).vertices[session]
    assert metrics.records_in_per_s == pytest.approx(100_000, rel=0.03)
    assert metrics.true_processing_rate == pytest.approx(
        24 * twin.cost(session).capacity, rel=0.08)
    assert twin.lag() == 0


def test_a_reconfiguration_costs_downtime_growing_with_state_and_lag_drains_after():
    small, big = load_model("q3"), load_model("q8")
    assert Twin(big).downtime_s() > Twin(small).downtime_s() > 0
    model = load_model("q11")
    session = vid(model, "q11-session")
    twin = Twin(model, seed=3, configuration={session: VertexConfig(24, 0)})
    twin.advance(60)
    downtime = twin.apply({session: VertexConfig(30, 0)})
    assert downtime == pytest.approx(twin.downtime_s()) and twin.restarts == 1
    assert not twin.running
    twin.advance(downtime)
    assert twin.lag() == pytest.approx(100_000 * downtime, rel=0.05)
    twin.advance(5)
    assert twin.achieved_rate(5) > 100_000  # catching up, above the target
    twin.advance(600)
    assert twin.lag() == 0
    assert twin.apply({session: VertexConfig(30, 0)}) == 0.0  # no change, no restart


def test_the_window_during_a_restart_has_no_metrics():
    # A short restart, so that the 60 s window still holds fresh samples from before it.
    model = load_model("q1").model_copy(update={"reconfiguration": Reconfiguration(fixed_s=15)})
    twin = Twin(model)
    twin.advance(10)
    downtime = twin.apply({vid(model, "q1-map"): VertexConfig(4, None)})
    twin.advance(downtime / 2)
    assert twin.observe(downtime / 4).vertices == {}
    assert len(twin.observe(60).vertices) == 3


def test_noise_is_seeded():
    def busy(seed: int) -> float:
        twin = Twin(load_model("q5"), seed=seed)
        twin.advance(30)
        return twin.observe(30).vertices[vid(twin.model, "q5-window")].records_in_per_s

    assert busy(7) == busy(7)
    assert busy(7) != busy(8)


def test_load_patterns():
    model = load_model("q1")
    step = model.model_copy(update={"load": model.load.model_copy(
        update={"pattern": "step", "step_at_s": 100, "step_rate": 10.0})})
    assert step.load.rate_at(99) == 2_250_000 and step.load.rate_at(100) == 10.0
    square = model.model_copy(update={"load": model.load.model_copy(
        update={"pattern": "square", "period_s": 100, "low_rate": 5.0})})
    assert square.load.rate_at(10) == 2_250_000 and square.load.rate_at(60) == 5.0
    twin = Twin(square, configuration={vid(model, "q1-map"): VertexConfig(8, None)})
    twin.advance(100)
    assert twin.achieved_rate(40) == pytest.approx(5.0)


def test_key_skew_across_subtasks_makes_the_hottest_subtask_the_limit():
    model = load_model("q5")
    window = model.operator("q5-window")
    skewed = model.model_copy(update={"operators": tuple(
        o.model_copy(update={"subtask_skew": 1.0}) if o.uid == window.uid else o
        for o in model.operators)})
    config = {window.vertex_id: VertexConfig(8, 0)}
    even, hot = Twin(model, configuration=config), Twin(skewed, configuration=config)
    even.advance(30)
    hot.advance(30)
    m_even = even.observe(30).vertices[window.vertex_id]
    m_hot = hot.observe(30).vertices[window.vertex_id]
    assert m_hot.records_in_per_s < 0.6 * m_even.records_in_per_s
    assert m_hot.busy_ms_per_s_max > 990 and m_hot.busy_ms_per_s < 700


def test_resources_are_counted_as_in_the_paper():
    model = load_model("q1")
    map_, sink = vid(model, "q1-map"), vid(model, "q1-sink")
    twin = Twin(model, configuration={map_: VertexConfig(7, None), sink: VertexConfig(1, None)})
    cores, memory = paper_resources(model, twin.configuration)
    assert cores == 8  # sources excluded
    assert memory == pytest.approx(8 * (134 + 40))  # paper: 1,379 MB for Justin's Q1
    twin = Twin(model, configuration={map_: VertexConfig(7, 0)})
    assert paper_resources(model, twin.configuration)[1] == pytest.approx(8 * (134 + 40 + 158))


def test_an_invalid_configuration_changes_nothing():
    model = load_model("q3")
    twin = Twin(model)
    before = dict(twin.configuration)
    join, sink = vid(model, "q3-join"), vid(model, "q3-sink")
    with pytest.raises(ValueError, match=r"outside 1\.\.720"):
        twin.apply({sink: VertexConfig(1, None), join: VertexConfig(721, 0)})
    with pytest.raises(KeyError):
        twin.apply({"0" * 32: VertexConfig(1, 0)})
    assert dict(twin.configuration) == before and twin.restarts == 0 and twin.running


@settings(max_examples=40, deadline=None)
@given(
    job=st.sampled_from(["q1", "q3", "q8", "q11", "update"]),
    parallelism=st.integers(1, 40), level=st.sampled_from([None, 0, 1, 2]),
    skew=st.floats(0, 2), seconds=st.integers(1, 30),
)
def test_every_subtask_second_is_busy_backpressured_or_idle(job, parallelism, level, skew,
                                                            seconds):
    # Conservation of records, so without pauses (their stalls make the rate vary).
    model = load_model(job).model_copy(update={"noise": Noise.off()})
    op = next(o for o in model.operators if not o.is_source and not o.fixed_parallelism)
    model = model.model_copy(update={"operators": tuple(
        o.model_copy(update={"subtask_skew": skew}) if o.uid == op.uid else o
        for o in model.operators)})
    twin = Twin(model, seed=seconds,
                configuration={op.vertex_id: VertexConfig(parallelism, level)})
    twin.advance(seconds)
    tick = twin.last_tick()
    assert tick is not None and tick.running
    for sample in tick.vertices.values():
        for s in sample.subtasks:
            assert 0 <= s.busy <= 1000 and s.backpressured >= 0 and s.idle >= -1e-9
            assert s.busy + s.backpressured + s.idle == pytest.approx(1000)
    # Without a restart there is no lag to catch up on: sources produce at most the target,
    # and whatever they did not produce is lag.
    assert tick.source_rate <= model.load.rate * (1 + 1e-9)
    assert twin.lag() == pytest.approx((model.load.rate - tick.source_rate) * seconds, abs=1e-3)
    for vid, metrics in twin.observe(seconds).vertices.items():
        assert 0 <= metrics.busyness <= 1
        assert metrics.busy_ms_per_s_max >= metrics.busy_ms_per_s - 1e-9
        assert metrics.has_state_backend_metrics == (model.by_vertex()[vid].state is not None)


def only(**parts) -> Noise:
    return Noise.off().model_copy(update=parts)


def session_tpr(model: JobModel, seed: int, windows: int) -> list[float]:
    session = vid(model, "q11-session")
    twin = Twin(model, seed=seed, configuration={session: VertexConfig(24, 0)})
    out = []
    for _ in range(windows):
        twin.advance(120)
        out.append(twin.observe(120).vertices[session].true_processing_rate)
    return out


def test_the_busy_time_error_does_not_average_away():
    model = load_model("q11")
    exact = session_tpr(model.model_copy(update={"noise": Noise.off()}), 0, 1)[0]
    white = model.model_copy(update={"noise": only(sample_sd=0.02)})
    biased = model.model_copy(update={"noise": only(busy_bias_sd=0.05)})
    assert max(abs(x / exact - 1) for x in session_tpr(white, 1, 3)) < 0.01
    errors = [[x / exact - 1 for x in session_tpr(biased, seed, 3)] for seed in range(6)]
    assert max(abs(e[0]) for e in errors) > 0.03  # a whole window off by several percent
    for e in errors:  # and the next windows are off the same way (it drifts slowly)
        assert abs(e[1] - e[0]) < 0.5 * max(abs(e[0]), 0.01) + 0.02


def test_pauses_stall_a_vertex_and_build_lag():
    model = load_model("q1")
    map_ = vid(model, "q1-map")
    stalls = model.model_copy(update={"noise": only(pauses=Episodes(per_hour=360, mean_s=2))})
    calm = model.model_copy(update={"noise": Noise.off()})
    twins = [Twin(m, seed=1, configuration={map_: VertexConfig(8, None)}) for m in (calm, stalls)]
    for twin in twins:
        twin.advance(600)
    assert twins[0].lag() == 0
    observed = [t.observe(600).vertices[map_].busy_ms_per_s for t in twins]
    assert observed[1] > observed[0] + 50  # stalls count as busy time


def test_gaps_and_stale_series_leave_metrics_out():
    model = load_model("q3")
    gappy = model.model_copy(update={"noise": only(scrape_gaps=Episodes(per_hour=60, mean_s=60))})
    stale = model.model_copy(update={"noise": only(stale_series=Episodes(per_hour=60, mean_s=60))})
    seen = {"gaps": set(), "stale": set()}
    for name, m in (("gaps", gappy), ("stale", stale)):
        twin = Twin(m, seed=5)
        for _ in range(40):
            twin.advance(30)
            seen[name].add(len(twin.observe(30).vertices))
    assert 0 in seen["gaps"] and 5 in seen["gaps"]  # whole job missing, or all there
    assert any(0 < n < 5 for n in seen["stale"])  # single vertices missing


def test_hot_keys_stay_on_one_subtask():
    model = load_model("q5")
    window = vid(model, "q5-window")
    on = Twin(model, seed=0, configuration={window: VertexConfig(20, 0)})
    off = Twin(model.model_copy(update={"noise": Noise.off()}), seed=0,
               configuration={window: VertexConfig(20, 0)})
    assert max(off._shares(window)) == pytest.approx(1 / 20)
    assert max(on._shares(window)) > 1.5 / 20  # Zipf 0.8 over 10k auctions: a hot auction


def test_overheads_grow_with_parallelism():
    model = load_model("q1")  # stateless: no cache effect in the way
    map_ = vid(model, "q1-map")
    per_task = [Twin(model, configuration={map_: VertexConfig(p, None)}).cost(map_).capacity
                for p in (1, 8, 24)]
    assert per_task[0] > per_task[1] > per_task[2]
    linear = model.model_copy(update={"scaling": model.scaling.model_copy(
        update={"contention": 0.0, "buffer_us": 0.0})})
    assert Twin(linear, configuration={map_: VertexConfig(24, None)}).cost(map_).capacity \
        > per_task[2] * 1.1


def test_a_step_costs_what_the_same_enactment_cost_on_real_flink():
    """The twin's default reconfiguration is the controller's measured cost model."""
    model = load_model("update")
    twin = Twin(model)
    for kind in Enactment:
        assert twin.downtime_s(kind) == pytest.approx(
            expected_downtime_s(kind, model.state_bytes), abs=0.05)
    session = vid(model, "bench-update")
    assert twin.apply({session: VertexConfig(2, 0)}, kind=Enactment.IN_PLACE) == pytest.approx(
        MEASURED[Enactment.IN_PLACE].fixed_s)


def test_the_twin_composes_its_step_costs_as_the_policy_layer_does():
    """One restart-cost model: the twin's default is the policy layer's MEASURED, term for
    term, and a job's own terms go through the same composition (a last-state restart is
    killed and reads the checkpoint back)."""
    assert dict(Reconfiguration().costs()) == dict(MEASURED)
    own = Reconfiguration(fixed_s=10, savepoint_mb_per_s=20, restore_mb_per_s=40, kill_s=1,
                          in_place_s=2).costs()
    assert own[Enactment.SAVEPOINT].downtime_s(80e6) == pytest.approx(10 + 4 + 2)
    assert own[Enactment.LAST_STATE].downtime_s(80e6) == pytest.approx(11 + 2)
    assert own[Enactment.IN_PLACE].downtime_s(80e6) == pytest.approx(2)


def test_the_refill_rate_is_the_median_one_real_flink_showed():
    """rocksdb.fill_mib_per_s: per restore in bench/results/realflink-warmup.json, 95 % of
    the cache over the seconds until a sample first showed it 95 % full (docs/simulator.md's
    'refill rate, at least'); the model's default is their median."""
    doc = json.loads((Path(__file__).resolve().parents[2] / "bench" / "results"
                      / "realflink-warmup.json").read_text())
    rates = []
    for restore in doc["restores"]:
        full = next(s for s in restore["series"] if s["cacheCapacityBytes"] > 0
                    and s["cacheUsageBytes"] >= 0.95 * s["cacheCapacityBytes"])
        rates.append(0.95 * full["cacheCapacityBytes"] / 2**20 / full["t"])
    assert len(rates) == 3
    assert RocksDB().fill_mib_per_s == round(statistics.median(rates), 1)


def test_after_a_restart_the_block_cache_refills_and_the_hit_rate_climbs():
    """A restart empties the block caches (real Flink: bench/results/realflink-warmup.json);
    every miss loads a block until the cache is full, so θ and the true processing rate
    climb back to where they were, and a twin that was never restarted is warm."""
    model = load_model("statejob").model_copy(update={"noise": Noise.off()})
    counter = vid(model, "counter")
    twin = Twin(model, seed=4, configuration={counter: VertexConfig(1, 1)})
    assert twin.cache_fill(counter) == 1.0
    twin.advance(120)
    warm = twin.observe(60).vertices[counter]
    assert warm.cache_hit_rate is not None and warm.cache_hit_rate > 0.5

    downtime = twin.apply({}, restart=True)
    assert twin.cache_fill(counter) == 0.0
    twin.advance(downtime + 5)
    first = twin.observe(5).vertices[counter]
    assert first.cache_hit_rate is not None
    assert first.cache_hit_rate < warm.cache_hit_rate - 0.2
    rates, fills = [first.cache_hit_rate], [twin.cache_fill(counter)]
    while twin.cache_fill(counter) < 1.0 and len(rates) < 120:
        twin.advance(5)
        rates.append(twin.observe(5).vertices[counter].cache_hit_rate or 0.0)
        fills.append(twin.cache_fill(counter))
    assert fills == sorted(fills) and fills[-1] == 1.0
    assert rates[-1] == pytest.approx(warm.cache_hit_rate, abs=0.02)
    assert rates[len(rates) // 2] > rates[0]
    twin.advance(60)
    assert twin.observe(60).vertices[counter].true_processing_rate == pytest.approx(
        warm.true_processing_rate, rel=0.05)


def test_pods_short_of_cpu_throttle_every_task_and_it_shows_as_busy_time():
    """Kubernetes enforces the pods' CPU (limit = request): with half the cores its tasks
    want, every task runs at half speed, so the job processes half the load and its
    backlog grows; the vertex that saturates first is busy all the time (a task waiting
    for CPU is busy, not idle) and backpressures the source. Its true processing rate is
    what the CPU allows. Pods with the CPU the tasks want change nothing."""
    from simulator.results import cpu_used

    model = load_model("q11").model_copy(update={"noise": Noise.off()})
    session, source = vid(model, "q11-session"), vid(model, "q11-source")
    config = {session: VertexConfig(24, 0)}
    free, capped, roomy = (Twin(model, seed=2, configuration=config) for _ in range(3))
    want = cpu_used(model, free.configuration, 100_000)
    capped.cpu_budget, roomy.cpu_budget = want / 2, want * 1.01
    for twin in (free, capped, roomy):
        twin.advance(120)
    seen = {name: t.observe(60) for name, t in (("free", free), ("capped", capped),
                                                 ("roomy", roomy))}
    assert seen["roomy"] == seen["free"] and roomy.lag() == free.lag() == 0
    throttled = seen["capped"].vertices
    assert throttled[session].records_in_per_s == pytest.approx(50_000, rel=0.03)
    assert capped.lag() == pytest.approx(120 * 50_000, rel=0.05)
    assert throttled[session].busy_ms_per_s == pytest.approx(1000.0)
    assert throttled[source].backpressured_ms_per_s > 0
    assert throttled[session].true_processing_rate == pytest.approx(50_000, rel=0.03)
    # At half the load, the throttled tasks are busier than the free ones at all of it.
    assert sum(m.busy_ms_per_s for m in throttled.values()) > sum(
        m.busy_ms_per_s for m in seen["free"].vertices.values())


def test_the_twins_pods_throttle_at_their_cpu_limit_the_request_times_flinks_factor():
    """Flink limits a TaskManager's CPU at its request times kubernetes.taskmanager.cpu.
    limit-factor: the twin's pods give their tasks that much (an uncontended node lends
    CPU up to the limit), whether the loop's in-memory port or the served twin deploys
    them."""
    from controller.adapters.twin import TwinDeployments
    from controller.simulate import flink_deployment
    from simulator.serve import JOB_MODEL_KEY, TwinServer

    model = load_model("q11")
    deployment = flink_deployment(model, "q11", "ns")
    twin = Twin(model)
    port = TwinDeployments(twin, deployment)
    body = {"spec": {"flinkConfiguration": {CPU_LIMIT_FACTOR_KEY: "1.5"},
                     "taskManager": {"replicas": 3, "resource": {"cpu": 2.0}}}}
    port.apply("ns", "q11", body)
    assert twin.cpu_budget == pytest.approx(3 * 2.0 * 1.5)
    body["spec"]["flinkConfiguration"] = {CPU_LIMIT_FACTOR_KEY: "1"}
    port.apply("ns", "q11", body)
    assert twin.cpu_budget == pytest.approx(3 * 2.0)

    conf = {JOB_MODEL_KEY: "q11", "taskmanager.numberOfTaskSlots": "4"}
    tm = {"resource": {"cpu": 2.0, "memory": "4096m"}, "replicas": 2}
    with TwinServer(manual_clock=True) as server:
        server.add_job("ns", "plain", conf, tm)
        server.add_job("ns", "burst", {**conf, CPU_LIMIT_FACTOR_KEY: "2"}, tm)
        plain, burst = server.twin("ns", "plain"), server.twin("ns", "burst")
        assert plain.cpu_budget is not None and plain.cpu_budget > 0
        assert burst.cpu_budget == pytest.approx(2 * plain.cpu_budget)
        # A change of the factor alone is an upgrade too (the operator's is): new pods.
        restarted = server.reconfigure("ns", "plain", {**conf, CPU_LIMIT_FACTOR_KEY: "3"}, tm)
        assert restarted["state"] == "RESTARTING" and plain.restarts == 1
        assert plain.cpu_budget == pytest.approx(1.5 * burst.cpu_budget)


@pytest.mark.parametrize(("value", "factor"), [
    (None, 1.0), ("1.0", 1.0), ("2", 2.0), (1.5, 1.5), ("0.5", 1.0), ("-3", 1.0),
    ("inf", 1.0), ("nan", 1.0), ("two", 1.0), ([], 1.0)])
def test_the_cpu_limit_factor_is_flinks_or_its_default(value: object, factor: float) -> None:
    """What Flink would refuse (below 1, not a finite number) reads as its default, 1."""
    conf = {} if value is None else {CPU_LIMIT_FACTOR_KEY: value}
    assert cpu_limit_factor(conf) == factor
