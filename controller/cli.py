"""`hybrid-scaler`: the command line (Typer).

The one place every command is wired. Commands here need no cluster: `crd` prints
the CRD, `validate` checks policy files with the same models the controller uses,
`explain` runs one scaling step on a recorded observation and prints why each
vertex changes, `simulate` runs the controller's pass against the twin. `run` (the
operator) lives in controller/operator/run.py, `twin serve` in simulator/cli.py;
neither module imports this one. Heavy imports (kopf, OR-Tools, matplotlib) stay
inside the command functions, so `--help`, `crd` and `validate` load none of them
(`python -m bench.startup` prints the start-up times).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

import policies
from controller import api
from controller.crd import crd_yaml
from controller.operator.run import run
from controller.record import policy_state
from policies import buffering, skew
from policies.decision import Decision
from policies.levels import format_level
from policies.model import JobGraph, Observation
from policies.spec import Duration, parse_duration
from simulator.cli import model_or_exit, report, run_suite_or_exit, twin_app
from simulator.model import BUILTIN_JOBS
from simulator.results import PolicyName

app = typer.Typer(
    name="hybrid-scaler",
    help="Scale Apache Flink operators out (parallelism, DS2) or up (managed memory, Justin).",
    no_args_is_help=True,
    add_completion=False,
)
app.command()(run)
app.add_typer(twin_app, name="twin")


def _documents(path: Path) -> Iterator[Any]:
    """YAML (possibly several documents) or JSON; JSON is YAML too."""
    with path.open() as f:
        yield from (d for d in yaml.safe_load_all(f) if d is not None)


def field_errors(error: ValidationError) -> list[str]:
    """One line per error, each naming the field by its wire path (spec.cpu.utilizationMin)."""
    lines = []
    for e in error.errors():
        where = ""
        for part in e["loc"]:
            where += f"[{part}]" if isinstance(part, int) else f".{part}"
        where = where.lstrip(".") or "(document)"
        message = e["msg"].removeprefix("Value error, ")
        lines.append(f"{where}: {message}")
    return lines


@app.command()
def crd() -> None:
    """Print the HybridScalingPolicy CustomResourceDefinition (YAML)."""
    typer.echo(crd_yaml(), nl=False)


@app.command()
def validate(
    files: Annotated[list[Path], typer.Argument(exists=True, dir_okay=False, readable=True,
                                                help="policy files (YAML or JSON)")],
) -> None:
    """Check HybridScalingPolicy files with the controller's models; exit 1 if one is invalid."""
    failed = False
    for path in files:
        for i, doc in enumerate(_documents(path)):
            label = f"{path}" + (f" (document {i + 1})" if i else "")
            try:
                policy = api.parse_policy(doc if isinstance(doc, Mapping) else {})
            except ValidationError as e:
                failed = True
                typer.echo(f"{label}: invalid", err=True)
                for line in field_errors(e):
                    typer.echo(f"  {line}", err=True)
                continue
            spec = policy.spec
            typer.echo(f"{label}: ok: {policy.metadata.name} -> {spec.target_ref.kind} "
                       f"{spec.target_ref.name}, mode {spec.mode}")
    if failed:
        raise typer.Exit(1)


class Recording(BaseModel):
    """What `explain` reads: one evaluation's inputs, as the controller collected them.

    `graph` and `observation` are the core's value types (snake_case fields);
    `policy` is a HybridScalingPolicy document (or its spec); `status`, if present,
    is the policy's status before this step (Justin's history).
    """

    model_config = ConfigDict(extra="forbid")

    time: float = Field(description="seconds since the epoch at the end of the window")
    policy: dict[str, Any]
    graph: JobGraph
    observation: Observation
    status: api.Status = api.Status()

    def spec(self) -> api.HybridScalingPolicySpec:
        if "spec" in self.policy:
            return api.parse_policy(self.policy).spec
        return api.HybridScalingPolicySpec.model_validate(self.policy)


def load_recording(path: Path) -> Recording:
    doc = next(_documents(path), None)
    if not isinstance(doc, Mapping):
        raise ValueError(f"{path}: expected a mapping with time, policy, graph, observation")
    data = dict(doc)
    # Observations carry their window; accept '2m' as well as seconds.
    observation = data.get("observation")
    if isinstance(observation, Mapping) and "window_s" in observation:
        window: float = TypeAdapter(Duration).validate_python(observation["window_s"])
        data["observation"] = {**observation, "window_s": window}
    return Recording.model_validate(data)


def render_decision(decision: Decision, spec: api.HybridScalingPolicySpec) -> str:
    effect = {
        api.Mode.ACTIVE: "the controller would patch the FlinkDeployment",
        api.Mode.RECOMMEND: "the controller would record it and patch nothing",
        api.Mode.DISABLED: "the controller would not evaluate at all",
    }[spec.mode]
    lines = [
        f"step {decision.step}: {'reconfigure' if decision.reconfigures else 'no change'} "
        f"({spec.mode} mode: {effect})",
        f"why: {decision.reason}",
        f"CPU {decision.before.cpu_cores:g} -> {decision.after.cpu_cores:g} cores, "
        f"memory {decision.before.memory_mib:.0f} -> {decision.after.memory_mib:.0f} MiB",
    ]
    if decision.clipped:
        lines.append(f"clipped: {decision.clip_reason}")
    settings = buffering.sql_settings(spec.skew.mini_batch_latency, spec.skew.mini_batch_size)
    for f in decision.skew:
        if skew.blocks_scale_out(f):
            lines.append(f"skewed, more tasks cannot help: {buffering.described(f, settings)}")
        else:
            lines.append(f"skew: {f.message}")
    for v in decision.vertices:
        m_before, m_after = format_level(v.memory_level_before), format_level(v.memory_level_after)
        lines += [
            "",
            f"{v.vertex_name or v.vertex_id}  [{v.vertex_id}]",
            f"  {v.action}: parallelism {v.parallelism_before} -> {v.parallelism_after}, "
            f"memory level {m_before} -> {m_after}   (branch {v.branch})",
            f"  {v.reason}",
        ]
    return "\n".join(lines)


@app.command()
def explain(
    recording: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True,
                                              help="recorded time, policy, graph, observation")],
    as_json: Annotated[bool, typer.Option("--json", help="print the decision as JSON")] = False,
) -> None:
    """Run one scaling step of spec.policy on a recorded observation and explain it."""
    try:
        rec = load_recording(recording)
        spec = rec.spec()
    except ValidationError as e:
        typer.echo(f"{recording}: invalid", err=True)
        for line in field_errors(e):
            typer.echo(f"  {line}", err=True)
        raise typer.Exit(1) from None
    except ValueError as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(1) from None
    result = policies.evaluate(
        rec.graph, rec.observation, policy_state(rec.status), spec.scaling_params(), rec.time
    )
    if as_json:
        typer.echo(json.dumps(result.decision.model_dump(mode="json", by_alias=True), indent=2))
    else:
        typer.echo(render_decision(result.decision, spec))



# `simulate --policy` values: each policy of spec.policy alone, or several side by side.
SIMULATED_POLICIES: Mapping[str, list[PolicyName]] = {
    "capacity": ["capacity"], "ds2": ["ds2"], "justin": ["justin"],
    "both": ["justin", "ds2"], "all": ["capacity", "justin", "ds2"],
}


@app.command()
def simulate(
    job: Annotated[str | None, typer.Option(
        help=f"built-in model ({', '.join(BUILTIN_JOBS)}) or YAML")] = None,
    jobs: Annotated[Path | None, typer.Option(
        help="a directory of job-model YAMLs, or a suite file (`jobs: \\[q11, ./my.yaml]`): "
             "runs them all and prints one summary table")] = None,
    policy: Annotated[str, typer.Option(
        help="capacity (the default policy), ds2, justin, both (justin and ds2) or all")
    ] = "all",
    duration: Annotated[str, typer.Option(help="virtual time, e.g. 20m")] = "20m",
    seed: Annotated[int, typer.Option(help="seed of the twin's noise")] = 0,
    seeds: Annotated[int, typer.Option(help="with --jobs: seeds seed .. seed+N-1")] = 1,
    plot: Annotated[Path | None, typer.Option(help="write a Figure-5-like PNG here")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON only")] = False,
) -> None:
    """Run capacity, DS2 and/or Justin in a closed loop against the twin, and the oracle.

    The loop is the controller's own pass (gate, collect, decide, place, realize,
    record) on in-memory ports backed by the twin, in virtual time.
    """
    if policy not in SIMULATED_POLICIES:
        typer.echo(f"--policy must be one of {', '.join(SIMULATED_POLICIES)}", err=True)
        raise typer.Exit(2)
    if (job is None) == (jobs is None):
        typer.echo("give either --job or --jobs", err=True)
        raise typer.Exit(2)
    if seeds < 1:
        typer.echo("--seeds must be at least 1", err=True)
        raise typer.Exit(2)
    try:
        seconds = parse_duration(duration)
    except ValueError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    from controller import simulate as closed_loop
    names: list[PolicyName] = SIMULATED_POLICIES[policy]
    if jobs is not None:
        run_suite_or_exit(jobs, names, range(seed, seed + seeds), seconds, as_json,
                          closed_loop.run)
        return
    assert job is not None
    model = model_or_exit(job)
    runs = [closed_loop.run(model, name, seconds, seed=seed) for name in names]
    report(model, runs, plot, as_json, seconds, seed)
