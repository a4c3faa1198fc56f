"""Write the conformance cases: hand-made edge cases and the twin's jobs at several loads.

    .venv/bin/python -m tests.conformance.record [name ...]   # needs bench/peer built

Runs upstream's evaluator and our DS2 on each case and stores both answers. A case
whose answers differ must name its deviation here (`DEVIATES`), else recording fails:
a new difference is either fixed or listed in policies/upstream.py, never recorded
silently.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

from policies.model import VertexConfig
from simulator.model import load_model
from simulator.twin import Twin
from tests.conformance.cases import CASES, ours, upstream

T0 = 1_763_791_200.0  # any epoch second; upstream needs real timestamps
WINDOW_S = 120.0

# Our spec's defaults (the Justin paper's) in upstream's terms; busy time averaged over
# subtasks as ours is (deviation busy-time-mean).
PAPER_OPTIONS = {
    "job.autoscaler.target.utilization": "0.5",
    "job.autoscaler.target.utilization.boundary": "0.3",
    "job.autoscaler.scale-up.max-factor": "10",
    "job.autoscaler.scale-down.interval": "5 min",
    "job.autoscaler.catch-up.duration": "5 min",
    "job.autoscaler.restart.time": "0 s",
    "job.autoscaler.metrics.busy-time.aggregator": "AVG",
}

# case name -> the deviation that explains why our answer differs from upstream's
DEVIATES = {
    "idle-sink": "idle-vertex",
    "keyed-sized-to-stay-rides-along": "alignment-direction",
}


def vid(name: str) -> str:
    return hashlib.md5(name.encode()).hexdigest()  # a JobVertexID is 32 hex digits


def v(name: str, p: int, max_p: int = 128) -> dict[str, Any]:
    return {"id": vid(name), "name": name, "max_parallelism": max_p, "parallelism": p}


def e(a: str, b: str, ship: str = "FORWARD") -> dict[str, Any]:
    return {"source": vid(a), "target": vid(b), "ship_strategy": ship}


def m(busy: float, rate_in: float, rate_out: float | None = None, *, bp: float = 0.0,
      lag: float | None = None, growth: float | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "busy_ms_per_s": busy, "busy_ms_per_s_max": busy, "backpressured_ms_per_s": bp,
        "records_in_per_s": rate_in, "records_out_per_s": rate_in if rate_out is None else rate_out,
    }
    if lag is not None:
        out["pending_records"] = lag
        out["pending_records_growth_per_s"] = growth or 0.0
    return out


def steady(n: int, **per_vertex: dict[str, Any]) -> list[dict[str, Any]]:
    """n consecutive windows with the same metrics."""
    return [
        {"time": T0 + WINDOW_S * (i + 1), "window_s": WINDOW_S,
         "vertices": {vid(k): dict(x) for k, x in per_vertex.items()}}
        for i in range(n)
    ]


def case(description: str, vertices: list[dict[str, Any]], edges: list[dict[str, Any]],
         windows: list[dict[str, Any]], **options: str) -> dict[str, Any]:
    return {"description": description, "graph": {"vertices": vertices, "edges": edges},
            "windows": windows,
            "options": {**PAPER_OPTIONS, **{f"job.autoscaler.{k}": x for k, x in options.items()}}}


def hand_made() -> dict[str, dict[str, Any]]:
    chain3 = [e("src", "map"), e("map", "sink")]
    return {
        "source-at-bound-without-backlog": case(
            "The source (p=1, utilization 0.1, no pending-records metric) is below its band but"
            " cannot scale in; map is inside its band although sized 4->3: nothing rescales",
            [v("src", 1), v("map", 4), v("sink", 1)], chain3,
            steady(3, src=m(100, 1000), map=m(300, 1000), sink=m(400, 1000, 0)),
        ),
        "excluded-sink-overloaded": case(
            "The excluded sink is at utilization 0.9; map inside its band: nothing rescales",
            [v("src", 1), v("map", 4), v("sink", 1)], chain3,
            steady(3, src=m(400, 1000), map=m(300, 1000), sink=m(900, 1000, 0)),
            **{"vertex.exclude.ids": vid("sink")},
        ),
        "excluded-sink-map-triggers": case(
            "map is at utilization 0.9 and triggers; the overloaded sink is excluded and stays",
            [v("src", 1), v("map", 2), v("sink", 1)], chain3,
            steady(3, src=m(400, 1000), map=m(900, 1000), sink=m(900, 1000, 0)),
            **{"vertex.exclude.ids": vid("sink")},
        ),
        "sink-triggers-map-rides-along": case(
            "The sink triggers (utilization 0.9); map inside its band but sized 4->3 rides along",
            [v("src", 1), v("map", 4), v("sink", 1)], chain3,
            steady(3, src=m(400, 1000), map=m(300, 1000), sink=m(900, 1000, 0)),
        ),
        "keyed-max-parallelism-128": case(
            "A keyed vertex (HASH input, 128 key groups) at utilization 0.9 sized 3->6 is"
            " aligned to 8",
            [v("src", 1), v("keyed", 3)], [e("src", "keyed", "HASH")],
            steady(3, src=m(400, 1000, bp=600), keyed=m(900, 1000)),
        ),
        "keyed-prime-max-parallelism": case(
            "Max parallelism 7 (prime): sized 2->4, above half the key groups, so the search"
            " goes up to 7",
            [v("src", 1), v("keyed", 2, max_p=7)], [e("src", "keyed", "HASH")],
            steady(3, src=m(400, 1000, bp=600), keyed=m(900, 1000)),
        ),
        "keyed-bounded-below-divisor": case(
            "vertex.max-parallelism 3 over 128 key groups: sized 2->4, bounded to 3, no"
            " divisor up to 3; the fallback lands on the current 2: nothing rescales",
            [v("src", 1), v("keyed", 2)], [e("src", "keyed", "HASH")],
            steady(3, src=m(400, 1000, bp=600), keyed=m(1000, 1000)),
            **{"vertex.max-parallelism": "3"},
        ),
        "keyed-sized-to-stay-rides-along": case(
            "A keyed vertex at 5 of 128 key groups, sized to stay at 5, rides along with the"
            " sink's rescale: 1.10 aligns it to 8, we leave it",
            [v("src", 1), v("keyed", 5), v("sink", 1)],
            [e("src", "keyed", "HASH"), e("keyed", "sink")],
            steady(3, src=m(400, 1000), keyed=m(500, 1000), sink=m(900, 1000, 0)),
        ),
        "scale-down-rides-along-within-interval": case(
            "cold wants 10->4 for the first time (interval 1 h); hot triggers: with 1.10 the"
            " delayed scale-down rides along",
            [v("src", 1), v("cold", 10), v("hot", 1)], [e("src", "cold"), e("cold", "hot")],
            steady(3, src=m(400, 1000), cold=m(50, 1000), hot=m(1000, 1000, 0)),
            **{"scale-down.interval": "1 h"},
        ),
        "scale-down-waits-for-interval": case(
            "cold alone wants 10->4: delayed for the 4-minute interval, applied at the"
            " evaluation 4 minutes after it was first wanted",
            [v("src", 1), v("cold", 10), v("sink", 1)], [e("src", "cold"), e("cold", "sink")],
            steady(4, src=m(400, 1000), cold=m(50, 1000), sink=m(400, 1000, 0)),
            **{"scale-down.interval": "4 min", "metrics.window": "2 min"},
        ),
        "lag-catch-up": case(
            "20 s of lag (under the 30 s observed-rate threshold) drained within 60 s: map"
            " needs 1000/0.5 + 333 = 2333/s from a TPR of 1250/s",
            [v("src", 1), v("map", 1), v("sink", 1)], chain3,
            steady(3, src=m(400, 1000, lag=20_000, growth=0.0), map=m(800, 1000),
                   sink=m(400, 1000, 0)),
            **{"catch-up.duration": "60 s"},
        ),
        "backlog-no-scale-down": case(
            "400 s of lag (> the 5 min backlog threshold): the band is [0, 1], so the cold map"
            " (utilization 0.1) does not scale down and nothing rescales",
            [v("src", 2), v("map", 10), v("sink", 1)], chain3,
            steady(3, src=m(400, 1000, bp=600, lag=400_000, growth=0.0), map=m(100, 1000),
                   sink=m(400, 1000, 0)),
            **{"catch-up.duration": "0 s"},
        ),
        "idle-sink": case(
            "map triggers; the sink reports no busy time: upstream takes its capacity as"
            " infinite and shrinks it 4->2, we keep it",
            [v("src", 1), v("map", 1), v("sink", 4)], chain3,
            steady(3, src=m(400, 1000), map=m(900, 1000), sink=m(0, 1000, 0)),
        ),
        "upstream-defaults-with-restart-time": case(
            "Upstream's defaults (0.7 +- 0.3, restart 5 min caught up in 30 min), no"
            " scale-down interval: map (TPR 3333/s) needs 1000/0.7 + 1000*300/1800 = 1595/s:"
            " 20->10 (9 without the restart term)",
            [v("src", 1), v("map", 20), v("sink", 1)], chain3,
            steady(3, src=m(400, 1000), map=m(300, 1000), sink=m(400, 1000, 0)),
        ) | {"options": {"job.autoscaler.metrics.busy-time.aggregator": "AVG",
                         "job.autoscaler.scale-down.interval": "0 s"}},
    }


def twin_case(
    job: str, factor: float, tasks: dict[str, int] | None = None, **options: str
) -> dict[str, Any]:
    """The twin's `job` at `factor` times its target rate, running with `tasks` (operator
    uid -> parallelism; else the initial configuration): three 2-minute windows."""
    model = load_model(job)
    model = model.model_copy(
        update={"load": model.load.model_copy(update={"rate": model.load.rate * factor})}
    )
    initial = model.job_graph().configuration()
    config = {
        o.vertex_id: VertexConfig((tasks or {}).get(o.uid, initial[o.vertex_id].parallelism),
                                  initial[o.vertex_id].memory_level)
        for o in model.operators
    }
    twin = Twin(model, seed=7, configuration=config)
    twin.advance(60.0)
    windows = []
    for _ in range(3):
        twin.advance(WINDOW_S)
        obs = twin.observe(WINDOW_S)
        windows.append({
            "time": T0 + obs.time, "window_s": WINDOW_S,
            "vertices": {
                k: {f: round(getattr(x, f), 3) for f in (
                    "busy_ms_per_s", "busy_ms_per_s_max", "backpressured_ms_per_s",
                    "records_in_per_s", "records_out_per_s")}
                | ({} if x.pending_records is None else {
                    "pending_records": round(x.pending_records, 3),
                    "pending_records_growth_per_s":
                        round(x.pending_records_growth_per_s or 0.0, 3)})
                for k, x in obs.vertices.items()
            },
        })
    graph = twin.job_graph()
    pinned = [o.vertex_id for o in model.operators if o.fixed_parallelism]
    at = "its initial configuration" if not tasks else ", ".join(
        f"{uid} at {p}" for uid, p in tasks.items())
    return {
        "description": f"the twin's {job} with {at}, {factor:g}x its target rate;"
                       " pinned sinks excluded",
        "graph": {
            "vertices": [{"id": x.id, "name": x.name, "max_parallelism": x.max_parallelism,
                          "parallelism": x.parallelism} for x in graph.vertices],
            "edges": [{"source": y.source, "target": y.target,
                       "ship_strategy": str(y.ship_strategy)} for y in graph.edges],
        },
        "windows": windows,
        "options": {**PAPER_OPTIONS,
                    **({"job.autoscaler.vertex.exclude.ids": ",".join(pinned)} if pinned else {}),
                    **{f"job.autoscaler.{k}": x for k, x in options.items()}},
    }


def twin_cases() -> dict[str, dict[str, Any]]:
    """The twin's jobs from their initial configuration at half, full and twice the target,
    and from the size DS2 converges to at half (scale-down interval off) and one and a half
    times the target."""
    out = {
        f"twin-{job}-load-{factor:g}x": twin_case(job, factor)
        for job in ("q1", "q3", "q8", "q11") for factor in (0.5, 1.0, 2.0)
    }
    converged = {"q1": {"q1-map": 7}, "q3": {"q3-join": 12}, "q8": {"q8-join": 24},
                 "q11": {"q11-session": 20}}
    for job, tasks in converged.items():
        for factor in (0.5, 1.5):
            options = {"scale-down.interval": "0 s"} if factor < 1 else {}
            out[f"twin-{job}-converged-load-{factor:g}x"] = twin_case(job, factor, tasks,
                                                                      **options)
    return out


def main() -> None:
    """Record every case, or (with arguments) only the cases whose names contain one."""
    wanted = sys.argv[1:]
    cases = {n: c for n, c in {**hand_made(), **twin_cases()}.items()
             if not wanted or any(w in n for w in wanted)}
    theirs = upstream(cases)
    problems = []
    CASES.mkdir(exist_ok=True)
    for name, c in cases.items():
        mine = ours(c)
        expect: dict[str, Any] = {"upstream": theirs[name]}
        if mine != theirs[name]:
            if name not in DEVIATES:
                problems.append(f"{name}: upstream {theirs[name]}, ours {mine}")
            expect |= {"deviation": DEVIATES.get(name), "ours": mine}
        elif name in DEVIATES:
            problems.append(f"{name}: listed as deviating, but both say {mine}")
        (CASES / f"{name}.json").write_text(json.dumps(c | {"expect": expect}, indent=1) + "\n")
    for p in problems:
        print(p)
    print(f"{len(cases)} cases, {len(problems)} unexplained")


if __name__ == "__main__":
    main()
