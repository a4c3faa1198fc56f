"""Job models: the YAML format the twin reads, as a pydantic schema.

A job model is data, not code (docs/simulator.md documents every field and where
each built-in number comes from). Built-in models live in `simulator/jobs/*.yaml`;
`load_model("q11")` finds them by name, `load_model("path/to/job.yaml")` reads any file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import mmh3
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from policies import restart_cost as rc
from policies.model import Edge, JobGraph, ShipStrategy, Vertex
from policies.restart_cost import Enactment, Engine, RestartCost

BUILTIN_JOBS = ("q1", "q2", "q3", "q5", "q8", "q11", "read", "write", "update", "read-cliff",
                "statejob", "q11-forst", "read-forst", "statejob-forst")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def vertex_id_for(uid: str) -> str:
    """The JobVertexID Flink derives from a chain head's uid: murmur3-128, seed 0.

    The same hash as Flink's, so the controller maps uids to twin vertices exactly
    as it does to real ones (controller/adapters/flink_rest.py).
    """
    return mmh3.hash_bytes(uid.encode("utf-8"), 0, True).hex()


class Uniform(Strict):
    kind: Literal["uniform"] = "uniform"


class Zipf(Strict):
    kind: Literal["zipf"]
    s: float = Field(gt=0, description="Zipf exponent: access probability of rank k is ∝ k^-s")


class Access(Strict):
    """What one input record does to keyed state, as fractions of accesses."""

    read: float = Field(0.0, ge=0, le=1, description="get only")
    write: float = Field(0.0, ge=0, le=1, description="put without reading (blind write)")
    update: float = Field(0.0, ge=0, le=1, description="get then put")
    per_record: float = Field(1.0, ge=0, description="state accesses per input record")

    @model_validator(mode="after")
    def _sums_to_one(self) -> Access:
        total = self.read + self.write + self.update
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"access mix read+write+update must be 1, got {total:g}")
        return self

    @property
    def gets_per_record(self) -> float:
        return self.per_record * (self.read + self.update)

    @property
    def puts_per_record(self) -> float:
        return self.per_record * (self.write + self.update)


class State(Strict):
    """Keyed state in RocksDB: the working set and how it is accessed."""

    name: str = Field("value", min_length=1, description="the ValueState's name (metric label)")
    keys: int = Field(gt=0, description="distinct keys over all subtasks")
    value_bytes: int = Field(gt=0, description="serialized value size per key")
    key_bytes: int = Field(40, gt=0, description="serialized key + RocksDB per-entry overhead")
    distribution: Uniform | Zipf = Field(default_factory=Uniform, discriminator="kind")
    hot_key_share: float = Field(
        0.0, ge=0, lt=1,
        description="share of accesses (and of the vertex's records) that go to one hot key; "
                    "the rest follow `distribution` over the other keys. Flink hashes that key "
                    "to one key group, so one subtask gets it whatever the parallelism")
    access: Access

    @model_validator(mode="after")
    def _hot_key_among_others(self) -> State:
        if self.hot_key_share > 0 and self.keys < 2:
            raise ValueError("hot_key_share needs keys ≥ 2 (one hot key and the others)")
        return self

    @property
    def total_bytes(self) -> float:
        return float(self.keys) * (self.value_bytes + self.key_bytes)


class Input(Strict):
    from_: str = Field(alias="from", description="uid of the upstream operator")
    ship: ShipStrategy = ShipStrategy.HASH

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Phase(Strict):
    """One phase of a `phases` load: hold `rate`, or ramp linearly to `ramp_to`."""

    rate: float | None = Field(None, ge=0, description="hold this rate for the phase")
    ramp_to: float | None = Field(
        None, ge=0, description="ramp linearly from the previous rate to this one")
    duration_s: float = Field(gt=0)

    @model_validator(mode="after")
    def _one_shape(self) -> Phase:
        if (self.rate is None) == (self.ramp_to is None):
            raise ValueError("a phase has exactly one of rate or ramp_to")
        return self


# Which fields each pattern needs and allows (besides `pattern`); an incomplete or
# mixed-up pattern is refused rather than silently run as something else.
_PATTERN_FIELDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "constant": (("rate",), ()),
    "step": (("rate", "step_rate"), ("step_at_s",)),
    "square": (("rate",), ("low_rate", "period_s")),
    "phases": (("phases",), ("rate", "repeat")),
    "diurnal": (("peak_rate", "trough_rate"), ("period_s", "peak_at_s")),
}


class Load(Strict):
    """Target rate at the sources over time (records/s)."""

    pattern: Literal["constant", "step", "square", "phases", "diurnal"] = "constant"
    rate: float | None = Field(
        None, gt=0, description="constant/step/square: the rate; phases: the rate a first ramp "
                                "starts from")
    step_at_s: float = Field(600.0, ge=0, description="step: time of the change")
    step_rate: float | None = Field(None, gt=0, description="step: the rate after step_at_s")
    low_rate: float | None = Field(
        None, gt=0, description="square: the low half-period's rate (default rate/2)")
    period_s: float = Field(600.0, gt=0, description="square, diurnal: full period")
    phases: tuple[Phase, ...] = Field((), description="phases: in order; the last rate holds")
    repeat: bool = Field(False, description="phases: start over after the last phase")
    peak_rate: float | None = Field(None, gt=0, description="diurnal: the highest rate")
    trough_rate: float | None = Field(None, ge=0, description="diurnal: the lowest rate")
    peak_at_s: float = Field(0.0, ge=0, description="diurnal: time of the (first) peak")

    @model_validator(mode="after")
    def _complete(self) -> Load:
        needed, allowed = _PATTERN_FIELDS[self.pattern]
        given = self.model_fields_set - {"pattern"}
        missing = [f for f in needed if getattr(self, f) in (None, ())]
        if missing:
            raise ValueError(f"pattern {self.pattern} needs {', '.join(missing)}")
        foreign = sorted(given - set(needed) - set(allowed))
        if foreign:
            raise ValueError(f"pattern {self.pattern} does not use {', '.join(foreign)}")
        if self.pattern == "diurnal" and self.trough_rate > self.peak_rate:  # type: ignore[operator]
            raise ValueError("diurnal: trough_rate is above peak_rate")
        if self.pattern == "phases" and self.phases[0].ramp_to is not None and self.rate is None:
            raise ValueError("phases: a first phase that ramps needs rate (where it starts)")
        return self

    def rate_at(self, t: float) -> float:
        if self.pattern == "step":
            assert self.rate is not None and self.step_rate is not None
            return self.step_rate if t >= self.step_at_s else self.rate
        if self.pattern == "square":
            assert self.rate is not None
            low = self.low_rate if self.low_rate is not None else self.rate / 2
            return self.rate if (t % self.period_s) < self.period_s / 2 else low
        if self.pattern == "phases":
            return self._phase_rate(t)
        if self.pattern == "diurnal":
            assert self.peak_rate is not None and self.trough_rate is not None
            mid = (self.peak_rate + self.trough_rate) / 2
            amp = (self.peak_rate - self.trough_rate) / 2
            return mid + amp * math.cos(2 * math.pi * (t - self.peak_at_s) / self.period_s)
        assert self.rate is not None
        return self.rate

    def _phase_rate(self, t: float) -> float:
        total = sum(p.duration_s for p in self.phases)
        if self.repeat and t >= total:
            t %= total
        previous = self.rate if self.rate is not None else 0.0
        start = 0.0
        for phase in self.phases:
            end = start + phase.duration_s
            if phase.rate is not None:
                if t < end:
                    return phase.rate
                previous = phase.rate
            else:
                assert phase.ramp_to is not None
                if t < end:
                    return previous + (phase.ramp_to - previous) * (t - start) / phase.duration_s
                previous = phase.ramp_to
            start = end
        return previous

    def boundaries(self, horizon_s: float) -> list[float]:
        """Times in [0, horizon) where the load changes shape: the phases of the report."""
        if self.pattern == "step":
            return [0.0] + ([self.step_at_s] if 0 < self.step_at_s < horizon_s else [])
        if self.pattern in ("square", "diurnal"):
            half = self.period_s / 2
            offset = self.peak_at_s % half if self.pattern == "diurnal" else 0.0
            times = [0.0]
            t = offset if offset > 0 else half
            while t < horizon_s:
                times.append(t)
                t += half
            return times
        if self.pattern == "phases":
            times, t = [0.0], 0.0
            while True:
                for phase in self.phases:
                    t += phase.duration_s
                    if t >= horizon_s:
                        return times
                    times.append(t)
                if not self.repeat:
                    return times
        return [0.0]


class Operator(Strict):
    """One operator, run as its own JobVertex (the twin does not chain)."""

    uid: str = Field(min_length=1)
    name: str = Field(min_length=1)
    cpu_us: float = Field(gt=0, description="CPU time per input record, state access excluded")
    selectivity: float = Field(1.0, ge=0, description="output records per input record")
    inputs: tuple[Input, ...] = ()
    state: State | None = None
    initial_parallelism: int = Field(1, ge=1)
    max_parallelism: int = Field(128, ge=1)
    fixed_parallelism: bool = Field(False, description="pinned, like the paper's sinks")
    rate_share: float | None = Field(
        None, gt=0, description="sources: weight in the target rate (default 1: equal shares)"
    )
    subtask_skew: float = Field(
        0.0, ge=0, description="Zipf exponent of load across subtasks (0: even)"
    )
    load: Load | None = Field(
        None, description="sources: their own load shape instead of a share of the job's")

    @property
    def vertex_id(self) -> str:
        return vertex_id_for(self.uid)

    @property
    def is_source(self) -> bool:
        return not self.inputs


class RocksDB(Strict):
    """Costs of RocksDB state access; defaults are the Figure 4 (SSD) calibration."""

    write_buffer_ratio: float = Field(0.5, gt=0, lt=1, description="r: cache = managed·(3−r)/3")
    footprint_factor: float = Field(
        3.0, gt=0, description="cache bytes needed per byte of state (blocks, overheads)"
    )
    hit_us: float = Field(0.5, ge=0, description="a block-cache hit")
    miss_us: float = Field(270.0, ge=0, description="a data-block miss")
    index_fraction: float = Field(
        0.016, ge=0, description="index+filter bytes per byte of state"
    )
    index_accesses_per_get: float = Field(2.0, ge=0, description="index + filter block lookups")
    index_miss_us: float = Field(270.0, ge=0, description="an index/filter block miss")
    high_priority_ratio: float = Field(
        0.1, ge=0, le=1, description="cache share that protects index/filter blocks"
    )
    put_us: float = Field(33.0, ge=0, description="a MemTable insert with a 64 MB MemTable")
    small_memtable_penalty: float = Field(
        0.1, ge=0,
        description="k: extra relative put cost at a 32 MB MemTable; ×(4^h − 1)/3 at h halvings",
    )
    misses_per_put: float = Field(
        0.01, ge=0, description="block reads past the cache per put (flush, compaction)"
    )
    new_file_misses: float = Field(
        0.0, ge=0,
        description="block reads per put, at a 64 MB MemTable, that gets make loading the "
                    "index and filter blocks of the SST files flushes and compactions write; "
                    "doubles per MemTable halving, needs gets and puts (ForSt fit; 0: none)",
    )
    unmanaged_cache_mib: float = Field(
        8.0, gt=0, description="cache of a stateful task given no managed memory"
    )
    fill_mib_per_s: float = Field(
        8.3, gt=0,
        description="MiB/s a task's block cache refills at after a restart (real Flink "
                    "1.20, median of 3 restores: bench/results/realflink-warmup.json)",
    )


class Episodes(Strict):
    """Events that start at random (Poisson) and last an exponential time."""

    per_hour: float = Field(ge=0, description="mean number of starts per hour (0: never)")
    mean_s: float = Field(gt=0, description="mean duration in seconds")


class Noise(Strict):
    """What makes a measurement differ from the truth, and a run from another seed.

    Each part is switched off by its zero; docs/simulator.md gives the defaults'
    sources. A seed fixes every draw; each part draws from its own stream, so
    switching one off leaves the others' draws unchanged.
    """

    sample_sd: float = Field(
        0.02, ge=0, lt=0.5, description="relative sd of each 5-s sample (white)")
    busy_bias_sd: float = Field(
        0.05, ge=0, lt=0.5,
        description="relative sd of a slowly drifting per-vertex error of busy time (AR(1))")
    busy_bias_time_s: float = Field(
        900.0, gt=0, description="correlation time of that error")
    pauses: Episodes = Field(
        default_factory=lambda: Episodes(per_hour=4, mean_s=3),
        description="per vertex: GC or checkpoint-alignment stalls (no records processed)")
    scrape_gaps: Episodes = Field(
        default_factory=lambda: Episodes(per_hour=4, mean_s=10),
        description="per job: scrapes that return nothing (exporter or network down)")
    stale_series: Episodes = Field(
        default_factory=lambda: Episodes(per_hour=2, mean_s=20),
        description="per vertex: series that stop updating (a TaskManager's reporter lags)")
    latency_history: int = Field(
        128, ge=0,
        description="sampled accesses behind each latency histogram (Flink's "
                    "state.latency-track.history-size); 0: the exact mean")
    key_groups: bool = Field(
        True, description="spread keyed load over key groups as Flink hashes keys (hot keys "
                          "stay on one subtask)")

    @classmethod
    def off(cls) -> Noise:
        return cls(sample_sd=0, busy_bias_sd=0, pauses=Episodes(per_hour=0, mean_s=1),
                   scrape_gaps=Episodes(per_hour=0, mean_s=1),
                   stale_series=Episodes(per_hour=0, mean_s=1), latency_history=0,
                   key_groups=False)


class Scaling(Strict):
    """Per-operator overheads that grow with parallelism (docs/simulator.md, Non-linear
    scaling). Zeros give perfectly linear scaling."""

    contention: float = Field(
        0.005, ge=0, le=1,
        description="σ: each task's cost per record × (1 + σ(p − 1)) (coordination, shared "
                    "TaskManager resources)")
    buffer_us: float = Field(
        20.0, ge=0, description="CPU per network buffer a task handles on an all-to-all input")
    flushes_per_s: float = Field(
        10.0, ge=0,
        description="buffers each upstream task flushes per channel per second at least "
                    "(1 / Flink's execution.buffer-timeout of 100 ms)")


class Reconfiguration(Strict):
    """Downtime of a step, by how it is enacted. Unset terms are the engine's, as
    policies/restart_cost.py measured them on real Flink (RocksDB: realflink-steps.json;
    ForSt: realflink-steps-forst-async-2.2-*.json), so a twin's step costs what the same
    step cost the real StateJob on that engine; a set term overrides the engine's."""

    fixed_s: float | None = Field(None, ge=0,
                                  description="a restart: new JobManager and TaskManagers, main()")
    savepoint_mb_per_s: float | None = Field(
        None, gt=0, description="writing the savepoint (savepoint upgrade)")
    restore_mb_per_s: float | None = Field(
        None, gt=0, description="reading the state back (restarts that read it)")
    kill_s: float | None = Field(None, ge=0,
                                 description="a last-state upgrade's stop: the cluster is killed")
    in_place_s: float | None = Field(None, ge=0,
                                     description="the adaptive scheduler's rescale, state included")

    def costs(self, engine: Engine = Engine.ROCKSDB) -> Mapping[Enactment, RestartCost]:
        """The policy layer's measured step costs for `engine` (one source of truth), with
        this job's own terms, if any, in place of the engine's."""
        if all(v is None for v in self.model_dump().values()):
            return rc.measured_costs(engine)
        terms = rc.TERMS[engine]

        def own(value: float | None, engines: float) -> float:
            return engines if value is None else value

        return replace(
            terms, start_s=own(self.fixed_s, terms.start_s),
            write_mb_per_s=own(self.savepoint_mb_per_s, terms.write_mb_per_s),
            read_mb_per_s=own(self.restore_mb_per_s, terms.read_mb_per_s),
            kill_s=own(self.kill_s, terms.kill_s),
            in_place_s=own(self.in_place_s, terms.in_place_s)).costs()


class ForSt(Strict):
    """Flink 2.x's ForSt with asynchronous state (State V2): the state lives in a remote
    store; the block cache (managed memory, RocksDB's rule) and a local file cache of fixed
    size per TaskManager sit in front of it. The job's `rocksdb` block keeps the LSM terms
    ForSt shares with RocksDB (hits, MemTable, index/filter blocks); a block-cache miss is
    read from the file cache or, past it, from the remote store. Defaults: the fit to
    Flink 2.2.0 on this machine (bench/results/forst-fig4-fit.json; the "remote" store was a
    local directory, so a real object store's misses cost more: set remote_miss_us)."""

    file_cache_mib: float = Field(
        32.0, ge=0, description="local file cache of one TaskManager "
                                "(state.backend.forst.cache.size-based-limit), MiB")
    stateful_tasks_per_taskmanager: float = Field(
        4.0, gt=0, description="stateful tasks sharing one TaskManager's file cache (the "
                               "twin's TaskManager has 4 slots)")
    file_footprint_factor: float = Field(
        1.0, gt=0, description="file-cache bytes per byte of state (SST files, not blocks)")
    file_hit_us: float = Field(9.98, ge=0, description="a block read from the local file cache")
    remote_miss_us: float = Field(
        9.98, ge=0, description="a block read from the remote store (measured with a local "
                                 "directory as the store: no dearer than the file cache)")
    async_cpu_overhead: float = Field(
        0.555, ge=0, description="extra CPU per record of a stateful operator (the asynchronous "
                                 "execution model's bookkeeping), relative")
    io_parallelism: float = Field(
        1.81, ge=1, description="state accesses of one task served concurrently (ForSt's I/O "
                                "threads, batched requests)")
    in_flight_limit: int = Field(
        6000, ge=1, description="records in flight per task at most "
                                "(execution.async-state.total-buffer-size)")
    buffer_size: int = Field(
        1000, ge=1, description="records a batch of state requests waits for "
                                "(execution.async-state.active-buffer-size)")
    buffer_timeout_ms: float = Field(
        1000.0, gt=0,
        description="longest a batch waits (execution.async-state.active-buffer-timeout)")


class JobModel(Strict):
    name: str
    description: str = ""
    load: Load
    operators: tuple[Operator, ...] = Field(min_length=1)
    rocksdb: RocksDB = Field(default_factory=RocksDB)
    # The state backend: RocksDB (Flink 1.20) or ForSt (Flink 2.x, asynchronous state).
    engine: Engine = Engine.ROCKSDB
    forst: ForSt = Field(default_factory=ForSt, description="ForSt's terms (engine forst)")
    reconfiguration: Reconfiguration = Field(default_factory=Reconfiguration)
    noise: Noise = Field(default_factory=Noise)
    scaling: Scaling = Field(default_factory=Scaling)

    @model_validator(mode="after")
    def _well_formed(self) -> JobModel:
        errors = structure_errors(self.model_dump(by_alias=True))
        if errors:
            raise ValueError(STRUCTURE + "; ".join(f"{path}: {msg}" for path, msg in errors))
        return self

    def source_rate(self, op: Operator, t: float) -> float:
        """Records/s source `op` should produce at time t: its own load, or its share of
        the job's."""
        if op.load is not None:
            return op.load.rate_at(t)
        return self.load.rate_at(t) * self.source_share(op)

    def target_at(self, t: float) -> float:
        """Total target rate over all sources at time t."""
        return sum(self.source_rate(op, t) for op in self.sources())

    def peak_target(self, horizon_s: float, step_s: float = 5.0) -> float:
        """The highest total target rate in [0, horizon] (sampled every `step_s`)."""
        n = max(1, int(horizon_s / step_s))
        return max(self.target_at(i * step_s) for i in range(n + 1))

    def boundaries(self, horizon_s: float) -> list[float]:
        """Start times of the load's phases (every source's shape changes), from 0."""
        loads = [self.load] + [o.load for o in self.sources() if o.load is not None]
        return sorted({t for load in loads for t in load.boundaries(horizon_s)})

    def operator(self, uid: str) -> Operator:
        for o in self.operators:
            if o.uid == uid:
                return o
        raise KeyError(uid)

    def by_vertex(self) -> dict[str, Operator]:
        return {o.vertex_id: o for o in self.operators}

    def sources(self) -> tuple[Operator, ...]:
        return tuple(o for o in self.operators if o.is_source)

    def source_share(self, op: Operator) -> float:
        """Fraction of the job's load a source without its own load produces (rate_share
        weights, default 1)."""
        shared = [s for s in self.sources() if s.load is None]
        total = sum(s.rate_share or 1.0 for s in shared)
        return (op.rate_share or 1.0) / total if op in shared else 0.0

    @property
    def forst_engine(self) -> ForSt | None:
        """ForSt's terms when the job runs on ForSt, None on RocksDB."""
        return self.forst if self.engine == Engine.FORST else None

    @property
    def state_bytes(self) -> float:
        return sum(o.state.total_bytes for o in self.operators if o.state is not None)

    def job_graph(self) -> JobGraph:
        """The graph at the initial parallelism, every vertex at memory level 0 (as the
        paper's runs start)."""
        vertices = tuple(
            Vertex(
                id=o.vertex_id,
                name=o.name,
                max_parallelism=o.max_parallelism,
                parallelism=o.initial_parallelism,
                memory_level=0,
                operator_uids=(o.uid,),
            )
            for o in self.operators
        )
        edges = tuple(
            Edge(vertex_id_for(i.from_), o.vertex_id, i.ship)
            for o in self.operators
            for i in o.inputs
        )
        return JobGraph(vertices, edges)


class ModelError(ValueError):
    """A job model that cannot be read: the message says which file and which field."""


STRUCTURE = "job structure: "


def structure_errors(raw: Any) -> list[tuple[str, str]]:
    """Every error in how the operators fit together, on raw (possibly invalid) data.

    Runs even when fields are invalid, so one report lists everything: duplicate uids,
    inputs from unknown uids, cycles (naming their operators), a missing source,
    parallelism bounds, and loads on operators that are not sources.
    """
    if not isinstance(raw, dict) or not isinstance(raw.get("operators"), list | tuple):
        return []
    ops = [o if isinstance(o, dict) else {} for o in raw["operators"]]
    uids = [o.get("uid") for o in ops]
    errors: list[tuple[str, str]] = []
    seen: set[Any] = set()
    for n, uid in enumerate(uids):
        if uid in seen and uid is not None:
            errors.append((_op_path(raw, n, "uid"), f"duplicate operator uid {uid!r}"))
        seen.add(uid)
    graph: dict[str, list[str]] = {}
    for n, o in enumerate(ops):
        inputs = o.get("inputs") or ()
        if not isinstance(inputs, list | tuple):
            continue
        for k, i in enumerate(inputs):
            src = i.get("from", i.get("from_")) if isinstance(i, dict) else None
            if src is not None and src not in uids:
                errors.append((_op_path(raw, n, f"inputs.{k}.from"),
                               f"reads from unknown uid {src!r}"))
            elif isinstance(o.get("uid"), str) and isinstance(src, str):
                graph.setdefault(o["uid"], []).append(src)
        low, high = o.get("initial_parallelism", 1), o.get("max_parallelism", 128)
        if isinstance(low, int) and isinstance(high, int) and low > high:
            errors.append((_op_path(raw, n, "initial_parallelism"),
                           f"{low} is above max_parallelism {high}"))
        if inputs and o.get("load") is not None:
            errors.append((_op_path(raw, n, "load"), "only sources (no inputs) have a load"))
    if ops and all(o.get("inputs") for o in ops):
        errors.append(("operators", "a job needs at least one source (an operator without "
                                    "inputs)"))
    for cycle in _cycles(graph):
        errors.append(("operators", "cycle: " + " → ".join([*cycle, cycle[0]])))
    return errors


def _cycles(reads_from: dict[str, list[str]]) -> list[list[str]]:
    """Each cycle once (in data-flow order, from its smallest uid)."""
    found: set[tuple[str, ...]] = set()
    out: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        for up in reads_from.get(node, []):
            if up in path:
                cycle = path[path.index(up):][::-1]
                start = cycle.index(min(cycle))
                key = tuple(cycle[start:] + cycle[:start])
                if key not in found:
                    found.add(key)
                    out.append(list(key))
            elif len(path) <= len(reads_from):
                visit(up, [*path, up])

    for node in sorted(reads_from):
        visit(node, [node])
    return out


def _op_path(raw: Any, index: int, rest: str = "") -> str:
    """`operators.1 (uid agg).cpu_us`: the index pydantic reports plus the uid a person knows."""
    ops = raw.get("operators") if isinstance(raw, dict) else None
    uid = None
    if isinstance(ops, list | tuple) and index < len(ops) and isinstance(ops[index], dict):
        uid = ops[index].get("uid")
    head = f"operators.{index}" + (f" (uid {uid})" if uid is not None else "")
    return f"{head}.{rest}" if rest else head


def _error_lines(raw: Any, exc: ValidationError | None) -> list[str]:
    lines: list[str] = []
    for e in exc.errors() if exc is not None else ():
        loc = list(e["loc"])
        if not loc and STRUCTURE in e["msg"]:
            continue  # restated below, one line each
        if len(loc) >= 2 and loc[0] == "operators" and isinstance(loc[1], int):
            path = _op_path(raw, loc[1], ".".join(str(x) for x in loc[2:]))
        else:
            path = ".".join(str(x) for x in loc) or "(top level)"
        lines.append(f"  {path}: {e['msg']}")
    lines += [f"  {path}: {msg}" for path, msg in structure_errors(raw)]
    return lines


def load_model(name_or_path: str | Path) -> JobModel:
    """A built-in model by name (`q11`) or any model YAML file by path."""
    text, origin = _read(name_or_path)
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ModelError(f"{origin}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ModelError(f"{origin}: a job model is a YAML mapping")
    try:
        return JobModel.model_validate(raw)
    except ValidationError as exc:
        lines = _error_lines(raw, exc)
        raise ModelError(f"{origin}: invalid job model\n" + "\n".join(lines)) from exc


def _read(name_or_path: str | Path) -> tuple[str, str]:
    name = str(name_or_path)
    if name in BUILTIN_JOBS:
        res = resources.files("simulator").joinpath("jobs", f"{name}.yaml")
        return res.read_text(encoding="utf-8"), f"built-in model {name}"
    path = Path(name)
    if not path.is_file():
        raise ModelError(
            f"no job model {name!r}: use a built-in name ({', '.join(BUILTIN_JOBS)}) "
            "or a path to a YAML file"
        )
    return path.read_text(encoding="utf-8"), str(path)
