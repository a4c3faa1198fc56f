"""`hybrid-scaler twin serve`, and how `hybrid-scaler simulate` reports its runs.

controller/cli.py wires both into the one command line; nothing here imports the
controller (the closed loop that produces the runs is the controller's pass,
`controller/simulate.py`).
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from policies.spec import CpuScaling
from simulator.model import BUILTIN_JOBS, JobModel, ModelError, load_model
from simulator.results import OracleResult, PolicyName, RunResult, oracle
from simulator.suite import Runner, run_suite, summary_table
from simulator.twin import managed_mib

twin_app = typer.Typer(help="The digital twin of Flink on RocksDB, served over HTTP.",
                       no_args_is_help=True)


def model_or_exit(job: str) -> JobModel:
    try:
        return load_model(job)
    except ModelError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None


def describe(model: JobModel, configuration: Any) -> str:
    """`uid (p;MB)` per non-source operator, ⊥ for no managed memory."""
    parts = []
    for op in model.operators:
        if op.is_source:
            continue
        vc = configuration[op.vertex_id]
        mem = "⊥" if vc.memory_level is None else f"{managed_mib(vc.memory_level):.0f}"
        parts.append(f"{op.uid} ({vc.parallelism};{mem})")
    return ", ".join(parts)


def _print_run(result: RunResult) -> None:
    typer.echo(f"\n{result.policy}: {len(result.steps)} reconfiguration(s)")
    target = result.model.peak_target(result.samples[-1].time if result.samples else 0.0)
    for n, step in enumerate(result.steps, 1):
        typer.echo(
            f"  step {n} at {step.time:5.0f}s (down {step.downtime_s:.0f}s): "
            f"{describe(result.model, step.configuration)}; achieves "
            f"{min(step.capacity, target):,.0f}/s (was {step.rate_before:,.0f}/s); "
            f"{step.cpu_cores:.0f} cores, {step.memory_mib:,.0f} MB"
        )


def _phases(result: RunResult) -> None:
    for ph in result.phases:
        reached = ("never" if ph.time_to_target_s is None
                   else f"after {ph.time_to_target_s:.0f}s")
        typer.echo(
            f"  phase {ph.start_s:5.0f}-{ph.end_s:5.0f}s ({'steady' if ph.steady else 'moving'}, "
            f"peak {ph.peak_target:,.0f}/s): keeps up {reached}; {ph.restarts} restart(s) "
            f"({ph.restarts_per_hour:.1f}/h); peak backlog {ph.peak_lag:,.0f}")


def _table(model: JobModel, rows: list[tuple[str, dict[str, Any], Any]]) -> None:
    typer.echo(f"\n{'policy':11} {'steps':>5} {'to target':>9} {'converged at':>12} "
               f"{'rate/s':>12} {'cores':>6} {'memory MB':>10}  final configuration")
    for name, entry, config in rows:
        at, to_target = entry["converged_at_s"], entry["steps_to_target"]
        typer.echo(
            f"{name:11} {entry['steps']:>5} {'-' if to_target is None else to_target:>9} "
            f"{'-' if at is None else f'{at:.0f}s':>12} {entry['achieved_rate']:>12,.0f} "
            f"{entry['cpu_cores']:>6.0f} {entry['memory_mb']:>10,.0f}  {describe(model, config)}"
        )


def suite_models(where: Path) -> list[JobModel]:
    """The models of a suite: every `*.yaml` in a directory, or the `jobs:` list of a
    suite file (built-in names or paths relative to it). Every bad model is reported."""
    if where.is_dir():
        entries = [str(p) for p in sorted(where.glob("*.yaml"))]
        if not entries:
            raise ModelError(f"{where}: no *.yaml job models in this directory")
    else:
        try:
            doc = yaml.safe_load(where.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ModelError(f"{where}: not a readable suite file: {exc}") from exc
        jobs = doc.get("jobs") if isinstance(doc, dict) else None
        if not isinstance(jobs, list) or not jobs or not all(isinstance(j, str) for j in jobs):
            raise ModelError(f"{where}: a suite file is a mapping with `jobs:`, a list of "
                             "built-in names or paths")
        entries = [j if j in BUILTIN_JOBS else str(where.parent / j) for j in jobs]
    models, errors = [], []
    for entry in entries:
        try:
            models.append(load_model(entry))
        except ModelError as exc:
            errors.append(str(exc))
    if errors:
        raise ModelError("\n".join(errors))
    return models


LINE_STYLE = {"justin": "plain", "ds2": "dotted", "capacity": "dash-dotted"}


def report(model: JobModel, runs: list[RunResult], plot: Path | None, as_json: bool,
           duration_s: float, seed: int = 0) -> None:
    """Print the runs and both oracles (a table, or JSON), and plot them if asked."""
    best: OracleResult = oracle(model, horizon_s=duration_s, seed=seed)
    # What the policies aim for: every task at their utilization target, not at 100 %.
    target_util = CpuScaling().utilization_target
    aimed = oracle(model, horizon_s=duration_s, seed=seed, utilization=target_util)
    peak = model.peak_target(duration_s)
    if plot is not None:
        from simulator.plot import plot_runs

        plot_runs(runs, plot, f"{model.name}: " + " vs ".join(
            f"{r.policy} ({LINE_STYLE.get(r.policy, 'dashed')})" for r in runs))
    entries = {r.policy: r.as_json() for r in runs}
    entries["oracle"] = best.as_json()
    entries["oracle_at_target"] = aimed.as_json()
    if as_json:
        typer.echo(json.dumps({"job": model.name, "target_rate": peak, "policies": entries}))
        return
    typer.echo(f"{model.name}: {model.description}; peak target {peak:,.0f} records/s")
    for r in runs:
        _print_run(r)
        _phases(r)
    rows = [(r.policy, entries[r.policy], r.final) for r in runs]
    rows.append(("oracle", entries["oracle"], best.configuration))
    rows.append((f"oracle@{target_util:.0%}", entries["oracle_at_target"], aimed.configuration))
    _table(model, rows)
    if not best.feasible:
        typer.echo("oracle: the target is out of reach within max parallelism", err=True)
    if plot is not None:
        typer.echo(f"\nplot written to {plot}")


def run_suite_or_exit(where: Path, names: list[PolicyName], seeds: range, seconds: float,
                      as_json: bool, runner: Runner) -> None:
    """`simulate --jobs`: every model of the suite × policy × seed, one table or JSON."""

    try:
        models = suite_models(where)
    except ModelError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    rows = run_suite(models, names, seeds, seconds, runner)
    if as_json:
        typer.echo(json.dumps({"seeds": list(seeds), "duration_s": seconds,
                               "rows": [r.as_json() for r in rows]}))
        return
    typer.echo(f"{len(models)} model(s) × {len(names)} polic(ies) × {len(seeds)} seed(s), "
               f"{seconds:.0f} s each; cells: min / median / max over the seeds\n")
    typer.echo(summary_table(rows))


@twin_app.command("serve")
def serve(
    job: Annotated[list[str] | None, typer.Option(
        help="NAME=MODEL, e.g. default/q11=q11 (repeatable); more via PUT /control/jobs/..")
    ] = None,
    port: Annotated[int, typer.Option(help="HTTP port (0: any free port)")] = 8081,
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    time_scale: Annotated[float, typer.Option(help="virtual seconds per wall second")] = 1.0,
    downtime_scale: Annotated[float, typer.Option(help="multiplies restart downtime")] = 1.0,
    slots: Annotated[int, typer.Option(help="task slots per TaskManager")] = 4,
    seed: Annotated[int, typer.Option()] = 0,
) -> None:
    """Serve twins with Flink's Prometheus metrics and REST API until interrupted.

    NAME is `namespace/name` (namespace `default` when omitted).
    """
    from simulator.serve import JOB_MODEL_KEY, SLOTS_KEY, TwinServer

    server = TwinServer(host, port, seed=seed, time_scale=time_scale,
                        downtime_scale=downtime_scale)
    jobs = job or []
    for spec in jobs:
        name, sep, model_name = spec.partition("=")
        if not sep or not name or not model_name:
            typer.echo(f"--job {spec!r}: use NAME=MODEL", err=True)
            raise typer.Exit(2)
        namespace, _, short = name.rpartition("/")
        try:
            server.add_job(namespace or "default", short,
                           {JOB_MODEL_KEY: model_name, SLOTS_KEY: str(slots)},
                           {"resource": {"cpu": slots, "memory": "2048m"}, "replicas": 1})
        except ValueError as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(2) from None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with server:
        typer.echo(f"twin serving {len(jobs)} job(s) on {server.url}: /metrics, /control/jobs")
        for namespace, name in server.jobs():
            typer.echo(f"  {namespace}/{name}: Flink REST {server.rest_url(namespace, name)}")
        if time_scale != 1.0:
            typer.echo(f"  clock: epoch ms = {server.clock_anchor_ms} + (wall ms - "
                       f"{server.clock_anchor_ms}) x {time_scale:g}")
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()
