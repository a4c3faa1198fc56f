"""The restart cost model: fitted to the measured step costs, and which enactment applies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from policies.params import ScalingParams, restart_cost
from policies.restart_cost import (
    MEASURED,
    MEASURED_FORST,
    PRIOR_STEPS,
    Enactment,
    Engine,
    ObservedStep,
    RestartCost,
    RestartFacts,
    enactment,
    engine_of,
    expected_downtime_s,
    last_state_downtime_s,
    learned_downtime_s,
    measured_costs,
)

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
STEPS = RESULTS / "realflink-steps.json"
FORST_STEPS = [RESULTS / f"realflink-steps-forst-async-2.2-{n}.json" for n in ("100k", "400k")]


RESIZES = sorted(RESULTS.glob("realflink-resize*.json"))


def test_the_model_reproduces_every_measured_step() -> None:
    """The constants are the ones the bench measured: re-measure, and this says to refit."""
    measured = json.loads(STEPS.read_text())["steps"]
    assert {s["kind"] for s in measured} | {"resize"} == {k.value for k in Enactment}
    for step in measured:
        expected = expected_downtime_s(Enactment(step["kind"]), step["stateBytes"])
        assert expected == pytest.approx(step["downtimeS"], abs=3.5), step


def test_a_resize_costs_what_the_agent_measured() -> None:
    """bench.realflink_resize's in-place steps (its 'in-place' is the agent's resize): the job
    never stopped, whatever its state."""
    resized = [step for path in RESIZES for step in json.loads(path.read_text())["steps"]
               if step["kind"] == "in-place"]
    assert len(resized) >= 2
    for step in resized:
        assert step["sameJob"] and step["restarts"] == 0
        assert expected_downtime_s(Enactment.RESIZE, 10e9) == step["downtimeS"] == 0.0


def test_downtime_grows_with_state_except_in_place() -> None:
    small, large = 10e6, 1e9
    for kind in (Enactment.SAVEPOINT, Enactment.LAST_STATE):
        assert expected_downtime_s(kind, large) > expected_downtime_s(kind, small)
    assert expected_downtime_s(Enactment.IN_PLACE, large) == MEASURED[Enactment.IN_PLACE].fixed_s
    assert expected_downtime_s(Enactment.SAVEPOINT, None) == MEASURED[Enactment.SAVEPOINT].fixed_s
    # No savepoint to write: from ~25 MB of equal state on, last-state is the cheaper restart.
    assert (expected_downtime_s(Enactment.LAST_STATE, 100e6)
            < expected_downtime_s(Enactment.SAVEPOINT, 100e6))


@pytest.mark.parametrize(("parallelism_only", "adaptive", "mode", "checkpoint", "kind"), [
    (True, True, "savepoint", False, Enactment.IN_PLACE),
    (True, True, "last-state", True, Enactment.IN_PLACE),
    (False, True, "last-state", True, Enactment.LAST_STATE),
    (True, False, "last-state", True, Enactment.LAST_STATE),
    (True, False, "last-state", False, Enactment.SAVEPOINT),  # nothing to restore from
    (False, False, "savepoint", True, Enactment.SAVEPOINT),
])
def test_the_cheapest_enactment_the_deployment_allows(
        parallelism_only: bool, adaptive: bool, mode: str, checkpoint: bool,
        kind: Enactment) -> None:
    assert enactment(parallelism_only=parallelism_only, adaptive_scheduler=adaptive,
                     upgrade_mode=mode, has_checkpoint=checkpoint) == kind


def test_the_policy_prices_a_resizable_memory_step_without_downtime() -> None:
    resizing = ScalingParams(restart=RestartFacts(Enactment.SAVEPOINT, 1e9, resizable=True))
    assert resizing.step_downtime_s(memory_only=True) == 0.0
    assert resizing.step_downtime_s(memory_only=False) == resizing.restart_downtime_s > 40
    fixed = ScalingParams(restart=RestartFacts(Enactment.SAVEPOINT, 1e9))
    assert fixed.step_downtime_s(memory_only=True) == fixed.restart_downtime_s > 40
    # The restart a resize saves is priced as the policy's pay-back rule prices steps.
    assert restart_cost(10.0, resizing, memory_only=True) == 0.0
    assert restart_cost(10.0, resizing) > 0.0


def test_a_savepoint_step_with_a_checkpoint_says_what_last_state_would_cost() -> None:
    # 100 MB: no savepoint to write saves 100/46.7 s, the kill costs 0.54 s.
    saving = last_state_downtime_s(Enactment.SAVEPOINT, 100e6)
    assert saving == expected_downtime_s(Enactment.LAST_STATE, 100e6)
    assert saving is not None and saving < expected_downtime_s(Enactment.SAVEPOINT, 100e6)
    # 10 GB: minutes saved.
    big = last_state_downtime_s(Enactment.SAVEPOINT, 10e9)
    assert big is not None and expected_downtime_s(Enactment.SAVEPOINT, 10e9) - big > 200
    # Nothing to say: no completed checkpoint, a step that is not a savepoint one, or a
    # state so small that the kill costs more than the savepoint it saves.
    assert last_state_downtime_s(Enactment.SAVEPOINT, None) is None
    assert last_state_downtime_s(Enactment.LAST_STATE, 100e6) is None
    assert last_state_downtime_s(Enactment.IN_PLACE, 100e6) is None
    assert last_state_downtime_s(Enactment.SAVEPOINT, 1e6) is None
    slow_kill = {**MEASURED, Enactment.LAST_STATE: RestartCost(60.0, None, 46.7)}
    assert last_state_downtime_s(Enactment.SAVEPOINT, 100e6, slow_kill) is None


# ---- learned per deployment (issue 22, item 5) ----------------------------------------------

SP = Enactment.SAVEPOINT


def test_without_observations_the_model_is_the_estimate() -> None:
    assert learned_downtime_s(SP, 100e6, ()) == expected_downtime_s(SP, 100e6)


def test_observed_downtimes_move_the_estimate_from_the_model_towards_them() -> None:
    model = expected_downtime_s(SP, 100e6)
    slow = [ObservedStep(SP, 100e6, 2 * model)] * 3
    # Three steps at twice the model against the prior's PRIOR_STEPS at the model.
    want = model * (PRIOR_STEPS + 3 * 2.0) / (PRIOR_STEPS + 3)
    assert learned_downtime_s(SP, 100e6, slow) == pytest.approx(want, abs=0.1)
    assert model < learned_downtime_s(SP, 100e6, slow) < 2 * model
    fast = [ObservedStep(SP, 100e6, model / 2)] * 20
    assert learned_downtime_s(SP, 100e6, fast) < 0.6 * model  # many steps: the data wins


def test_observations_scale_with_their_own_state_size() -> None:
    # Observed at 1 GB, asked at 100 MB: the ratio to the model carries over, not the seconds.
    big = expected_downtime_s(SP, 1e9)
    learned = learned_downtime_s(SP, 100e6, [ObservedStep(SP, 1e9, big)] * 5)
    assert learned == pytest.approx(expected_downtime_s(SP, 100e6), abs=0.1)


def test_other_kinds_and_outliers_do_not_set_the_price() -> None:
    model = expected_downtime_s(SP, None)
    in_place = [ObservedStep(Enactment.IN_PLACE, None, 3.0)] * 10
    assert learned_downtime_s(SP, None, in_place) == model
    stuck = [ObservedStep(SP, None, 3600.0)]  # seen an hour late: clipped to 4x the model
    assert learned_downtime_s(SP, None, stuck) == pytest.approx(
        model * (PRIOR_STEPS + 4) / (PRIOR_STEPS + 1), abs=0.1)


def test_restart_facts_price_a_restart_as_learned() -> None:
    facts = RestartFacts(SP, 100e6, (ObservedStep(SP, 100e6, 90.0),))
    assert facts.downtime_s == learned_downtime_s(SP, 100e6, facts.observed)


def test_the_forst_model_reproduces_every_measured_forst_step() -> None:
    """Flink 2.2 with ForSt and asynchronous state, two state sizes (the machine's load, 25-32
    on 2 cores, spreads restarts by ±9 s)."""
    sizes = []
    for path in FORST_STEPS:
        doc = json.loads(path.read_text())
        assert doc["stateBackend"] == "forst" and doc["jobClass"].endswith("AsyncStateJob")
        for step in doc["steps"]:
            assert step["countMismatches"] == 0, step  # the state came back whole
            expected = expected_downtime_s(Enactment(step["kind"]), step["stateBytes"],
                                           MEASURED_FORST)
            assert expected == pytest.approx(step["downtimeS"], abs=9.0), step
            if step["kind"] == "savepoint":
                sizes.append(step["stateBytes"])
    assert max(sizes) > 3 * min(sizes)  # two sizes, not one twice


def test_a_forst_last_state_step_does_not_grow_with_state() -> None:
    forst, rocksdb = measured_costs(Engine.FORST), measured_costs(Engine.ROCKSDB)
    assert rocksdb is MEASURED
    small, large = 100e6, 10e9
    assert (expected_downtime_s(Enactment.LAST_STATE, large, forst)
            == expected_downtime_s(Enactment.LAST_STATE, small, forst))
    assert (expected_downtime_s(Enactment.LAST_STATE, large, rocksdb)
            > expected_downtime_s(Enactment.LAST_STATE, small, rocksdb) + 100)
    # A savepoint still writes and reads the whole state back.
    assert (expected_downtime_s(Enactment.SAVEPOINT, large, forst)
            > expected_downtime_s(Enactment.SAVEPOINT, small, forst) + 100)
    # So on ForSt, last-state saves more the larger the state.
    saving = last_state_downtime_s(Enactment.SAVEPOINT, large, forst)
    assert saving is not None and saving == expected_downtime_s(
        Enactment.LAST_STATE, large, forst)


@pytest.mark.parametrize(("backend", "engine"), [
    ("forst", Engine.FORST), (" ForSt ", Engine.FORST), ("rocksdb", Engine.ROCKSDB),
    ("hashmap", Engine.ROCKSDB), ("", Engine.ROCKSDB),
])
def test_engine_of_the_state_backend(backend: str, engine: Engine) -> None:
    assert engine_of(backend) == engine
