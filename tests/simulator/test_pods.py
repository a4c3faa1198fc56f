"""A twin's configuration in pods (simulator/pods.py): the controller's bill
(policies.bill.PodBill) with the shape and proof, in the JSON bench/results/*.json hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packer.pricing import PAPER_SHAPE, Prices
from policies.bill import PodBill
from policies.model import VertexConfig
from simulator import pods
from simulator.model import load_model
from simulator.results import busy_cores, capacity, cpu_used
from simulator.twin import Twin

ROOT = Path(__file__).resolve().parents[2]


def test_upstream_is_ceil_of_the_widest_vertex_over_four_slots_of_the_paper_shape():
    model = load_model("q1")
    configuration = {vid: VertexConfig(6 if n == 0 else 2, c.memory_level)
                     for n, (vid, c) in enumerate(model.job_graph().configuration().items())}
    realized = pods.upstream(configuration, Prices(cpu_core=2.0, memory_gib=1.0))
    assert realized.pods == PodBill(2, 8.0, 4096.0, 8 * 2.0 + 4 * 1.0)
    assert realized.as_json() == {"pod_cpu": 8.0, "pod_memory_mb": 4096, "price": 20.0,
                                  "replicas": 2, "shape": PAPER_SHAPE.name, "proven": None}


def test_ours_bills_what_the_planner_priced():
    model = load_model("statejob")
    configuration = model.job_graph().configuration()
    priced = pods.pricing().exact(model.job_graph(), configuration)
    assert priced is not None
    realized = pods.ours(model, configuration)
    assert realized.pods == priced.bill
    assert (realized.shape, realized.proven) == (priced.shape.name, priced.proven)


def test_the_json_is_what_the_bench_results_hold():
    suite = json.loads((ROOT / "bench" / "results" / "suite.json").read_text())
    written = suite["runs"][0]["pods"]
    model = load_model("q1")
    assert set(pods.ours(model, model.job_graph().configuration()).as_json()) == set(written)


def test_busy_cores_are_the_busy_time_of_the_twins_tasks_at_that_rate():
    # q3 on RocksDB (ForSt's busy time shows the task thread only): a source, two filters
    # passing a tenth, a stateful join, a sink; three tasks a vertex (the sink fixed at
    # one), at 40 % of what that sustains: every task below saturation, each vertex
    # loaded by what its inputs pass on.
    base = load_model("q3")
    ops = base.by_vertex()
    configuration = {vid: VertexConfig(1 if ops[vid].fixed_parallelism else 3, c.memory_level)
                     for vid, c in base.job_graph().configuration().items()}
    rate = 0.4 * capacity(base, configuration)
    model = base.model_copy(update={"load": base.load.model_copy(
        update={"pattern": "constant", "rate": rate})})
    twin = Twin(model, configuration=configuration)
    twin.advance(60.0)
    tick = twin.last_tick()
    assert tick is not None and tick.running
    cores = busy_cores(model, configuration, rate)
    measured = {vid: sum(s.busy for s in v.subtasks) / 1000.0
                for vid, v in tick.vertices.items()}
    assert sum(1 for c in cores.values() if c > 0.01) >= 4  # not one vertex doing it all
    assert cores == pytest.approx({vid: measured[vid] for vid in cores}, rel=0.02)
    assert cpu_used(model, configuration, rate) == pytest.approx(sum(measured.values()),
                                                                  rel=0.02)


def test_the_bill_oracle_prices_each_segment_at_the_utilization_it_is_given():
    """A constant load: one pod oracle, billed for the hours; the utilization asked for
    each segment's target is the one priced; a segment out of reach makes it None."""
    model = load_model("q1")
    asked: list[float] = []

    def half(target: float) -> float:
        asked.append(target)
        return 0.5

    price = pods.pod_oracle(model, model.target_at(0.0), utilization=0.5,
                            horizon_s=1800.0).bill.pods.price
    assert pods.bill_oracle(model, 1800.0, half) == pytest.approx(price * 0.5)
    assert asked == [round(model.target_at(0.0), 6)]  # one target, priced once
    busier = pods.pod_oracle(model, model.target_at(0.0), utilization=0.9,
                             horizon_s=1800.0).bill.pods.price
    assert busier < price
    assert pods.bill_oracle(model, 1800.0, lambda _: 0.9) == pytest.approx(busier * 0.5)
    assert pods.bill_oracle(model, 1800.0, lambda _: None) is None
