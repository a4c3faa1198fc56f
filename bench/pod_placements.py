"""The pods each policy's run ends on, as the controller wrote them (issue 20's table).

    .venv/bin/python -m bench.pod_placements

The controller's own pass over the twin for 25 virtual minutes, seed 0, spec defaults
(`controller.simulate.closed_loop_policy`); read from the FlinkDeployment at the end:
`spec.taskManager.resource` × `replicas`, priced at spec.cost's defaults. "upstream" is
the real flink-autoscaler's final parallelism from bench/results/peer.json, run the way
Flink runs it: the default slot sharing group on ceil(max p / 4) paper TaskManagers.
"""

from __future__ import annotations

import json
from pathlib import Path

from controller.adapters.twin import flink_deployment, twin_ports
from controller.api import Status
from controller.loop import reconcile
from controller.realize import parse_memory_mib
from controller.simulate import closed_loop_policy
from packer.pricing import PAPER_SHAPE, Prices, upstream_pods
from simulator.model import load_model
from simulator.results import GRANULARITY_S, STABILIZATION_S, PolicyName
from simulator.twin import Twin

JOBS = ("q11", "q8", "q3", "q1")
DURATION_S = 1500.0
PEER = Path(__file__).resolve().parent / "results" / "peer.json"


def pods_after(job: str, policy: PolicyName) -> str:
    model = load_model(job)
    twin = Twin(model, seed=0)
    ports, deployments, _ = twin_ports(twin, flink_deployment(model, "job", "simulate"),
                                    job_started_s=-STABILIZATION_S)
    hsp = closed_loop_policy(model, policy)
    status = Status()
    while twin.time + 1e-9 < DURATION_S:
        twin.advance(GRANULARITY_S)
        status = reconcile(hsp, 1, status, ports).status
    tm = deployments.deployment["spec"]["taskManager"]
    n, cpu = int(tm["replicas"]), float(tm["resource"]["cpu"])
    mib = float(parse_memory_mib(tm["resource"]["memory"]) or 0)
    return _cell(n, cpu, mib)


def _cell(n: int, cpu: float, mib: float) -> str:
    price = Prices().of(n * cpu, n * mib)
    return (f"{n} × ({cpu:g} cores, {mib:.0f} MiB) = {n * cpu:g} cores, "
            f"{n * mib / 1024:.1f} GiB, {price:.2f}/h")


def main() -> None:
    peer = json.loads(PEER.read_text())["jobs"] if PEER.exists() else {}
    print("| job | capacity (default) | DS2 (ours) | Justin | upstream |")
    print("|---|---|---|---|---|")
    for job in JOBS:
        policies: tuple[PolicyName, ...] = ("capacity", "ds2", "justin")
        cells = [pods_after(job, p) for p in policies]
        up = peer.get(job, {}).get("flink-autoscaler")
        if up is not None:
            pods = upstream_pods([v["parallelism"] for v in up["configuration"].values()])
            cells.append(_cell(pods.task_managers, PAPER_SHAPE.cpu_cores,
                               PAPER_SHAPE.process_mib))
        else:
            cells.append("-")
        print(f"| {job} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
