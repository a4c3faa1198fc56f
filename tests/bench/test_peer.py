"""The real flink-autoscaler (bench/peer, unmodified library) against the twin's REST API.

Issue 12's acceptance: it runs with no adapter and scales q11 to the target. Lockstep clock,
shortened windows (3 min, 1 min stabilization) so it takes tens of seconds, not 20 minutes.
"""

from __future__ import annotations

import pytest

from bench.peer.__main__ import run_upstream
from simulator import pods
from simulator.model import load_model
from simulator.results import capacity

pytestmark = pytest.mark.slow


def test_upstream_scales_q11_to_the_target_through_the_rescale_api():
    results, events = run_upstream(
        # 720 s: the step at 240 s costs q11 (1 GB of state) ~89 s of downtime in the
        # twin since it charges measured restart costs, and the catch-up follows.
        ["q11"], time_scale=None, duration_s=720.0, interval_s=60.0, seed=0, defaults=False,
        window="3m", stabilization="1m", log=None)
    errors = [e for e in events if e.get("type") in ("Warning", "Error")]
    assert not errors, errors
    q11 = results["q11"]
    model = load_model("q11")
    session = model.operator("q11-session").vertex_id
    sink = model.operator("q11-sink").vertex_id
    # One decision, when stabilization (1 min) and a full window (3 min) are behind it,
    # realized in place: the same job, the session window scaled out, the sink excluded.
    assert [s.time for s in q11.steps] == [240.0]
    reports = [e for e in events if e["reason"] == "ScalingReport"]
    assert len(reports) == 1 and session in reports[0]["message"]
    assert any(e["reason"] == "Scaling" for e in events)
    assert q11.final[session].parallelism > 1
    assert q11.final[sink].parallelism == 1
    assert capacity(model, q11.final) >= model.load.rate
    assert q11.converged and q11.steps_to_target == 1
    # Billed as Flink runs it: one paper TaskManager until the rescale, then
    # ceil(max p / 4) of them, from the rescale to the end.
    before = pods.upstream(model.job_graph().configuration()).pods.price
    after = pods.upstream(q11.final).pods.price
    assert q11.bill == [(0.0, before), (240.0, after)] and after > before
    assert q11.pod_bill() == pytest.approx((before * 240 + after * 480) / 3600)
