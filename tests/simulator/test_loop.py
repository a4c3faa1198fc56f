"""The closed loop with the real policies, and the oracle."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from controller.cli import app
from controller.simulate import PAPER_CATCH_UP_S, closed_loop_policy, note_skew, run
from policies.model import VertexConfig
from policies.spec import CpuScaling
from simulator import pods
from simulator.model import load_model
from simulator.results import RunResult, capacity, cpu_used, finish, oracle
from simulator.twin import Twin


@pytest.fixture(scope="module")
def q11():
    model = load_model("q11")
    # 35 minutes: the scale-ins after the scale-down delay (~1130 s, ~1700 s) need a full
    # window after them before a run counts as converged.
    return model, run(model, "justin", 2100, seed=0), run(model, "ds2", 2100, seed=0)


def test_justin_scales_the_session_window_up_first_and_strips_stateless_memory(q11):
    model, justin, _ = q11
    first = justin.steps[0].configuration
    session, sink = model.operator("q11-session"), model.operator("q11-sink")
    assert first[session.vertex_id] == VertexConfig(1, 1)  # scale-up instead of scale-out
    assert first[sink.vertex_id].memory_level is None  # Algorithm 1 line 4


def test_ds2_only_scales_out(q11):
    _, _, ds2 = q11
    assert all(vc.memory_level == 0 for s in ds2.steps for vc in s.configuration.values())
    assert ds2.steps[0].configuration != ds2.steps[-1].configuration


def test_both_reach_the_target_and_justin_uses_less_cpu(q11):
    # Not less memory, nor fewer steps: Justin's two scale-ups come first, and its
    # scale-out from one task (capped by the max scale-up factor) lands inside the
    # band at 632 MB per task, so DS2 (which triggers as flink-autoscaler does) never
    # trims it (docs/simulator.md, Results).
    model, justin, ds2 = q11
    for result in (justin, ds2):
        assert result.capacity >= model.load.rate
        assert result.achieved_rate == model.load.rate
    assert justin.converged and ds2.converged
    assert justin.cpu_cores < ds2.cpu_cores
    assert justin.steps_to_target is not None and ds2.steps_to_target is not None


def test_the_trajectory_shows_the_downtime_and_the_target(q11):
    _, justin, _ = q11
    assert len(justin.samples) == 2100 // 5
    assert {s.target_rate for s in justin.samples} == {100_000}
    down = [s for s in justin.samples if not s.running]
    assert down and min(s.rate for s in down) == 0
    assert max(s.rate for s in justin.samples) > 100_000  # catching up after a restart


def test_the_bill_is_the_deployments_pods_from_each_step_on(q11):
    """What the cluster bills: the pods the FlinkDeployment requests, priced from each
    apply on. It starts on one paper TaskManager and ends on the pods last placed."""
    model, justin, _ = q11
    first = pods.upstream(model.job_graph().configuration()).pods.price  # 1 × 4 cores, 2 GiB
    assert justin.bill[0] == (0.0, pytest.approx(first))
    assert justin.bill[-1][1] == pytest.approx(pods.placed(justin).pods.price, abs=1e-3)
    # One point a change, each when the pass wrote the pods (a step's time).
    assert len(justin.bill) >= 2 and all(
        a[1] != b[1] for a, b in zip(justin.bill, justin.bill[1:], strict=False))
    assert {t for t, _ in justin.bill[1:]} <= {s.time for s in justin.steps}
    hours = justin.samples[-1].time / 3600
    prices = [p for _, p in justin.bill]
    assert min(prices) * hours < justin.pod_bill() < max(prices) * hours
    assert justin.as_json()["pod_bill"] == pytest.approx(justin.pod_bill(), abs=1e-3)


def test_the_bill_integrates_the_price_over_time():
    result = RunResult("ds2", load_model("q1"))
    result.bill_at(0.0, 10.0)
    result.bill_at(600.0, 10.0)  # no change, no point
    result.bill_at(1800.0, 30.0)
    assert result.bill == [(0.0, 10.0), (1800.0, 30.0)]
    assert result.pod_bill(3600.0) == pytest.approx(10.0 * 0.5 + 30.0 * 0.5)
    assert result.pod_bill(900.0) == pytest.approx(10.0 * 0.25)
    assert RunResult("ds2", load_model("q1")).pod_bill() is None


@pytest.mark.parametrize("job", ["q1", "q3", "q11"])
def test_the_oracle_is_cheapest_and_sustains_the_target(job):
    model = load_model(job)
    best = oracle(model)
    assert best.feasible and best.capacity >= model.load.rate
    for op in model.operators:
        if op.fixed_parallelism:
            continue
        vc = best.configuration[op.vertex_id]
        if op.state is None:
            assert vc.memory_level is None
        if vc.parallelism > 1:  # one task fewer, at any memory level, falls short
            for level in ([None] if op.state is None else [0, 1, 2]):
                fewer = dict(best.configuration)
                fewer[op.vertex_id] = VertexConfig(vc.parallelism - 1, level)
                assert capacity(model, fewer) < model.load.rate, (op.uid, level)


def test_no_policy_beats_the_oracle(q11):
    model, justin, ds2 = q11
    best = oracle(model)
    for result in (justin, ds2):
        assert result.cpu_cores >= best.cpu_cores
        assert (result.cpu_cores, result.memory_mib) >= (best.cpu_cores, best.memory_mib)


def test_oracle_reports_an_unreachable_target():
    model = load_model("update")
    assert not oracle(model, target_rate=10_000_000).feasible


def test_simulate_json_has_the_documented_shape(tmp_path):
    out = CliRunner().invoke(app, ["simulate", "--job", "q3", "--json", "--duration", "10m"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert set(doc) == {"job", "target_rate", "policies"}
    assert doc["job"] == "q3" and doc["target_rate"] == 1_000_000
    # The default runs every policy, the default one (capacity) included.
    assert set(doc["policies"]) == {"capacity", "justin", "ds2", "oracle", "oracle_at_target"}
    at_target, limit = doc["policies"]["oracle_at_target"], doc["policies"]["oracle"]
    assert (at_target["utilization"], limit["utilization"]) == (0.5, 1.0)
    assert at_target["cpu_cores"] > limit["cpu_cores"]
    for entry in doc["policies"].values():
        assert {"steps", "converged", "converged_at_s", "achieved_rate", "cpu_cores",
                "memory_mb", "trajectory"} <= set(entry)
    assert doc["policies"]["justin"]["trajectory"][-1]["t"] == 600


def test_simulate_prints_steps_and_a_table_and_plots(tmp_path):
    png = tmp_path / "fig.png"
    out = CliRunner().invoke(app, ["simulate", "--job", "q11", "--policy", "justin",
                                   "--plot", str(png), "--seed", "3"])
    assert out.exit_code == 0, out.output
    assert "step 1 at" in out.stdout and "q11-session (1;316)" in out.stdout
    assert "oracle" in out.stdout and "ds2" not in out.stdout.split("policy")[-1]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_simulate_explains_bad_input(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nload: {rate: 1}\noperators: []\n")
    out = CliRunner().invoke(app, ["simulate", "--job", str(bad)])
    assert out.exit_code == 2 and "operators" in out.output
    out = CliRunner().invoke(app, ["simulate", "--job", "q1", "--policy", "magic"])
    assert out.exit_code == 2


@pytest.mark.parametrize("policy,runs", [("capacity", {"capacity"}), ("ds2", {"ds2"}),
                                         ("justin", {"justin"}), ("both", {"justin", "ds2"}),
                                         ("all", {"capacity", "justin", "ds2"})])
def test_simulate_runs_each_policy_including_the_default(policy, runs):
    out = CliRunner().invoke(app, ["simulate", "--job", "q1", "--policy", policy, "--json",
                                   "--duration", "4m"])
    assert out.exit_code == 0, out.output
    assert set(json.loads(out.stdout)["policies"]) == runs | {"oracle", "oracle_at_target"}


@pytest.mark.parametrize("policy", ["justin", "ds2"])
def test_the_same_seed_gives_the_same_run(policy):
    model = load_model("q8")
    first, again = (run(model, policy, 1200, seed=4) for _ in range(2))
    assert first.steps and first.as_json() == again.as_json()
    assert first.steps == again.steps  # times, configurations and the policy's reasons


def test_a_load_step_the_policy_has_not_met_undoes_convergence():
    model = load_model("q1")
    steady = run(model, "justin", 1200)
    late_step = model.model_copy(update={"load": model.load.model_copy(
        update={"pattern": "step", "step_at_s": 1150, "step_rate": 2 * model.load.rate})})
    stepped = run(late_step, "justin", 1200)
    assert steady.converged and steady.steps == stepped.steps  # same path until 1150 s
    assert capacity(late_step, stepped.final) < late_step.load.rate_at(1200)
    assert not stepped.converged and stepped.steps_to_target is None


def test_a_configuration_applied_in_the_last_window_is_not_converged():
    model = load_model("q1")
    finished = run(model, "justin", 1200)
    assert finished.converged
    first = finished.steps[0].time
    cut = run(model, "justin", first + 60)  # the first step ran for less than a window
    assert cut.steps and not cut.converged and cut.converged_at_s is None


def _finished_again(result: RunResult, cpu_budget: float | None) -> Twin:
    """A twin where `result`'s run ended: its final configuration, at its end, on pods
    that let the tasks use `cpu_budget` cores."""
    twin = Twin(result.model, configuration=result.final)
    twin.advance(result.samples[-1].time)
    twin.cpu_budget = cpu_budget
    return twin


def test_a_late_step_that_still_sustains_the_target_keeps_the_convergence():
    """A scale-in in the last window that sustains the target does not undo convergence,
    however little it has run: only a run whose first sustaining configuration is that
    fresh has not converged."""
    model = load_model("q1")
    finished = run(model, "justin", 1200)
    assert finished.converged and finished.steps_to_target is not None
    converged = (finished.converged_at_s, finished.steps_to_target)
    end = finished.samples[-1].time
    finished.steps.append(replace(finished.steps[-1], time=end - 20.0, downtime_s=5.0))
    finish(finished, _finished_again(finished, None))
    assert finished.converged and (finished.converged_at_s, finished.steps_to_target) == converged


def test_a_configuration_its_pods_cannot_feed_does_not_sustain_the_target():
    """Convergence counts the CPU the pods gave each configuration: the same last
    configuration on pods with half the cores its tasks use at the target has not."""
    model = load_model("q1")
    finished = run(model, "justin", 1200)
    assert finished.converged
    need = cpu_used(model, finished.final, model.load.rate_at(1200))
    finish(finished, _finished_again(finished, 2 * need))
    assert finished.converged
    finish(finished, _finished_again(finished, need / 2))
    assert not finished.converged and finished.steps_to_target is None


def test_the_oracle_sizes_for_the_peak():
    model = load_model("q1")
    peaked = model.model_copy(update={"load": model.load.model_validate(
        {"pattern": "phases", "phases": [{"rate": 1_000_000, "duration_s": 600},
                                         {"rate": 2_000_000, "duration_s": 60},
                                         {"rate": 1_000_000, "duration_s": 600}]})})
    best = oracle(peaked, horizon_s=1200)
    assert best.target_rate == 2_000_000 and best.capacity >= 2_000_000
    assert oracle(peaked, horizon_s=500).target_rate == 1_000_000


def test_phases_report_time_to_target_restarts_and_backlog():
    model = load_model("q1")
    moving = model.model_copy(update={"load": model.load.model_validate(
        {"pattern": "phases", "phases": [{"rate": 1_000_000, "duration_s": 600},
                                         {"ramp_to": 3_000_000, "duration_s": 300},
                                         {"rate": 3_000_000, "duration_s": 900}]})})
    result = run(moving, "ds2", 1800)
    phases = result.phases
    assert [(p.start_s, p.end_s, p.steady) for p in phases] == [
        (0, 600, True), (600, 900, False), (900, 1800, True)]
    assert sum(p.restarts for p in phases) == len(result.steps)
    first = phases[0]
    assert first.time_to_target_s is not None and first.time_to_target_s > 120  # one window
    assert first.peak_lag > 0 and first.peak_target == 1_000_000
    assert phases[2].peak_target == 3_000_000
    doc = result.as_json()
    assert doc["phases"][0]["restarts_per_hour"] == pytest.approx(6 * first.restarts)
    assert doc["steady_restarts_per_hour"] == pytest.approx(
        3600 * (phases[0].restarts + phases[2].restarts) / 1500)


def test_simulate_runs_a_suite_over_seeds(tmp_path):
    (tmp_path / "suite.yaml").write_text("jobs: [q1, ./models/mine.yaml]\n")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mine.yaml").write_text(
        "name: mine\nload: {rate: 100000}\noperators:\n"
        "  - {uid: s, name: S, cpu_us: 0.2}\n"
        "  - {uid: m, name: M, cpu_us: 40, inputs: [{from: s, ship: REBALANCE}]}\n")
    out = CliRunner().invoke(app, ["simulate", "--jobs", str(tmp_path / "suite.yaml"),
                                   "--seeds", "2", "--duration", "6m", "--policy", "ds2",
                                   "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["seeds"] == [0, 1] and [r["job"] for r in doc["rows"]] == ["q1", "mine"]
    assert all(len(r["cpu_cores"]) == 2 for r in doc["rows"])
    table = CliRunner().invoke(app, ["simulate", "--jobs", str(tmp_path / "models"),
                                     "--duration", "4m",
                                     "--policy", "justin"])
    assert table.exit_code == 0, table.output
    assert "| mine | justin |" in table.stdout and "| q1 |" not in table.stdout  # dir: *.yaml


def test_a_suite_reports_every_bad_model(tmp_path):
    (tmp_path / "a.yaml").write_text("name: a\nload: {rate: 1}\noperators: []\n")
    (tmp_path / "b.yaml").write_text("name: b\nload: {pattern: step, rate: 1}\n"
                                     "operators: [{uid: s, name: S, cpu_us: 1}]\n")
    out = CliRunner().invoke(app, ["simulate", "--jobs", str(tmp_path)])
    assert out.exit_code == 2
    assert "a.yaml" in out.output and "b.yaml" in out.output and "step_rate" in out.output
    assert CliRunner().invoke(app, ["simulate"]).exit_code == 2


def test_the_first_time_a_decision_names_a_vertex_skewed_is_kept():
    result = RunResult("capacity", load_model("q11"))
    hot = SimpleNamespace(vertex_id="a")
    note_skew(result, SimpleNamespace(skew=()), 100.0)
    note_skew(result, SimpleNamespace(skew=(hot,)), 240.0)
    note_skew(result, SimpleNamespace(skew=(hot, SimpleNamespace(vertex_id="b"))), 360.0)
    note_skew(result, None, 600.0)  # no decision yet
    assert result.skew_named == {"a": 240.0, "b": 360.0}


def test_simulate_sizes_no_catch_up_as_the_paper_unless_asked_for_the_specs_default() -> None:
    # The suite's tables are the paper's setup; the peer benches run the spec's default,
    # which is upstream's own catch-up.duration (30 min), so both sides size for it.
    model = load_model("q11")
    paper = closed_loop_policy(model, "capacity")
    spec = closed_loop_policy(model, "capacity", catch_up_duration=None)
    assert paper.spec.cpu.catch_up_duration == PAPER_CATCH_UP_S == 0.0
    assert spec.spec.cpu.catch_up_duration == CpuScaling().catch_up_duration == 1800.0
    assert paper.spec.cpu.overrides == spec.spec.cpu.overrides  # the sink stays pinned
