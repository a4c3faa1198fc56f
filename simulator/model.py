"""Job models: the YAML format the twin reads, as a pydantic schema.

A job model is data, not code (docs/simulator.md documents every field and where
each built-in number comes from). Built-in models live in `simulator/jobs/*.yaml`;
`load_model("q11")` finds them by name, `load_model("path/to/job.yaml")` reads any file.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Literal

import mmh3
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from policies.model import Edge, JobGraph, ShipStrategy, Vertex

BUILTIN_JOBS = ("q1", "q2", "q3", "q5", "q8", "q11", "read", "write", "update", "read-cliff")


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
    access: Access

    @property
    def total_bytes(self) -> float:
        return float(self.keys) * (self.value_bytes + self.key_bytes)


class Input(Strict):
    from_: str = Field(alias="from", description="uid of the upstream operator")
    ship: ShipStrategy = ShipStrategy.HASH

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


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
    unmanaged_cache_mib: float = Field(
        8.0, gt=0, description="cache of a stateful task given no managed memory"
    )


class Reconfiguration(Strict):
    """Downtime of a stop-with-savepoint + restore."""

    fixed_s: float = Field(15.0, ge=0, description="cancel, schedule, deploy")
    savepoint_mb_per_s: float = Field(200.0, gt=0)
    restore_mb_per_s: float = Field(100.0, gt=0)


class Load(Strict):
    """Target rate at the sources over time."""

    pattern: Literal["constant", "step", "square"] = "constant"
    rate: float = Field(gt=0, description="records/s, over all sources")
    step_at_s: float = Field(600.0, ge=0, description="step: time of the change")
    step_rate: float | None = Field(None, gt=0, description="step: the rate after step_at_s")
    low_rate: float | None = Field(None, gt=0, description="square: the low half-period's rate")
    period_s: float = Field(600.0, gt=0, description="square: full period")

    def rate_at(self, t: float) -> float:
        if self.pattern == "step":
            return self.step_rate if (t >= self.step_at_s and self.step_rate) else self.rate
        if self.pattern == "square":
            low = self.low_rate if self.low_rate is not None else self.rate / 2
            return self.rate if (t % self.period_s) < self.period_s / 2 else low
        return self.rate


class JobModel(Strict):
    name: str
    description: str = ""
    load: Load
    operators: tuple[Operator, ...] = Field(min_length=1)
    rocksdb: RocksDB = Field(default_factory=RocksDB)
    reconfiguration: Reconfiguration = Field(default_factory=Reconfiguration)
    noise: float = Field(0.02, ge=0, lt=0.5, description="relative sd of measurement noise")

    @model_validator(mode="after")
    def _well_formed(self) -> JobModel:
        uids = [o.uid for o in self.operators]
        dupes = {u for u in uids if uids.count(u) > 1}
        if dupes:
            raise ValueError(f"duplicate operator uids: {sorted(dupes)}")
        for o in self.operators:
            for i in o.inputs:
                if i.from_ not in uids:
                    raise ValueError(f"operator {o.uid!r} reads from unknown uid {i.from_!r}")
            if o.initial_parallelism > o.max_parallelism:
                raise ValueError(f"operator {o.uid!r}: initial_parallelism > max_parallelism")
        if not any(o.is_source for o in self.operators):
            raise ValueError("a job needs at least one source (an operator without inputs)")
        self.job_graph()  # raises on cycles
        return self

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
        """Fraction of the target rate a source produces (rate_share weights, default 1)."""
        total = sum(s.rate_share or 1.0 for s in self.sources())
        return (op.rate_share or 1.0) / total

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
        lines = [
            f"  {'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
            for e in exc.errors()
        ]
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
