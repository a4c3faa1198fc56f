"""PromQL string escaping, checked by a real Prometheus: a hostile value matches itself only."""

from __future__ import annotations

import pytest
import requests

from controller.adapters.promql import BUSY, job_queries, quote, selector

from .conftest import Exporter, wait_for
from .promproc import PrometheusProcess

HOSTILE = [
    'quote"inside',
    "back\\slash",
    "trailing\\",
    '\\"',
    "new\nline",
    "tab\there",
    'x"} or vector(1) or {job_id="',
    '"}[5m]) or up{job="',
    "é日本語🙂",
    "plain",
]


def exposition_value(value: str) -> str:
    # The text format's own escaping, as a Flink reporter would write it.
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        ("abc", '"abc"'),
        ('a"b', '"a\\"b"'),
        ("a\\b", '"a\\\\b"'),
        ("a\nb\rc\td", '"a\\nb\\rc\\td"'),
        ("\x00\x1b\x7f", '"\\x00\\x1b\\x7f"'),
        ("é🙂", '"é🙂"'),
    ],
)
def test_quote(value: str, literal: str) -> None:
    assert quote(value) == literal


def test_queries_group_by_vertex_and_filter_by_job() -> None:
    q = job_queries('j"1', 5.0)
    assert q.busy_avg == f'avg by (task_id) ({BUSY}{{job_id="j\\"1"}})'
    assert q.cache_capacity.startswith("max by (task_id)")
    assert "rate(" in q.cache_hits and "[20s]" in q.cache_hits
    assert selector("x", "j", name_is_regex=True) == '{__name__=~"x", job_id="j"}'


def test_hostile_values_match_exactly_in_real_prometheus(
    prometheus: PrometheusProcess, exporter: Exporter
) -> None:
    lines = [
        f'hostile_probe{{job_id="{exposition_value(v)}",n="{i}"}} {i}'
        for i, v in enumerate(HOSTILE)
    ]
    exporter.bodies["/hostile"] = lambda: "\n".join(lines) + "\n"

    def query(promql: str) -> list[dict[str, object]]:
        r = requests.get(f"{prometheus.url}/api/v1/query", params={"query": promql}, timeout=5)
        body = r.json()
        assert body["status"] == "success", (promql, body)
        return list(body["data"]["result"])

    wait_for(lambda: len(query("hostile_probe")) == len(HOSTILE), what="hostile series scraped")
    for i, value in enumerate(HOSTILE):
        result = query(selector("hostile_probe", value))
        assert len(result) == 1, (value, result)
        labels = result[0]["metric"]
        assert isinstance(labels, dict)
        assert labels["job_id"] == value and labels["n"] == str(i)
