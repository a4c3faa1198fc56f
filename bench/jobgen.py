"""Generated job models for the issue-14 benchmark: `generate(seed) -> JobModel`, pure and
deterministic.

Nobody tuned these models for a policy: each is drawn from a seeded random stream, with
the categorical features rotated by the seed so that a suite of consecutive seeds covers
them all (the load pattern cycles every 5 seeds, the access mix of the first stateful
operator every 20, a hot key on every third model, a join on every fourth):

* DAGs of 2-8 operators: a chain (source → operators → pinned sink) or a join (two
  sources, optional filters, a keyed join with two HASH inputs, operators, pinned sink);
  a 2-operator job is a source and one keyed operator that is its own sink;
* HASH into keyed operators, REBALANCE or FORWARD into stateless ones, FORWARD into
  the sink (as the built-in models);
* stateful and stateless operators; access mixes write-dominated (write ≥ 0.8 with a
  few reads), read-heavy, update-heavy and mixed; 1, 2 or ½ accesses per record;
* keys uniform or Zipf with s in [0.2, 1.4], with or without a hot key
  (`State.hot_key_share` in [0.03, 0.25]); state from 10 MB to 8 GB (log-uniform);
* loads over DESIGN_DURATION_S: constant, step up, step down (at the middle), a daily
  peak (diurnal, trough → peak → trough over the run) and a ramp (hold, ramp, hold);
* the twin's default noise and overheads;
* the state backend: RocksDB (Flink 1.20) below FORST_FROM, ForSt (Flink 2.x,
  asynchronous state, `JobModel.engine`) from it on: seeds 40-47 are eight ForSt jobs
  drawn as the first forty are, the first operator's access mix turning every 2 seeds
  (every load pattern, mix, a hot key and a join among them). Seeds in UNSEEN_ROCKSDB
  (200-399) run on RocksDB again, drawn as the first forty: models the suite never
  runs, to check on RocksDB, as seeds from 100 do on ForSt, that the policies were not
  fitted to the suite (docs/policies.md).

The peak rate is drawn as a multiple of what one task of the slowest operator
sustains. A draw is kept when the oracle (simulator.results.oracle) is feasible at
100 % busyness, sized for the peak: the twin can sustain it at all. Key skew (a hot
key, or Zipf s ≥ 1, whose hottest key alone is up to a third of the accesses) may put
the utilization target (0.5) out of reach: adding tasks cannot help the hottest
subtask; `oracle_at_target` then takes the lowest utilization that is reachable. The
oracle at the target must stay at most MAX_ORACLE_CORES cores: the rate is scaled
down (×0.6, up to four times) until it is. A refused draw is redrawn from the next
attempt's stream. Keyed operators have 128 or 256 key groups (Flink's default is 128).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import yaml

from policies.model import ShipStrategy
from policies.restart_cost import Engine
from simulator.model import JobModel
from simulator.perf import task_cost
from simulator.results import oracle, unit_loads
from simulator.twin import managed_mib

DESIGN_DURATION_S = 2400.0  # every load's phases fit in 40 virtual minutes
UTILIZATION_TARGET = 0.5  # the spec's default (policies.spec.CpuScaling)
MAX_ORACLE_CORES = 60.0
MAX_ATTEMPTS = 40
PATTERNS = ("constant", "step-up", "step-down", "daily-peak", "ramp")
MIXES = ("write", "read", "update", "mixed")
MB = 1e6
FORST_FROM = 40  # model seeds from here on run on ForSt ...
UNSEEN_ROCKSDB = range(200, 400)  # ... but these, RocksDB models beyond the suite


class GenerationError(RuntimeError):
    """No acceptable model within MAX_ATTEMPTS draws for a seed."""


def generate(seed: int) -> JobModel:
    """The job model of `seed`: the same seed gives the same model, on any machine."""
    reasons = []
    for attempt in range(MAX_ATTEMPTS):
        rng = random.Random(f"jobgen/{seed}/{attempt}")
        draw = _draw(seed, rng)
        model, problem = _fit_rate(draw)
        if problem is None:
            return model
        reasons.append(problem)
    raise GenerationError(f"seed {seed}: no acceptable model in {MAX_ATTEMPTS} draws; "
                          f"last: {reasons[-1]}")


def suite(seeds: range | list[int]) -> list[JobModel]:
    return [generate(s) for s in seeds]


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _access(rng: random.Random, mix: str) -> dict[str, float]:
    if mix == "write":
        write = round(rng.uniform(0.8, 0.97), 3)
        parts = {"read": 1 - write, "write": write, "update": 0.0}
    elif mix == "read":
        read = round(rng.uniform(0.75, 1.0), 3)
        parts = {"read": read, "write": 0.0, "update": 1 - read}
    elif mix == "update":
        update = round(rng.uniform(0.6, 1.0), 3)
        parts = {"read": 1 - update, "write": 0.0, "update": update}
    else:
        raw = [rng.uniform(0.1, 1.0) for _ in range(3)]
        total = sum(raw)
        read, write = round(raw[0] / total, 3), round(raw[1] / total, 3)
        parts = {"read": read, "write": write, "update": 1 - read - write}
    per_record = rng.choices([1.0, 2.0, 0.5], weights=[7, 2, 1])[0]
    return {**{k: round(v, 3) for k, v in parts.items()}, "per_record": per_record}


def _state(rng: random.Random, name: str, mix: str) -> dict[str, Any]:
    total = _log_uniform(rng, 10 * MB, 8000 * MB)
    value = int(_log_uniform(rng, 40, 2000))
    keys = max(2, round(total / (value + 40)))
    state: dict[str, Any] = {"name": name, "keys": keys, "value_bytes": value,
                             "access": _access(rng, mix)}
    if rng.random() < 0.7:
        state["distribution"] = {"kind": "zipf", "s": round(rng.uniform(0.2, 1.4), 2)}
    return state


def _keyed(rng: random.Random, uid: str, name: str, inputs: list[str], mix: str,
           hot: bool) -> dict[str, Any]:
    state = _state(rng, f"{uid.split('-')[-1]}-state", mix)
    if hot:
        state["hot_key_share"] = round(rng.uniform(0.03, 0.25), 3)
    return {"uid": uid, "name": name, "cpu_us": round(_log_uniform(rng, 2.0, 40.0), 2),
            "selectivity": round(rng.uniform(0.1, 1.0), 2),
            "max_parallelism": rng.choice([128, 128, 256]),
            "inputs": [{"from": i, "ship": ShipStrategy.HASH.value} for i in inputs],
            "state": state}


def _stateless(rng: random.Random, uid: str, name: str, source: str) -> dict[str, Any]:
    ship = rng.choice([ShipStrategy.REBALANCE, ShipStrategy.FORWARD])
    return {"uid": uid, "name": name, "cpu_us": round(_log_uniform(rng, 0.3, 15.0), 2),
            "selectivity": round(rng.uniform(0.2, 1.5), 2),
            "inputs": [{"from": source, "ship": ship.value}]}


def _draw(seed: int, rng: random.Random) -> dict[str, Any]:
    """A raw model (rate still a placeholder) for this seed's features."""
    pattern = PATTERNS[seed % len(PATTERNS)]
    # Eight ForSt seeds are too few for a cycle of 20: their mix turns every 2 seeds.
    forst = engine(seed) == Engine.FORST.value
    first_mix = MIXES[(seed // (2 if forst else len(PATTERNS))) % len(MIXES)]
    hot = seed % 3 == 1
    join = seed % 4 == 3
    prefix = f"g{seed}"
    ops: list[dict[str, Any]] = []
    mixes = iter([first_mix])

    def next_mix() -> str:
        return next(mixes, None) or rng.choice(MIXES)

    if join:
        size = rng.randint(4, 8)
        left, right = f"{prefix}-src-a", f"{prefix}-src-b"
        ops += [{"uid": left, "name": "Source: A", "cpu_us": 0.2,
                 "rate_share": round(rng.uniform(0.3, 3.0), 2)},
                {"uid": right, "name": "Source: B", "cpu_us": 0.2}]
        spare = size - 4  # operators beyond sources, join and sink
        sides = []
        for side in (left, right):
            if spare > 0 and rng.random() < 0.5:
                uid = f"{side}-filter"
                ops.append(_stateless(rng, uid, f"Filter {side[-1].upper()}", side))
                sides.append(uid)
                spare -= 1
            else:
                sides.append(side)
        ops.append(_keyed(rng, f"{prefix}-join", "Join: A x B", sides, next_mix(), hot))
        hot = False
        upstream = f"{prefix}-join"
        middle = spare
    else:
        size = rng.randint(2, 8)
        upstream = f"{prefix}-src"
        ops.append({"uid": upstream, "name": "Source: Events", "cpu_us": 0.2})
        middle = max(1, size - 2)
    # The first operator of a chain is keyed (so the seed's access mix is used), except on
    # every tenth seed, where the chain may be stateless throughout.
    first_keyed = not join and seed % 10 != 9
    stateful = [(n == 0 and first_keyed) or rng.random() < 0.5 for n in range(middle)]
    for n in range(middle):
        uid = f"{prefix}-op{n + 1}"
        if stateful[n]:
            ops.append(_keyed(rng, uid, f"Keyed {n + 1}", [upstream], next_mix(), hot))
            hot = False
        else:
            ops.append(_stateless(rng, uid, f"Map {n + 1}", upstream))
        upstream = uid
    if size > 2:
        ops.append({"uid": f"{prefix}-sink", "name": "Sink: Out", "cpu_us": 0.25,
                    "selectivity": 0.0, "fixed_parallelism": True,
                    "inputs": [{"from": upstream, "ship": ShipStrategy.FORWARD.value}]})
    else:
        ops[-1]["selectivity"] = 0.0  # the keyed operator writes out itself
    ratio = round(rng.uniform(1.8, 3.0), 2)
    backend = engine(seed)
    return {"name": f"gen-{seed:03d}", "pattern": pattern, "ratio": ratio,
            "scale": rng.uniform(3.0, 15.0), "operators": ops, "engine": backend,
            "description": f"generated (seed {seed}): {'join' if join else 'chain'} of "
                           f"{len(ops)} operators, {pattern} load, {backend}"}


def engine(seed: int) -> str:
    """The state backend of `seed`'s model (simulator.model.Engine's values)."""
    rocksdb = seed < FORST_FROM or seed in UNSEEN_ROCKSDB
    return Engine.ROCKSDB.value if rocksdb else Engine.FORST.value


def _load(pattern: str, peak: float, ratio: float) -> dict[str, Any]:
    d = DESIGN_DURATION_S
    low = round(peak / ratio)
    if pattern == "constant":
        return {"pattern": "constant", "rate": peak}
    if pattern == "step-up":
        return {"pattern": "step", "rate": low, "step_rate": peak, "step_at_s": d / 2}
    if pattern == "step-down":
        return {"pattern": "step", "rate": peak, "step_rate": low, "step_at_s": d / 2}
    if pattern == "daily-peak":  # trough at the start and the end, the peak in the middle
        return {"pattern": "diurnal", "peak_rate": peak, "trough_rate": low, "period_s": d,
                "peak_at_s": d / 2}
    return {"pattern": "phases", "phases": [
        {"rate": low, "duration_s": d / 4}, {"ramp_to": peak, "duration_s": d / 4},
        {"rate": peak, "duration_s": d / 2}]}


def _fit_rate(draw: dict[str, Any]) -> tuple[JobModel, str | None]:
    """The model at its drawn peak rate, and what is wrong with it (None: acceptable)."""
    base = JobModel.model_validate({"name": draw["name"], "description": draw["description"],
                                    "load": {"pattern": "constant", "rate": 1.0},
                                    "operators": draw["operators"], "engine": draw["engine"]})
    loads = unit_loads(base)
    mid = managed_mib(3)
    per_task = [task_cost(op, 1, mid if op.state else None, base.rocksdb,
                          forst=base.forst_engine).capacity
                / loads[op.vertex_id]
                for op in base.operators
                if not op.is_source and not op.fixed_parallelism and loads[op.vertex_id] > 0]
    if not per_task:
        return base, "nothing to scale"
    peak = round(min(per_task) * draw["scale"], -1)
    problem: str | None = "no rate"
    model = base
    for _ in range(5):
        model = JobModel.model_validate({
            "name": draw["name"], "description": draw["description"],
            "load": _load(draw["pattern"], max(peak, 10.0), draw["ratio"]),
            "operators": draw["operators"], "engine": draw["engine"]})
        problem = check(model)
        if problem is None or not problem.startswith("oracle above"):
            return model, problem
        peak = round(peak * 0.6, -1)
    return model, problem


def oracle_at_target(model: JobModel, target_rate: float | None = None, seed: int = 0,
                     horizon_s: float = DESIGN_DURATION_S) -> Any:
    """The oracle at the utilization target, or, where a hot key puts that out of reach,
    at the lowest utilization in steps of 0.1 it can reach (None: not even at 100 %)."""
    for utilization in (UTILIZATION_TARGET, 0.6, 0.7, 0.8, 0.9, 1.0):
        best = oracle(model, target_rate, utilization=utilization, horizon_s=horizon_s,
                      seed=seed)
        if best.feasible:
            return best
    return None


def utilization_at_target(model: JobModel, seed: int = 0
                          ) -> Callable[[float], float | None]:
    """The utilization `oracle_at_target` aims at for a target rate (None: out of reach),
    for the oracles priced over time (`simulator.pods.bill_oracle`)."""
    def at(target_rate: float) -> float | None:
        aimed = oracle_at_target(model, target_rate, seed=seed)
        return None if aimed is None else float(aimed.utilization)
    return at


def hot_keyed(model: JobModel) -> list[str]:
    """Uids of the operators with a hot key."""
    return [o.uid for o in model.operators if o.state is not None and o.state.hot_key_share > 0]


def check(model: JobModel) -> str | None:
    """Why the model is not acceptable for the suite (None: it is)."""
    if not oracle(model, horizon_s=DESIGN_DURATION_S).feasible:
        return "oracle infeasible at 100 % busyness"
    aimed = oracle_at_target(model)
    if aimed is None:
        return "oracle infeasible"
    if aimed.cpu_cores > MAX_ORACLE_CORES:
        return f"oracle above {MAX_ORACLE_CORES:.0f} cores ({aimed.cpu_cores:.0f})"
    return None


def features(model: JobModel) -> set[str]:
    """What the model exercises, read from the model itself (tests count them)."""
    found = {f"operators:{len(model.operators)}", model.engine.value}
    load = model.load
    if load.pattern == "step":
        assert load.rate is not None and load.step_rate is not None
        found.add("step-up" if load.step_rate > load.rate else "step-down")
    else:
        found.add({"constant": "constant", "diurnal": "daily-peak", "phases": "ramp",
                   "square": "square"}[load.pattern])
    for op in model.operators:
        if len([i for i in op.inputs if i.ship == ShipStrategy.HASH]) >= 2:
            found.add("join")
        found.update(f"ship:{i.ship.value}" for i in op.inputs)
        if op.fixed_parallelism:
            found.add("pinned sink")
        if op.is_source:
            continue
        if op.state is None:
            found.add("stateless")
            continue
        found.add("stateful")
        state, access = op.state, op.state.access
        if access.write >= 0.8:
            found.add("write-dominated")
        if access.read >= 0.7:
            found.add("read-heavy")
        if access.update >= 0.6:
            found.add("update-heavy")
        if state.hot_key_share > 0:
            found.add("hot key")
        s = getattr(state.distribution, "s", 0.0)
        found.add("uniform" if s == 0 else "zipf<1" if s < 1 else "zipf>=1")
        if state.total_bytes <= 50 * MB:
            found.add("state<=50MB")
        if state.total_bytes >= 2000 * MB:
            found.add("state>=2GB")
    return found


def to_yaml(model: JobModel) -> str:
    """The model as a job-model file (`load_model` reads it back to an equal model)."""
    data = model.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    return yaml.safe_dump(data, sort_keys=False)
