"""What a step costs in downtime: the expected downtime of each way Flink can enact it.

Written once, used by the controller (the expected downtime it records in status), by the
policy layer (`RestartFacts`: how a restart would be enacted, the state, the deployment's
observed downtimes, priced when `spec.cost.restartDowntime` is unset) and by the twin (its
reconfiguration model), so all say what real Flink measured.

The ways, cheapest first (docs/flink-plugin.md, "Measured step costs"):

* `resize`: flink-plugin's TaskManager agent resizes the live RocksDB block caches of a
  step that changes managed memory only (docs/flink-plugin.md, "Resizing in place"): no
  restart, same job and attempts; on RocksDB, and on ForSt through flink-plugin's
  resizable ForSt backend (Flink 2.2).
* `in-place`: the adaptive scheduler's rescale (`PUT /jobs/<id>/resource-requirements`):
  same JobManager, TaskManagers and job id; only parallelism can change this way.
* `last-state`: the operator kills the cluster and the new one restores the latest
  checkpoint (`upgradeMode: last-state`, a completed checkpoint exists).
* `savepoint`: stop-with-savepoint, a new cluster restores it (`upgradeMode: savepoint`,
  or last-state without a checkpoint).

Per engine (`Engine`): RocksDB's numbers below; ForSt's (Flink 2.x, state in a remote store)
further down, where a last-state restart reads no state at all.

Each costs `fixed + state/write + state/read`: the cluster's restart, writing the state
(only a savepoint writes it during the downtime; a checkpoint was written before) and
reading it back. The numbers come from `bench/results/realflink-steps.json`
(`python -m bench.realflink_steps`: StateJob on Flink 1.20.5, local JVMs, 2 shared
cores under load, NATIVE savepoints):

    savepoint   43.9 s = stop 2.14 s (savepoint of 99.9 MB) + restart 41.8 s (99.9 MB)
    last-state  49.7 s = stop 0.54 s (kill)                  + restart 49.2 s (144.7 MB)
    in-place     3.5 s   (same processes; Flink restores the checkpoint itself)

Write: 99.9 MB in 2.14 s = 46.7 MB/s. Read: a NATIVE savepoint and a checkpoint are
RocksDB's files, copied back as they were copied out, so the same rate (an assumption:
the restore was not timed apart from the restart). Fixed: what remains of the two
restarts, 39.6 s and 46.1 s, averaged to 42.8 s. The model is within 3.3 s of each
measured step (tests/policies/test_restart_cost.py checks it against the JSON); the
spread between the two restarts, and 20–78 s measured for the same savepoint step in
e2e runs, is the machine's load, not state. In-place has one point and no state term.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

MB = 1e6  # the bench reports bytes; rates are in MB (10^6 bytes) per second


class Enactment(StrEnum):
    """How a step is enacted by Flink and its operator."""

    RESIZE = "resize"
    IN_PLACE = "in-place"
    LAST_STATE = "last-state"
    SAVEPOINT = "savepoint"


@dataclass(frozen=True)
class RestartCost:
    """Downtime = fixed_s + state/write_mb_per_s + state/read_mb_per_s (None: no such term)."""

    fixed_s: float
    write_mb_per_s: float | None
    read_mb_per_s: float | None

    def downtime_s(self, state_bytes: float) -> float:
        mb = max(0.0, state_bytes) / MB
        return (self.fixed_s
                + (mb / self.write_mb_per_s if self.write_mb_per_s else 0.0)
                + (mb / self.read_mb_per_s if self.read_mb_per_s else 0.0))


def step_costs(*, start_s: float, write_mb_per_s: float, read_mb_per_s: float, kill_s: float,
               in_place_s: float, last_state_reads: bool = True
               ) -> Mapping[Enactment, RestartCost]:
    """Each enactment's cost from an engine's measured terms: a savepoint restart writes and
    reads the state, a last-state restart is killed and reads the checkpoint back (unless
    the engine's checkpoint only names files already in a remote store), an in-place
    rescale is one fixed term, a resize the measured RESIZE_S. The one place they are
    composed (also the twin's)."""
    return MappingProxyType({
        Enactment.RESIZE: RestartCost(RESIZE_S, None, None),
        Enactment.IN_PLACE: RestartCost(in_place_s, None, None),
        Enactment.LAST_STATE: RestartCost(start_s + kill_s, None,
                                          read_mb_per_s if last_state_reads else None),
        Enactment.SAVEPOINT: RestartCost(start_s, write_mb_per_s, read_mb_per_s),
    })


@dataclass(frozen=True)
class StepTerms:
    """An engine's measured terms, which `costs` composes into each enactment's cost (the
    twin overrides single terms: simulator.model.Reconfiguration)."""

    start_s: float
    write_mb_per_s: float
    read_mb_per_s: float
    kill_s: float
    in_place_s: float
    last_state_reads: bool = True

    def costs(self) -> Mapping[Enactment, RestartCost]:
        return step_costs(start_s=self.start_s, write_mb_per_s=self.write_mb_per_s,
                          read_mb_per_s=self.read_mb_per_s, kill_s=self.kill_s,
                          in_place_s=self.in_place_s, last_state_reads=self.last_state_reads)


# Fitted above; the source is bench/results/realflink-steps.json.
START_S = 42.8  # a new JobManager + TaskManager, the job's main(), RocksDB opening
WRITE_MB_PER_S = 46.7  # a NATIVE savepoint, taken while stopping
READ_MB_PER_S = WRITE_MB_PER_S  # restoring it (or a checkpoint): the same files back
KILL_S = 0.54  # a last-state stop: the cluster is killed
IN_PLACE_S = 3.5  # the adaptive scheduler's rescale, restore included
# A resize by flink-plugin's agent: the job never stops (bench/results/realflink-resize*.json:
# downtime 0 s, the same job, attempts and numRestarts; the request took 16 ms).
RESIZE_S = 0.0
ROCKSDB_TERMS = StepTerms(start_s=START_S, write_mb_per_s=WRITE_MB_PER_S,
                          read_mb_per_s=READ_MB_PER_S, kill_s=KILL_S, in_place_s=IN_PLACE_S)
MEASURED = ROCKSDB_TERMS.costs()


class Engine(StrEnum):
    """The state backend a job's state lives in: it decides what reading state back costs."""

    ROCKSDB = "rocksdb"  # Flink 1.20 (or 2.x with RocksDB): state on the TaskManagers' disks
    FORST = "forst"  # Flink 2.x's ForSt with asynchronous state: state in the remote store


def engine_of(state_backend: str) -> Engine:
    """The engine of a `state.backend.type` value (anything but ForSt is costed as RocksDB)."""
    return Engine.FORST if state_backend.strip().lower() == "forst" else Engine.ROCKSDB


# ForSt, fitted to bench/results/realflink-steps-forst-async-2.2-{100k,400k}.json
# (`python -m bench.realflink_steps --state-backend forst --job-class
# dev.hybridscaler.job.AsyncStateJob`, Flink 2.2.0, 135 MB and 429 MB of state, load 25-32
# on 2 cores):
#
#     savepoint   40.8 s = stop 1.73 s (135 MB)  + restart;  42.3 s = stop 6.30 s (429 MB) + restart
#     last-state  30.4 s = kill 0.46 s           + restart;  22.1 s = kill 0.41 s          + restart
#     in-place    12.7 s, 21.2 s (Flink 2.x rescales at the next checkpoint, 10 s interval)
#
# Write: the two stops through the origin, 68.9 MB/s. Read: a savepoint is copied back (restore
# to the counter RUNNING took 2.31 s and 4.85 s in the JobManager logs: 294 MB more in 2.54 s,
# 116 MB/s). A last-state restart reads nothing: ForSt's checkpoint only names the files already
# in the remote store (18 KB and 19 KB of checkpoint for 135 MB and 429 MB of state; restore
# 3.87 s and 3.15 s). Fixed: what remains of the four restarts (38.0, 32.3, 29.9, 21.7 s),
# averaged to 30.4 s; the model is within 9 s of each step, the machine's load being the spread.
FORST_START_S = 30.4
FORST_WRITE_MB_PER_S = 68.9
FORST_READ_MB_PER_S = 116.0
FORST_KILL_S = 0.44
FORST_IN_PLACE_S = 17.0
FORST_TERMS = StepTerms(start_s=FORST_START_S, write_mb_per_s=FORST_WRITE_MB_PER_S,
                        read_mb_per_s=FORST_READ_MB_PER_S, kill_s=FORST_KILL_S,
                        in_place_s=FORST_IN_PLACE_S, last_state_reads=False)
MEASURED_FORST = FORST_TERMS.costs()
TERMS: Mapping[Engine, StepTerms] = MappingProxyType({
    Engine.ROCKSDB: ROCKSDB_TERMS, Engine.FORST: FORST_TERMS})
BY_ENGINE: Mapping[Engine, Mapping[Enactment, RestartCost]] = MappingProxyType({
    Engine.ROCKSDB: MEASURED, Engine.FORST: MEASURED_FORST,
})


def measured_costs(engine: Engine) -> Mapping[Enactment, RestartCost]:
    """What each enactment cost on real Flink with this engine."""
    return BY_ENGINE[engine]


def expected_downtime_s(kind: Enactment, state_bytes: float | None,
                        costs: Mapping[Enactment, RestartCost] = MEASURED) -> float:
    """Seconds the job is expected to stand still when a step is enacted as `kind` with
    `state_bytes` of state (unknown: counted as none)."""
    return round(costs[kind].downtime_s(state_bytes or 0.0), 1)


def enactment(*, parallelism_only: bool, adaptive_scheduler: bool, upgrade_mode: str,
              has_checkpoint: bool) -> Enactment:
    """The cheapest way Flink and its operator can enact a step's fields (a resize in place,
    which leaves them alone, is decided by the controller: controller/realize.py):

    in place when only parallelism changes and the adaptive scheduler runs the job (the
    operator >= 1.7 then rescales through the resource-requirements API); otherwise a
    restart as `spec.job.upgradeMode` says: from the latest checkpoint (`last-state`, if
    one was completed), else from a savepoint.
    """
    if parallelism_only and adaptive_scheduler:
        return Enactment.IN_PLACE
    if upgrade_mode == "last-state" and has_checkpoint:
        return Enactment.LAST_STATE
    return Enactment.SAVEPOINT


def last_state_downtime_s(kind: Enactment, state_bytes: float | None,
                          costs: Mapping[Enactment, RestartCost] = MEASURED) -> float | None:
    """What a step enacted as `kind` would cost as a last-state upgrade instead, when that is
    possible and shorter: a savepoint step of a job with a completed checkpoint (its size
    known). None otherwise. Only a signal: upgradeMode is the user's choice, because
    last-state replays the records since that checkpoint (duplicates in a sink that is not
    transactional) and leaves no savepoint to roll back to."""
    if kind != Enactment.SAVEPOINT or state_bytes is None:
        return None
    instead = expected_downtime_s(Enactment.LAST_STATE, state_bytes, costs)
    return instead if instead < expected_downtime_s(kind, state_bytes, costs) else None



# Learning a deployment's own restart costs. The model above is the prior, worth this many
# observed steps: one slow step (a busy node, a cold image pull) moves the estimate a third
# of the way, three move it 60 %.
PRIOR_STEPS = 2.0
# An observation further than this factor from the model is clipped to it: a step the
# controller saw late (a pass that came late, a job stuck in a crash loop) is not a price.
MAX_RATIO = 4.0


@dataclass(frozen=True)
class ObservedStep:
    """One applied step of this deployment: how it was enacted, its state, and the downtime
    observed from the patch until the job ran again (status.enactments)."""

    kind: Enactment
    state_bytes: float | None
    downtime_s: float


def learned_downtime_s(kind: Enactment, state_bytes: float | None,
                       observed: Sequence[ObservedStep],
                       costs: Mapping[Enactment, RestartCost] = MEASURED) -> float:
    """The expected downtime of a step enacted as `kind`, learned from this deployment's
    observed steps of the same kind with the model as the prior.

    Each observation counts as its ratio to what the model predicts for its own state (so
    steps with other state sizes still inform the scale), clipped to [1/MAX_RATIO,
    MAX_RATIO]; the model adds PRIOR_STEPS ratios of 1. The mean scales the model's
    prediction for `state_bytes`. Other kinds do not count: an in-place rescale says
    nothing about a restart's cold start, and the converse.
    """
    model = expected_downtime_s(kind, state_bytes, costs)
    ratios = []
    for step in observed:
        if step.kind != kind or not step.downtime_s >= 0:
            continue
        predicted = expected_downtime_s(kind, step.state_bytes, costs)
        if predicted <= 0:
            continue
        ratios.append(min(MAX_RATIO, max(1.0 / MAX_RATIO, step.downtime_s / predicted)))
    if not ratios:
        return model
    scale = (PRIOR_STEPS + sum(ratios)) / (PRIOR_STEPS + len(ratios))
    return round(model * scale, 1)


@dataclass(frozen=True)
class RestartFacts:
    """What the policy layer prices a step from: how this deployment would restart (a
    step's fields are not known before the policy decides, so never in place), its state,
    the downtimes its earlier steps were observed to cost, and whether a step that changes
    managed memory only is resized without a restart."""

    kind: Enactment
    state_bytes: float | None
    observed: tuple[ObservedStep, ...] = ()
    engine: Engine = Engine.ROCKSDB  # whose measured costs are the prior
    resizable: bool = False

    @property
    def downtime_s(self) -> float:
        return learned_downtime_s(self.kind, self.state_bytes, self.observed,
                                  measured_costs(self.engine))

    @property
    def resize_downtime_s(self) -> float:
        """What a resize in place costs (nothing stops), learned as restarts are."""
        return learned_downtime_s(Enactment.RESIZE, self.state_bytes, self.observed,
                                  measured_costs(self.engine))
