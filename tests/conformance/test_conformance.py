"""Our DS2 against upstream's flink-autoscaler on recorded metric windows.

Each case in cases/ holds upstream's recorded answer; our DS2 must give the same
parallelism or the one the case records under a listed deviation. The recorded
answers are checked against upstream's evaluator itself (`bench/peer`, built by
`make test`), so neither side can drift unnoticed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from policies.upstream import DEVIATIONS, cpu_scaling, deviation, deviations_markdown
from tests.conformance.cases import CASES, ROOT, load, ours, upstream

PATHS = sorted(CASES.glob("*.json"))


def test_there_are_cases_of_every_kind() -> None:
    names = {p.stem for p in PATHS}
    assert len(names) >= 20
    assert any(n.startswith("twin-") for n in names)
    assert {"source-at-bound-without-backlog", "excluded-sink-overloaded",
            "keyed-max-parallelism-128", "scale-down-waits-for-interval"} <= names


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_ours_matches_upstream_or_a_listed_deviation(path: Path) -> None:
    case = load(path)
    expect: dict[str, Any] = case["expect"]
    mine = ours(case)
    if "deviation" not in expect:
        assert mine == expect["upstream"], case["description"]
        return
    deviation(expect["deviation"])  # raises for an unlisted id
    assert mine == expect["ours"], case["description"]
    assert mine != expect["upstream"], f"{path.stem}: no longer deviates, drop the deviation"


def test_upstream_answers_as_recorded() -> None:
    cases = {p.stem: load(p) for p in PATHS}
    answers = upstream(cases)
    wrong = {n: a for n, a in answers.items() if a != cases[n]["expect"]["upstream"]}
    assert not wrong, f"upstream's evaluator now answers differently: {wrong}"


def test_docs_show_the_deviation_list() -> None:
    doc = (ROOT / "docs" / "policies.md").read_text()
    begin, end = "<!-- deviations:begin -->\n", "<!-- deviations:end -->"
    assert doc[doc.index(begin) + len(begin):doc.index(end)] == deviations_markdown()
    assert len({d.id for d in DEVIATIONS}) == len(DEVIATIONS)


def test_upstream_options_map_onto_our_parameters() -> None:
    cpu = cpu_scaling({"job.autoscaler.metrics.busy-time.aggregator": "AVG",
                       "job.autoscaler.vertex.exclude.ids": "a1, b2",
                       "job.autoscaler.scale-down.interval": "90 s",
                       "job.autoscaler.catch-up.duration": "1500"})
    assert (cpu.utilization_min, cpu.utilization_target, cpu.utilization_max) == pytest.approx(
        (0.4, 0.7, 1.0))
    assert cpu.scale_down_delay == 90 and cpu.catch_up_duration == 1.5  # bare: milliseconds
    assert cpu.restart_time == 300 and cpu.backlog_lag_threshold == 300
    assert cpu.excludes("b2", ()) and not cpu.excludes("c3", ())
    with pytest.raises(ValueError, match=r"busy-time\.aggregator"):
        cpu_scaling({})  # upstream's default MAX is a deviation we do not follow
    with pytest.raises(ValueError, match=r"observed-scalability\.enabled"):
        cpu_scaling({"job.autoscaler.metrics.busy-time.aggregator": "AVG",
                     "job.autoscaler.observed-scalability.enabled": "true"})
    with pytest.raises(ValueError, match=r"scale-down\.interval: invalid duration"):
        cpu_scaling({"job.autoscaler.metrics.busy-time.aggregator": "AVG",
                     "job.autoscaler.scale-down.interval": "soon"})
