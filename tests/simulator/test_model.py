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
        (("cpu_us: 10", "cpu_us: -1"), "operators.1.cpu_us: Input should be greater than 0"),
        (("read: 0.5, update: 0.5", "read: 0.5"), "read+write+update must be 1"),
        (("from: src", "from: nowhere"), "reads from unknown uid 'nowhere'"),
        (("uid: agg", "uid: src"), "duplicate operator uids"),
        (("name: tiny", "name: tiny\ncolour: blue"), "colour: Extra inputs are not permitted"),
        (("ship: HASH", "ship: HASH}, {from: agg"), "cycle"),
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
