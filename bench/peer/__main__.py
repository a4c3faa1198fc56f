"""The real Flink autoscaler against the twin, side by side with our policies, in one run.

    .venv/bin/python -m bench.peer                     # q1 q3 q8 q11, 5 h of virtual time
    .venv/bin/python -m bench.peer --jobs q11 --time-scale 1 --duration 20m \\
        --window 3m --stabilization 1m                 # a slow run, to check the fast one

Upstream (`org.apache.flink:flink-autoscaler`, unmodified; see README.md) runs as the
standalone autoscaler would: every `--interval` it lists each cluster's jobs over Flink's
REST API, collects metrics with its RestApiMetricsCollector and rescales in place through
`PUT /jobs/<jid>/resource-requirements`. The cluster is `TwinServer`: one Flink 1.20 REST
endpoint per job, the adaptive scheduler, the twin's clock `--time-scale` times faster than
the wall clock, and upstream's clock follows it. Our side runs `simulate`'s closed loop
(`controller.simulate.run`, the controller's pass) on the same job models for the same
virtual time: DS2, Justin (DS2 + memory scaling) and capacity (the default: a learned
capacity surface, planned by cost); the oracle is the physical limit, not a policy.
Every row is measured the same way (`simulator.results`' definitions): reconfigurations,
time to target, final configuration, cores and memory as the paper counts them, the pods
(final price, and the bill over the run: `RunResult.pod_bill`), peak lag.
Writes bench/results/peer.json; `--update-doc` rewrites the table in docs/simulator.md and
README.md.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.jobgen import utilization_at_target
from bench.peer import build, peer_command
from controller.simulate import PAPER_CATCH_UP_S, run
from policies.spec import parse_duration
from simulator import pods
from simulator.cli import describe
from simulator.model import JobModel, load_model
from simulator.results import (
    GRANULARITY_S,
    RunResult,
    Sample,
    Step,
    capacity,
    finish,
    oracle,
)
from simulator.serve import JOB_MODEL_KEY, SCHEDULER_KEY, SLOTS_KEY, TwinServer
from simulator.twin import Twin, paper_resources

JOBS = ("q1", "q3", "q8", "q11")
NAMESPACE = "peer"
ROOT = Path(__file__).resolve().parent.parent.parent
RESULTS = ROOT / "bench" / "results" / "peer.json"
DOC = ROOT / "docs" / "simulator.md"
README = DOC.parents[1] / "README.md"  # the same table, beside our own results
BEGIN, END = "<!-- peer:begin -->", "<!-- peer:end -->"
TASK_MANAGER = {"resource": {"cpu": 4, "memory": "2048m"}, "replicas": 1}

UPSTREAM = "flink-autoscaler"  # the peer: the Flink Kubernetes Operator's autoscaler


def upstream_options(model: JobModel, *, defaults: bool, window: str | None,
                     stabilization: str | None) -> dict[str, str]:
    """The job's job.autoscaler.* settings (flink-autoscaler 1.10.0 keys).

    Not `defaults`: the issue's configuration, target utilization 0.5 within [0.2, 0.8]
    and the pinned sinks excluded (our policies pin them too)."""
    options = {"job.autoscaler.enabled": "true"}
    if not defaults:
        options["job.autoscaler.target.utilization"] = "0.5"
        options["job.autoscaler.target.utilization.boundary"] = "0.3"
        pinned = [op.vertex_id for op in model.operators if op.fixed_parallelism]
        if pinned:
            options["job.autoscaler.vertex.exclude.ids"] = ";".join(pinned)
    if window:
        options["job.autoscaler.metrics.window"] = window
    if stabilization:
        options["job.autoscaler.stabilization.interval"] = stabilization
    return options


@dataclass
class Watch:
    """What the bench sees of one hosted job: samples and the reconfigurations upstream made."""

    model: JobModel
    twin: Twin
    result: RunResult
    restarts: int = 0
    rate_window: list[tuple[float, float]] = field(default_factory=list)


def run_upstream(jobs: list[str], *, time_scale: float | None, duration_s: float,
                 interval_s: float, seed: int, defaults: bool, window: str | None,
                 stabilization: str | None, log: Any) -> tuple[dict[str, RunResult],
                                                              list[dict[str, Any]]]:
    """All jobs in one TwinServer (one REST endpoint each), one upstream autoscaler for all.

    `time_scale` None: lockstep. The twins' clock is manual; the bench advances it and, every
    `interval_s`, has upstream run one control loop with its clock set to the twins' time,
    while they wait. Otherwise both clocks follow the wall clock, `time_scale` times faster."""
    build()
    events: list[dict[str, Any]] = []
    lockstep = time_scale is None
    with TwinServer(seed=seed, time_scale=time_scale or 1.0, manual_clock=lockstep) as server:
        warmup = None
        if not lockstep:
            # A throw-away deployment first: the JVM loads and JITs upstream's classes on
            # it, so the measured jobs start when upstream's first control loop does.
            server.add_job("warmup", "q1", {JOB_MODEL_KEY: "q1", SLOTS_KEY: "4",
                                            SCHEDULER_KEY: "adaptive"}, TASK_MANAGER)
            warmup = server.rest_url("warmup", "q1")
        watches: dict[str, Watch] = {}
        urls: dict[str, str] = {}

        def add_jobs() -> None:
            for name in jobs:
                model = load_model(name)
                conf = {JOB_MODEL_KEY: name, SLOTS_KEY: "4", SCHEDULER_KEY: "adaptive",
                        **upstream_options(model, defaults=defaults, window=window,
                                           stabilization=stabilization)}
                server.add_job(NAMESPACE, name, conf, TASK_MANAGER)
                urls[server.rest_url(NAMESPACE, name)] = name
                watches[name] = Watch(model, server.twin(NAMESPACE, name),
                                      RunResult(UPSTREAM, model))

        if lockstep:
            add_jobs()
        command = peer_command(list(urls) if lockstep else [], time_scale=time_scale or 0.0,
                               clock_anchor_ms=server.clock_anchor_ms, interval_s=interval_s,
                               duration_s=duration_s, options={}, warmup_url=warmup,
                               lockstep=lockstep)
        java = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)
        assert java.stdin is not None and java.stdout is not None
        try:
            if lockstep:
                _lockstep(server, java, watches, urls, duration_s, interval_s, events, log)
            else:
                ready = java.stdout.readline()
                if '"ready"' not in ready:
                    raise RuntimeError(f"upstream peer did not start: {ready!r}")
                server.remove_job("warmup", "q1")
                add_jobs()
                java.stdin.write("".join(f"{url}\n" for url in urls) + "\n")
                java.stdin.flush()
                reader = threading.Thread(target=_read_events, daemon=True,
                                          args=(java.stdout, urls, server, events, log, None))
                reader.start()
                while True:
                    with server._lock:  # a consistent view of every twin
                        times = [_observe(w) for w in watches.values()]
                    if min(times) >= duration_s or java.poll() is not None:
                        break
                    time.sleep(GRANULARITY_S / (time_scale or 1.0))
                java.wait(timeout=60 + interval_s / (time_scale or 1.0))
                reader.join(timeout=5)
        finally:
            if java.poll() is None:
                java.stdin.close()
                try:
                    java.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    java.kill()
        if java.returncode != 0:
            raise RuntimeError(f"upstream peer exited {java.returncode}")
        with server._lock:
            for w in watches.values():
                finish(w.result, w.twin)
    return {name: w.result for name, w in watches.items()}, events


def _lockstep(server: TwinServer, java: Any, watches: dict[str, Watch], urls: dict[str, str],
              duration_s: float, interval_s: float, events: list[dict[str, Any]],
              log: Any) -> None:
    """Advance the twins GRANULARITY_S at a time; every interval_s, one control loop of
    upstream at exactly the twins' time (its first at t = 0, as the standalone's)."""
    every = max(1, round(interval_s / GRANULARITY_S))
    steps = math.ceil(duration_s / GRANULARITY_S)
    for n in range(steps + 1):
        if n:
            server.step(GRANULARITY_S)
        for w in watches.values():
            _observe(w)
        if n % every == 0 and n < steps:
            java.stdin.write(f"{server.now_ms()}\n")
            java.stdin.flush()
            _read_events(java.stdout, urls, server, events, log, until_done=True)
            for w in watches.values():  # upstream's rescales, noted at the time they happened
                _observe(w)


def _observe(w: Watch) -> float:
    """Sample the twin (every GRANULARITY_S of virtual time) and note upstream's rescales."""
    twin = w.twin
    if not w.result.bill:  # the pods it starts on: one paper TaskManager a 4 tasks
        w.result.bill_at(twin.time, pods.upstream(twin.configuration).pods.price)
    if not w.result.samples or twin.time - w.result.samples[-1].time >= GRANULARITY_S - 1e-9:
        cores, memory = paper_resources(w.model, twin.configuration)
        w.result.samples.append(Sample(
            twin.time, w.model.load.rate_at(twin.time), twin.achieved_rate(GRANULARITY_S),
            twin.lag(), cores, memory, twin.running))
    if twin.restarts != w.restarts:
        w.restarts = twin.restarts
        assert twin.last_step is not None
        _, downtime = twin.last_step  # as enacted: in place through the rescale API
        at = twin.down_until - downtime
        cores, memory = paper_resources(w.model, twin.configuration)
        before = [s.rate for s in w.result.samples if s.time <= at][-24:]  # the last 2 min
        w.result.steps.append(Step(at, downtime, twin.configuration, cores, memory,
                                   sum(before) / max(1, len(before)),
                                   capacity(w.model, twin.configuration), UPSTREAM))
        # Its new parallelism run the way Flink runs it, billed from the rescale on.
        w.result.bill_at(at, pods.upstream(twin.configuration).pods.price)
    return twin.time


def _read_events(stdout: Any, urls: dict[str, str], server: TwinServer,
                 events: list[dict[str, Any]], log: Any, until_done: bool | None) -> None:
    """Upstream's events, one JSON object a line; in lockstep, up to `{"done": ms}`."""
    for line in stdout:
        try:
            event = json.loads(line)
        except ValueError:
            print(f"peer: {line.rstrip()}", file=sys.stderr)
            continue
        if "done" in event:
            if until_done:
                return
            continue
        job = urls.get(event.get("rest", ""))
        event["job_model"] = job
        if job is not None:
            with server._lock:  # the twin's virtual time when upstream reported it
                event["t"] = round(server.twin(NAMESPACE, job).time, 1)
        events.append(event)
        if log is not None and event.get("reason") in ("ScalingReport", "AutoscalerError",
                                                       "JobListFetch", "NotAdaptive"):
            print(f"  [{job} t={event.get('t')}s] {event['reason']}: "
                  f"{str(event.get('message'))[:300]}", file=log)


def peak_lag(result: RunResult) -> float:
    return max((s.lag for s in result.samples), default=0.0)


def entry(result: RunResult) -> dict[str, Any]:
    out = result.as_json()
    # One sample a minute keeps hours of four jobs in a file worth committing.
    out["trajectory"] = [s for s in out["trajectory"] if round(s["t"]) % 60 == 0]
    out["peak_lag"] = round(peak_lag(result))
    out["final"] = describe(result.model, result.final)
    out["steps_at_s"] = [round(s.time, 1) for s in result.steps]
    # In pods: upstream's parallelism as Flink runs it (default slot sharing group, the
    # paper's TaskManager); ours as the controller placed it (groups, planned CPU, fitted
    # shape).
    out["pods"] = (pods.upstream(result.final) if result.policy == UPSTREAM
                   else pods.placed(result)).as_json()
    return out



def ratio(ours: float | None, theirs: float | None) -> str:
    if ours is None or theirs is None:
        return "-"
    if theirs == 0:
        return "-" if ours == 0 else "inf"
    return f"{ours / theirs:.2f}"


def table(report: dict[str, Any]) -> str:
    lines = [
        "| job | autoscaler | reconfigs (to target) | time to target | cores | memory MB | "
        "pod CPU | pod memory GiB | price / h | bill over the run | "
        "peak lag | final configuration (p;MB) | vs upstream: reconfigs / time to target / "
        "cores / memory / pod CPU / pod memory / price / bill / peak lag |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for job, rows in report["jobs"].items():
        up = rows[UPSTREAM]
        for n, (name, e) in enumerate(rows.items()):
            policy = name not in ("oracle", "pod oracle")  # bounds, not runs
            at, to, lag = e["converged_at_s"], e["steps_to_target"], e.get("peak_lag")
            steps = f"{e['steps']} ({'-' if to is None else to})" if policy else "-"
            when = ("-" if at is None else f"{at:.0f} s") if policy else "-"
            mine, theirs = e.get("pods") or {}, up.get("pods") or {}
            vs = "" if name == UPSTREAM else " / ".join((
                ratio(e["steps"], up["steps"]) if policy else "-",
                ratio(at, up["converged_at_s"]) if policy else "-",
                ratio(e["cpu_cores"], up["cpu_cores"]), ratio(e["memory_mb"], up["memory_mb"]),
                ratio(mine.get("pod_cpu"), theirs.get("pod_cpu")),
                ratio(mine.get("pod_memory_mb"), theirs.get("pod_memory_mb")),
                ratio(mine.get("price"), theirs.get("price")),
                ratio(e.get("pod_bill"), up.get("pod_bill")),
                ratio(lag, up["peak_lag"])))
            pod = (f"{mine['pod_cpu']:.0f} | {mine['pod_memory_mb'] / 1024:.1f} | "
                   f"{mine['price']:.2f}") if mine else "- | - | -"
            bill = e.get("pod_bill")
            pod += f" | {'-' if bill is None else f'{bill:,.1f}'}"  # the pod oracle's too
            lines.append(
                f"| {job if n == 0 else ''} | {name} | {steps} | {when} | {e['cpu_cores']:.0f} | "
                f"{e['memory_mb']:,.0f} | {pod} | {'-' if lag is None else f'{lag:,.0f}'} | "
                f"{e['final']} | {vs} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", default=",".join(JOBS), help="comma-separated job models")
    parser.add_argument("--time-scale", type=float, default=None,
                        help="run both clocks with the wall clock, this many virtual seconds "
                             "per wall second (default: lockstep, as fast as the machine goes)")
    parser.add_argument("--duration", default="300m",
                        help="virtual time per job (upstream's scale-downs wait an hour each)")
    parser.add_argument("--interval", default="60s",
                        help="upstream's control-loop interval (the operator reconciles every "
                             "60 s by default; the standalone autoscaler every 10 s)")
    parser.add_argument("--window", default=None,
                        help="job.autoscaler.metrics.window (default: upstream's, 15 min)")
    parser.add_argument("--stabilization", default=None,
                        help="job.autoscaler.stabilization.interval (default: upstream's, 5 min)")
    parser.add_argument("--upstream-defaults", action="store_true",
                        help="upstream's own utilization target (0.7 ± 0.3), no excluded "
                             "vertices; default: the issue's 0.5 in [0.2, 0.8], sinks excluded")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--catch-up", choices=("spec", "paper"), default="spec",
                        help="our spec.cpu.catchUpDuration: spec (its default, 30 min, the "
                             "same as upstream's catch-up.duration; default) or paper (0)")
    parser.add_argument("--no-ours", action="store_true", help="only the upstream autoscaler")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--update-doc", action="store_true",
                        help=f"also rewrite the table in {DOC.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    duration_s = parse_duration(args.duration)
    interval_s = parse_duration(args.interval)

    settings = {
        "flink_autoscaler": "org.apache.flink:flink-autoscaler:1.10.0 (Flink 1.19.1 REST client)",
        "configuration": "upstream defaults" if args.upstream_defaults else
        "target utilization 0.5 within [0.2, 0.8], pinned sinks excluded (vertex.exclude.ids)",
        "metrics_window": args.window or "15m (default)",
        "stabilization": args.stabilization or "5m (default)",
        "control_loop_interval_s": interval_s,
        "clock": "lockstep" if args.time_scale is None else f"wall x {args.time_scale:g}",
        "duration_s": duration_s, "seed": args.seed,
        "ours": "simulate: 2 min window, 1 min stabilization, target 0.5 in [0.2, 0.8], sinks "
                "pinned (controller.simulate), catch-up "
                + ("30 min (the spec's default)" if args.catch_up == "spec" else "0 (paper)"),
    }
    catch_up_s = None if args.catch_up == "spec" else PAPER_CATCH_UP_S
    print("upstream: " + "; ".join(f"{k}={v}" for k, v in settings.items()), flush=True)
    started = time.monotonic()
    upstream, events = run_upstream(
        jobs, time_scale=args.time_scale, duration_s=duration_s, interval_s=interval_s,
        seed=args.seed, defaults=args.upstream_defaults, window=args.window,
        stabilization=args.stabilization, log=sys.stdout)
    wall_upstream = time.monotonic() - started

    report: dict[str, Any] = {"settings": settings, "jobs": {},
                              "wall_s": {"upstream": round(wall_upstream, 1)}}
    for job in jobs:
        model = load_model(job)
        rows = {UPSTREAM: entry(upstream[job])}
        if not args.no_ours:
            for policy in ("ds2", "justin", "capacity"):
                rows[policy] = entry(run(model, policy, duration_s, seed=args.seed,
                                         catch_up_duration=catch_up_s))
            best = oracle(model)
            rows["oracle"] = {**best.as_json(), "final": describe(model, best.configuration),
                              "pods": pods.ours(model, best.configuration).as_json()}
            in_pods = pods.pod_oracle(model)
            if in_pods is not None:
                cores, memory = paper_resources(model, in_pods.configuration)
                # Its bill follows the load over the same hours (the utilization as the
                # suite's oracles aim it): the reference for both sides' bills.
                bill = pods.bill_oracle(model, duration_s,
                                        utilization_at_target(model, args.seed), seed=args.seed)
                rows["pod oracle"] = {
                    "steps": 0, "steps_to_target": None, "converged_at_s": None,
                    "peak_lag": None, "cpu_cores": cores, "memory_mb": round(memory, 1),
                    "final": describe(model, in_pods.configuration),
                    "pods": in_pods.bill.as_json(),
                    "pod_bill": None if bill is None else round(bill, 3)}
        report["jobs"][job] = rows
    report["wall_s"]["total"] = round(time.monotonic() - started, 1)
    report["events"] = [e for e in events if e.get("reason") != "Configuration recommendation"]
    print()
    print(table(report))
    print(f"\nwall time: upstream {wall_upstream:.0f} s for {duration_s / 60:.0f} virtual min "
          f"x {len(jobs)} jobs ({settings['clock']}); total {report['wall_s']['total']:.0f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, default=_json_default) + "\n")
    print(f"written {args.out}")
    if args.update_doc:
        for doc in (DOC, README):
            text = doc.read_text()
            start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
            doc.write_text(text[:start] + "\n" + table(report) + "\n" + text[end:])
            print(f"updated {doc}")
    return 0


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    raise TypeError(f"not JSON serialisable: {type(value)}")


if __name__ == "__main__":
    sys.exit(main())
