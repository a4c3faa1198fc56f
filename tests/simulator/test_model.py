"""Job models: the YAML schema, the built-ins, and their clear errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from simulator.model import BUILTIN_JOBS, ModelError, load_model, vertex_id_for

MINIMAL = """
name: tiny
load: {rate: 1000}
operators:
  - {uid: src, name: Source, cpu_us: 1}
  - uid: agg
    name: Aggregate
    cpu_us: 10
    inputs: [{from: src, ship: HASH}]
    state: {keys: 100, value_bytes: 10, access: {read: 0.5, update: 0.5}}
"""


@pytest.mark.parametrize("name", BUILTIN_JOBS)
def test_every_builtin_loads_and_has_a_stateful_or_stateless_graph(name):
    model = load_model(name)
    graph = model.job_graph()
    assert graph.topological_order()[0] == model.sources()[0].vertex_id
    assert all(re.fullmatch(r"[0-9a-f]{32}", v.id) for v in graph.vertices)


def test_paper_facts_are_in_the_builtins():
    assert load_model("q1").load.rate == 2_250_000
    # Q3's ~8 MB and Q5's ~10 MB: tests/simulator/test_docs.py.
    assert load_model("q8").state_bytes > 100e6 and load_model("q11").state_bytes > 100e6
    assert [load_model(n).load.rate for n in ("read", "write", "update")] == [50e3, 50e3, 30e3]
    for name in ("read", "write", "update"):
        state = load_model(name).operators[1].state
        assert state is not None and (state.keys, state.value_bytes) == (1_000_000, 1000)
    assert all(o.state is None for o in load_model("q1").operators)


def test_vertex_ids_are_stable_and_derived_from_uids():
    assert vertex_id_for("q11-session") == vertex_id_for("q11-session")
    assert vertex_id_for("a") != vertex_id_for("b")
    assert load_model("q11").operator("q11-session").vertex_id == vertex_id_for("q11-session")


def test_any_file_is_a_model(tmp_path: Path):
    path = tmp_path / "tiny.yaml"
    path.write_text(MINIMAL)
    model = load_model(path)
    assert model.name == "tiny"
    assert model.operator("agg").state.access.gets_per_record == 1.0  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("cpu_us: 10", "cpu_us: -1"),
         "operators.1 (uid agg).cpu_us: Input should be greater than 0"),
        (("read: 0.5, update: 0.5", "read: 0.5"), "read+write+update must be 1"),
        (("from: src", "from: nowhere"), "reads from unknown uid 'nowhere'"),
        (("uid: agg", "uid: src"), "operators.1 (uid src).uid: duplicate operator uid 'src'"),
        (("name: tiny", "name: tiny\ncolour: blue"), "colour: Extra inputs are not permitted"),
        (("ship: HASH", "ship: HASH}, {from: agg"), "cycle: agg → agg"),
        (("{rate: 1000}", "{pattern: step, rate: 1000}"), "load: Value error, pattern step needs "
                                                          "step_rate"),
        (("{rate: 1000}", "{pattern: diurnal, peak_rate: 9}"), "needs trough_rate"),
        (("{rate: 1000}", "{rate: 1000, step_rate: 5}"), "pattern constant does not use step_rate"),
        (("{rate: 1000}", "{pattern: phases, phases: [{duration_s: 5}]}"),
         "exactly one of rate or ramp_to"),
    ],
)
def test_invalid_models_say_which_field(tmp_path: Path, change, message):
    path = tmp_path / "bad.yaml"
    path.write_text(MINIMAL.replace(*change))
    with pytest.raises(ModelError) as err:
        load_model(path)
    assert str(path) in str(err.value) and message in str(err.value)


def test_unknown_names_list_the_builtins():
    with pytest.raises(ModelError, match="q11"):
        load_model("q99")


def test_every_error_at_once_with_uids_and_named_cycles(tmp_path: Path):
    bad = """
name: broken
load: {pattern: step, rate: 10}
operators:
  - {uid: src, name: Source, cpu_us: 1}
  - {uid: a, name: A, cpu_us: -1, inputs: [{from: src}, {from: c}]}
  - {uid: b, name: B, cpu_us: 1, inputs: [{from: a}, {from: ghost}]}
  - {uid: c, name: C, cpu_us: 1, inputs: [{from: b}], initial_parallelism: 9,
     max_parallelism: 4}
"""
    path = tmp_path / "broken.yaml"
    path.write_text(bad)
    with pytest.raises(ModelError) as err:
        load_model(path)
    lines = str(err.value).splitlines()[1:]
    assert lines == [
        "  load: Value error, pattern step needs step_rate",
        "  operators.1 (uid a).cpu_us: Input should be greater than 0",
        "  operators.2 (uid b).inputs.1.from: reads from unknown uid 'ghost'",
        "  operators.3 (uid c).initial_parallelism: 9 is above max_parallelism 4",
        "  operators: cycle: a → b → c → a",
    ]


def test_loads_that_move():
    from simulator.model import Load

    phases = Load.model_validate({"pattern": "phases", "rate": 100, "phases": [
        {"ramp_to": 300, "duration_s": 100}, {"rate": 50, "duration_s": 50}]})
    assert [phases.rate_at(t) for t in (0, 50, 99.999, 120, 1000)] == pytest.approx(
        [100, 200, 300, 50, 50], abs=0.01)
    assert phases.boundaries(1000) == [0, 100, 150]
    again = phases.model_copy(update={"repeat": True})
    assert again.rate_at(160) == pytest.approx(phases.rate_at(10))
    diurnal = Load.model_validate({"pattern": "diurnal", "peak_rate": 300, "trough_rate": 100,
                                   "period_s": 400, "peak_at_s": 100})
    assert diurnal.rate_at(100) == pytest.approx(300) and diurnal.rate_at(300) == pytest.approx(100)
    assert diurnal.boundaries(800) == [0, 100, 300, 500, 700]


def test_sources_with_their_own_shapes(tmp_path: Path):
    path = tmp_path / "two.yaml"
    path.write_text(MINIMAL.replace(
        "  - {uid: src, name: Source, cpu_us: 1}",
        "  - {uid: src, name: Source, cpu_us: 1}\n"
        "  - {uid: src2, name: Other, cpu_us: 1, load: {pattern: step, rate: 10, step_rate: 20,"
        " step_at_s: 5}}").replace("inputs: [{from: src, ship: HASH}]",
                                    "inputs: [{from: src, ship: HASH}, {from: src2}]"))
    model = load_model(path)
    assert model.target_at(0) == 1010 and model.target_at(6) == 1020
    assert model.peak_target(10) == 1020 and model.boundaries(10) == [0, 5]
