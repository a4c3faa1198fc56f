"""bench.peer's table: the pod oracle's row carries its bill over the same hours, beside
the autoscalers' bills, and its ratio to upstream's."""

from __future__ import annotations

from bench.peer.__main__ import UPSTREAM, table


def row(bill: float | None, price: float, steps: int = 1) -> dict:
    return {"steps": steps, "steps_to_target": steps, "converged_at_s": 600.0,
            "peak_lag": 10.0, "cpu_cores": 4.0, "memory_mb": 1024.0, "final": "x",
            "pods": {"pod_cpu": 4.0, "pod_memory_mb": 2048, "price": price},
            "pod_bill": bill}


def test_the_pod_oracles_bill_is_shown_and_compared_with_upstreams() -> None:
    oracle = {**row(20.0, 4.0), "steps": 0, "steps_to_target": None, "converged_at_s": None,
              "peak_lag": None}
    report = {"jobs": {"q8": {UPSTREAM: row(80.0, 16.0), "capacity": row(30.0, 5.0),
                              "oracle": {**row(None, 3.0), "pod_bill": None},
                              "pod oracle": oracle}}}
    lines = {line.split("|")[2].strip(): line for line in table(report).splitlines()[2:]}
    cells = [c.strip() for c in lines["pod oracle"].split("|")]
    assert cells[10] == "20.0"  # the bill column
    assert cells[-2].split(" / ")[7] == "0.25"  # its bill against upstream's
    assert [c.strip() for c in lines["oracle"].split("|")][10] == "-"  # no bill of its own
    assert [c.strip() for c in lines["capacity"].split("|")][-2].split(" / ")[7] == "0.38"
