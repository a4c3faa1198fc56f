"""docs/simulator.md against the code: the job-model reference and the Nexmark table."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from bench.simulate_all import DOC as DOC_PATH
from bench.simulate_all import (
    FIG4_BEGIN,
    FIG4_END,
    PODS_BEGIN,
    PODS_END,
    README,
    documented,
    fig4_grid,
    pods_table,
    results,
)
from simulator.model import JobModel, Load, load_model
from simulator.results import RunResult

DOC = DOC_PATH.read_text()


def section(title: str) -> str:
    start = DOC.index(f"\n## {title}\n")
    end = DOC.find("\n## ", start + 1)
    return DOC[start:end]


def reference() -> dict[str, Any]:
    """The commented example under "Job models", which documents every field."""
    block = re.search(r"```yaml\n(.*?)```", section("Job models"), re.S)
    assert block, "docs/simulator.md lost its job-model reference"
    doc: dict[str, Any] = yaml.safe_load(block.group(1))
    return doc


def load_examples() -> list[dict[str, Any]]:
    """The load patterns listed under "Loads" (one reference holds only one pattern)."""
    blocks = re.findall(r"```yaml\n(.*?)```", section("Job models"), re.S)
    assert len(blocks) >= 2, "docs/simulator.md lost its load examples"
    examples: list[dict[str, Any]] = yaml.safe_load(blocks[1])
    return examples


def undocumented(schema: type[BaseModel], documented: list[dict[str, Any]], where: str
                 ) -> list[str]:
    """Fields of `schema` (by their YAML name) that no documented instance spells out."""
    missing = []
    for name, field in schema.model_fields.items():
        key = field.alias or name
        present = [d[key] for d in documented if key in d]
        if not present:
            missing.append(f"{where}.{key}")
            continue
        for nested in _models(field.annotation):
            items = [x for p in present for x in (p if isinstance(p, list) else [p])]
            mine = [x for x in items if isinstance(x, dict) and _is(nested, x)]
            if mine:
                missing += undocumented(nested, mine, f"{where}.{key}")
            elif set(nested.model_fields) != {"kind"}:  # a bare kind needs no example
                missing.append(f"{where}.{key} ({nested.__name__})")
    return missing


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field holds (through `X | None`, `tuple[X, ...]`, unions)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) for m in _models(arg)]


def _is(schema: type[BaseModel], value: dict[str, Any]) -> bool:
    """Whether `value` is an instance of `schema` (tagged unions: by its `kind`)."""
    kind = schema.model_fields.get("kind")
    return kind is None or value.get("kind") in getattr(kind.annotation, "__args__", ())


def test_the_reference_example_is_a_valid_model():
    JobModel.model_validate(reference())
    for example in load_examples():
        Load.model_validate(example)


def test_every_model_field_is_in_the_reference():
    assert undocumented(JobModel, with_loads(reference()), "") == []


def with_loads(reference: dict[str, Any]) -> list[dict[str, Any]]:
    """The reference plus the load examples, as the job's and as a source's load."""
    examples = load_examples()
    return [reference, *({"load": e} for e in examples),
            {"operators": [{"load": e} for e in examples]}]


def test_the_reference_check_notices_a_missing_field():
    doc = reference()
    del doc["rocksdb"]["misses_per_put"]
    del doc["operators"][1]["state"]["distribution"]
    assert undocumented(JobModel, with_loads(doc), "") == [
        ".operators.state.distribution", ".rocksdb.misses_per_put"]


NEXMARK = ("q1", "q2", "q3", "q5", "q8", "q11")
SIZE = re.compile(r"^([\d.]+)([kM]) [\w ]+? × ([\d,]+) B ≈ ([\d.]+) (MB|GB)")


def nexmark_rows() -> dict[str, list[str]]:
    rows = {}
    for line in section("Nexmark models").splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] in NEXMARK:
            rows[cells[0]] = cells
    return rows


@pytest.mark.parametrize("job", NEXMARK)
def test_the_nexmark_table_states_the_yamls_state(job):
    state_cell = nexmark_rows()[job][2]
    stateful = [o.state for o in load_model(job).operators if o.state is not None]
    if state_cell == "none":
        assert stateful == []
        return
    size = SIZE.match(state_cell)
    assert size, state_cell
    count, unit, entry, total, total_unit = size.groups()
    (state,) = stateful
    assert state.keys == float(count) * {"k": 1e3, "M": 1e6}[unit]
    assert state.value_bytes + state.key_bytes == int(entry.replace(",", ""))
    scale = {"MB": 1e6, "GB": 1e9}[total_unit]
    decimals = len(total.partition(".")[2])
    # "≈ 1.8 GB" is right when the state rounds to it: within half the last digit.
    assert abs(state.total_bytes - float(total) * scale) <= 0.5 * 10**-decimals * scale


def test_the_paper_state_sizes_follow_from_the_yaml():
    # Justin §5.1: Q3's state converges to ~8 MB, Q5's stays ~10 MB.
    assert load_model("q3").state_bytes == pytest.approx(8e6, rel=0.05)
    assert load_model("q5").state_bytes == pytest.approx(10e6, rel=0.05)


REGENERATE = "stale: run python -m bench.simulate_all --update-doc"


@pytest.fixture(scope="module")
def generated() -> tuple[str, dict[str, dict[str, RunResult]]]:
    """The results table and the runs behind it (seed 0), computed once for this module."""
    runs: dict[str, dict[str, RunResult]] = {}
    table, _ = results(None, runs)
    return table, runs


def test_the_documented_results_are_what_the_code_gives(
        generated: tuple[str, dict[str, dict[str, RunResult]]]) -> None:
    """The results table (docs/simulator.md, README.md) and the twin's Figure 4 grid
    are generated; a change to the policies or the twin must regenerate them."""
    table, _ = generated
    assert documented(DOC_PATH) == table, f"docs/simulator.md results {REGENERATE}"
    assert documented(README) == table, f"README.md results {REGENERATE}"
    assert documented(DOC_PATH, FIG4_BEGIN, FIG4_END) == fig4_grid(), f"Figure 4 {REGENERATE}"


@pytest.mark.slow
def test_the_documented_pod_table_is_what_the_code_gives(
        generated: tuple[str, dict[str, dict[str, RunResult]]]) -> None:
    """The table in pods (docs/simulator.md, README.md) is generated too: seeds 1 and 2 and
    the pod oracle are computed here (about a minute)."""
    pods = pods_table(generated[1])
    assert documented(DOC_PATH, PODS_BEGIN, PODS_END) == pods, f"docs pods table {REGENERATE}"
    assert documented(README, PODS_BEGIN, PODS_END) == pods, f"README pods table {REGENERATE}"
