"""One pass of the loop for one policy: gate → collect → decide → place → realize → record.

Each stage is a function in the file of its name; they talk to the world only
through the ports (controller/ports.py): the real adapters in the operator, the
twin's in-memory ones in `hybrid-scaler simulate`, fakes in the unit tests. A
stage that ends the pass early raises `Stop`; realize and record run on every pass.

Crash safety. `decide.commit` saves the step (decision, history, placement, the
desired owned fields as `status.target`, Scaling=Reconfiguring) *before*
`realize` patches the FlinkDeployment, and `record` marks it applied
(Scaling=Stabilizing) after. Every Active pass applies the target where the
deployment differs, so a controller killed in between finishes the step on its
next pass, never decides it again (the waiting rule counts from the commit), and
applying twice changes nothing.
"""

from __future__ import annotations

import time

from controller import telemetry
from controller.api import HybridScalingPolicy, Status
from controller.collect import collect
from controller.decide import commit, decide
from controller.gate import gate
from controller.place import place
from controller.ports import Ports
from controller.realize import realize
from controller.record import Pass, Run, Stop, record


def reconcile(policy: HybridScalingPolicy, generation: int | None, status: Status,
              ports: Ports) -> Pass:
    started = time.perf_counter()
    run = Run(policy, generation, status, ports)
    try:
        try:
            seen = gate(run)  # mode, FlinkDeployment, job, waiting rule
            graph, collected = collect(run, seen)  # job graph, one metrics window
            evaluation = decide(run, graph, collected)  # DS2 then Justin
            placed = place(run, graph, evaluation)  # TaskManagers; Recommend stops here
            commit(run, graph, collected, evaluation, placed)  # status.target, saved
        except Stop as stop:
            run.outcome = stop.outcome
        return record(run, realize(run))  # target onto the deployment; Events, status
    finally:
        telemetry.RECONCILE_SECONDS.observe(time.perf_counter() - started)
