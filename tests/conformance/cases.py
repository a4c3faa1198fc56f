"""Conformance cases: recorded metric windows, upstream's decision on them, and ours.

A case file (`cases/<name>.json`) is `bench/peer`'s Evaluate input (graph, windows,
options) plus `description` and `expect`: `upstream` is what upstream's evaluator
answered when the case was recorded; `deviation` names an entry of
`policies.upstream.DEVIATIONS` when our answer (`ours`) differs from it.
`python -m tests.conformance.record` writes the cases.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from policies import ds2
from policies.model import Edge, JobGraph, Observation, ShipStrategy, Vertex, VertexMetrics
from policies.upstream import PREFIX, cpu_scaling, flink_duration

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).resolve().parent / "cases"
PEER = ROOT / "bench" / "peer"
INPUT_KEYS = ("graph", "windows", "options")

Decision = dict[str, Any]  # {"rescale": bool, "parallelism": {vertex id: int}}


def load(path: Path) -> dict[str, Any]:
    case: dict[str, Any] = json.loads(path.read_text())
    return case


def graph_of(case: Mapping[str, Any]) -> JobGraph:
    g = case["graph"]
    return JobGraph(
        vertices=tuple(
            Vertex(id=v["id"], name=v.get("name", v["id"]), max_parallelism=v["max_parallelism"],
                   parallelism=v["parallelism"])
            for v in g["vertices"]
        ),
        edges=tuple(
            Edge(e["source"], e["target"], ShipStrategy.parse(e.get("ship_strategy", "FORWARD")))
            for e in g["edges"]
        ),
    )


def observation_of(windows: list[Mapping[str, Any]]) -> Observation:
    """One observation over consecutive windows: rates and busy times weighted by window
    length (as upstream's counters and averages see them), lag from the last window."""
    total = sum(w["window_s"] for w in windows)
    vertices: dict[str, VertexMetrics] = {}
    for vid, last in windows[-1]["vertices"].items():
        def mean(field: str, vid: str = vid) -> float:
            return float(
                sum(w["vertices"][vid].get(field, 0.0) * w["window_s"] for w in windows) / total
            )
        growth = [w["vertices"][vid].get("pending_records_growth_per_s") for w in windows]
        vertices[vid] = VertexMetrics(
            busy_ms_per_s=mean("busy_ms_per_s"),
            busy_ms_per_s_max=mean("busy_ms_per_s_max"),
            backpressured_ms_per_s=mean("backpressured_ms_per_s"),
            records_in_per_s=mean("records_in_per_s"),
            records_out_per_s=mean("records_out_per_s"),
            pending_records=last.get("pending_records"),
            pending_records_growth_per_s=(
                None if all(g is None for g in growth) else mean("pending_records_growth_per_s")
            ),
        )
    return Observation(time=windows[-1]["time"], window_s=total, vertices=vertices)


def ours(case: Mapping[str, Any]) -> Decision:
    """Our DS2 on the case, run as upstream runs: at the end of each window once the
    metric window is full, on the windows inside it, until the first rescale."""
    graph = graph_of(case)
    options = case.get("options", {})
    cpu = cpu_scaling(options)
    windows = case["windows"]
    start = windows[0]["time"] - windows[0]["window_s"]
    metric_window = (
        flink_duration(PREFIX + "metrics.window", options[PREFIX + "metrics.window"])
        if PREFIX + "metrics.window" in options else windows[-1]["time"] - start
    )
    since: Mapping[str, float] = {}
    for w in windows:
        now = w["time"]
        if now - start < metric_window - 1e-9:
            continue
        inside = [x for x in windows if x["time"] <= now and x["time"] - x["window_s"]
                  >= now - metric_window - 1e-9]
        proposal = ds2.propose(graph, replace(observation_of(inside), time=now), cpu,
                               scale_down_wanted_since=since, now=now)
        since = proposal.scale_down_wanted_since
        changed = any(vp.parallelism != vp.parallelism_before
                      for vp in proposal.vertices.values())
        if proposal.triggered and changed:
            return {"rescale": True,
                    "parallelism": {k: vp.parallelism for k, vp in proposal.vertices.items()}}
    return {"rescale": False, "parallelism": {v.id: v.parallelism for v in graph.vertices}}


def evaluator_command() -> list[str]:
    """`bench/peer`'s Evaluate, built by `mvn -f bench/peer/pom.xml package` (make test)."""
    classpath = PEER / "target" / "classpath.txt"
    classes = PEER / "target" / "classes"
    java = shutil.which("java")
    if java is None or not classpath.exists() or not classes.exists():
        raise RuntimeError(
            f"upstream's evaluator is not built: need java on PATH and {classpath} and "
            f"{classes}; run `mvn -B -q -f bench/peer/pom.xml package`"
        )
    return [java, "-cp", f"{classpath.read_text().strip()}{os.pathsep}{classes}",
            "dev.hybridscaler.peer.Evaluate"]


def upstream(cases: Mapping[str, Mapping[str, Any]]) -> dict[str, Decision]:
    """Upstream's decision on every case, one JVM per case."""
    command = evaluator_command()
    out: dict[str, Decision] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in cases.items():
            path = Path(tmp) / f"{name}.json"
            path.write_text(json.dumps({k: case[k] for k in INPUT_KEYS if k in case}))
            run = subprocess.run([*command, str(path)], capture_output=True, text=True,
                                 timeout=300, check=False)
            if run.returncode != 0:
                raise RuntimeError(f"{name}: Evaluate exited {run.returncode}: {run.stderr}")
            answer = json.loads(run.stdout)
            out[name] = {"rescale": answer["rescale"], "parallelism": answer["parallelism"]}
    return out
