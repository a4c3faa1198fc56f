"""The REST adapter against real Flink 1.20.5 answers (golden samples)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from controller.adapters.flink_rest import (
    FlinkRest,
    FlinkRestError,
    operator_id,
    parse_job_graph,
    pick_job,
    uids_from_config,
)
from policies.model import ShipStrategy

from .conftest import SAMPLES

JID = "cf36d4c97f3d593e608a9d13dd79ec51"
SOURCE = "855ea4d5a8f6a78f8e07cce575669ad4"
COUNTER = "a54a21bf9142a9afd43421e4154b1409"


def sample(name: str) -> Any:
    return json.loads((SAMPLES / name).read_text())


def test_operator_id_is_flinks_hash_of_the_uid() -> None:
    # The golden job's uids, confirmed by the ids Flink printed for them.
    assert operator_id("random-key-source") == SOURCE
    assert operator_id("stateful-counter") == COUNTER
    assert operator_id("key-map") == "eb8adfa29a499c04cb21f456def833f2"
    assert operator_id("discard-sink") == "944a180b15f418fe526e0a41072d55d4"


def test_golden_job_graph() -> None:
    chained = {SOURCE: ["eb8adfa29a499c04cb21f456def833f2"],
               COUNTER: ["944a180b15f418fe526e0a41072d55d4"]}
    graph = parse_job_graph(
        sample("job.json"), sample("plan.json"),
        ["discard-sink", "stateful-counter", "key-map", "random-key-source", "not-in-this-job"],
        chained,
    )
    assert [v.id for v in graph.vertices] == [SOURCE, COUNTER]
    source, counter = graph.vertex(SOURCE), graph.vertex(COUNTER)
    assert source.name == "Source: Random Key Source (gen/v1) -> Key Map: x -> x % N"
    assert (source.parallelism, source.max_parallelism) == (2, 128)
    assert set(source.operator_uids) == {"random-key-source", "key-map"}
    assert set(counter.operator_uids) == {"stateful-counter", "discard-sink"}
    assert len(graph.edges) == 1
    edge = graph.edges[0]
    assert (edge.source, edge.target, edge.ship_strategy) == (SOURCE, COUNTER, ShipStrategy.HASH)
    assert graph.topological_order() == (SOURCE, COUNTER)


def test_chain_heads_are_found_without_operator_ids() -> None:
    uids = ["stateful-counter", "key-map"]
    graph = parse_job_graph(sample("job.json"), sample("plan.json"), uids)
    assert graph.vertex(COUNTER).operator_uids == ("stateful-counter",)
    assert graph.vertex(SOURCE).operator_uids == ()


def test_pick_job_prefers_the_running_one() -> None:
    job = pick_job(sample("jobs-overview.json"))
    assert job is not None and (job.jid, job.state) == (JID, "RUNNING")
    old = {"jid": "old", "state": "CANCELED", "start-time": 2_000_000_000_000}
    overview = {"jobs": [old, *sample("jobs-overview.json")["jobs"]]}
    assert pick_job(overview).jid == JID  # type: ignore[union-attr]
    assert pick_job({"jobs": []}) is None


def test_uids_from_config() -> None:
    assert uids_from_config(sample("job-config.json")) == ()
    config = {"execution-config": {"user-config": {"hybridscaler.operator-uids": "a, b/c ,,d"}}}
    assert uids_from_config(config) == ("a", "b/c", "d")


class GoldenJobManager:
    """Serves the golden answers over HTTP, so the client's requests are real."""

    def __init__(self) -> None:
        routes = {
            "/jobs/overview": sample("jobs-overview.json"),
            f"/jobs/{JID}": sample("job.json"),
            f"/jobs/{JID}/plan": sample("plan.json"),
            # The job's metrics answer as the JobManager's do (jobmanager-metrics.json,
            # recorded from Flink 1.20): a list of ids and string values.
            f"/jobs/{JID}/metrics?get=numRestarts": [{"id": "numRestarts", "value": "2"}],
            f"/jobs/{JID}/jobmanager/config": sample("job-jobmanager-config.json"),
            f"/jobs/{JID}/config": {
                **sample("job-config.json"),
                "execution-config": {"user-config": {
                    "hybridscaler.operator-uids": "random-key-source,stateful-counter"}},
            },
        }

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = json.dumps(routes.get(self.path, {"errors": ["Not found"]})).encode()
                self.send_response(200 if self.path in routes else 404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture(scope="module")
def jobmanager() -> Iterator[GoldenJobManager]:
    jm = GoldenJobManager()
    yield jm
    jm.server.shutdown()


def test_client_reads_the_graph_over_http(jobmanager: GoldenJobManager) -> None:
    client = FlinkRest(jobmanager.url + "/")
    job = client.job()
    assert job is not None and job.jid == JID
    assert job.restarts == 2  # numRestarts: a failover in place shows only there
    graph = client.job_graph(job.jid)
    assert graph.vertex(SOURCE).operator_uids == ("random-key-source",)
    assert graph.vertex(COUNTER).operator_uids == ("stateful-counter",)


def test_client_reads_only_the_keys_it_asks_of_the_jobmanagers_configuration(
        jobmanager: GoldenJobManager) -> None:
    client = FlinkRest(jobmanager.url)
    keys = ["metrics.job.status.enable", "job.autoscaler.enabled"]
    assert client.configuration(JID, keys) == {
        "metrics.job.status.enable": "STATE;CURRENT_TIME;TOTAL_TIME"}  # Flink 1.20.5's
    assert client.configuration("0" * 32, keys) is None  # 404: not answered


@pytest.mark.parametrize("answer, read", [
    ({"errors": ["x"]}, None), ("true", None),
    ([{"key": "job.autoscaler.enabled", "value": True}, ["job.autoscaler.enabled", "true"],
      {"key": ["job.autoscaler.enabled"], "value": "true"}, {"key": {"a": 1}, "value": "x"},
      {"key": "rest.address", "value": "http://evil.example"},
      {"key": "job.autoscaler.scaling.enabled", "value": "false"}],
     {"job.autoscaler.scaling.enabled": "false"}),
])
def test_an_unusable_jobmanager_configuration_is_not_read(answer: object,
                                                          read: object) -> None:
    client = FlinkRest("http://127.0.0.1:9")
    client._get_json = lambda path, params=None: answer  # type: ignore[method-assign]
    assert client.configuration(JID, ["job.autoscaler.enabled",
                                      "job.autoscaler.scaling.enabled"]) == read


@pytest.mark.parametrize("answer", [
    {"errors": ["Not found"]}, [], [{"id": "numRestarts", "value": "NaN"}],
    [{"id": "numRestarts", "value": "-1"}], [{"id": "numRestarts"}], ["numRestarts"]])
def test_an_unusable_num_restarts_is_unknown_not_an_error(answer: object) -> None:
    client = FlinkRest("http://127.0.0.1:9")
    client._get_json = lambda path, params=None: answer  # type: ignore[method-assign]
    assert client._restarts(JID) is None


def test_client_errors_name_the_url(jobmanager: GoldenJobManager) -> None:
    with pytest.raises(FlinkRestError, match="answered HTTP 404"):
        FlinkRest(jobmanager.url).job_graph("0" * 32)
    with pytest.raises(FlinkRestError, match="unreachable"):
        FlinkRest("http://127.0.0.1:9", timeout_s=1).job()


LURE = "Visit http://evil.example/login to re-authenticate your cluster"


def test_a_malformed_job_graph_is_refused_without_repeating_the_answer() -> None:
    job = sample("job.json")
    job["vertices"][0]["parallelism"] = LURE  # a JobManager, or what poses as one
    client = FlinkRest("http://127.0.0.1:9")
    answers = {f"/jobs/{JID}": job, f"/jobs/{JID}/plan": sample("plan.json"),
               f"/jobs/{JID}/config": {}}
    client._get = lambda path: answers[path]  # type: ignore[method-assign]
    with pytest.raises(FlinkRestError) as raised:
        client.job_graph(JID)
    assert "evil.example" not in str(raised.value) and JID in str(raised.value)
    assert raised.value.__cause__ is None


def test_a_job_listed_under_no_job_id_is_not_read() -> None:
    overview = {"jobs": [{"jid": "PLEASE-RE-LOGIN-AT-evil.example", "state": "RUNNING",
                          "start-time": 2_000_000_000_000}, *sample("jobs-overview.json")["jobs"]]}
    job = pick_job(overview)
    assert job is not None and job.jid == JID
    assert pick_job({"jobs": [{"jid": LURE, "state": "RUNNING"}]}) is None


@pytest.mark.parametrize("part", ["vertices", "edges", "uids"])
def test_a_job_larger_than_the_controller_scales_is_refused_before_it_is_parsed(
        part: str) -> None:
    from controller.adapters import flink_rest

    job, plan, config = sample("job.json"), sample("plan.json"), {}
    if part == "vertices":
        job["vertices"] = job["vertices"] * (flink_rest.MAX_VERTICES // 2 + 1)
    elif part == "edges":
        nodes = (job["plan"] if "plan" in job else plan["plan"])["nodes"]
        node = next(n for n in nodes if n.get("inputs"))
        node["inputs"] = node["inputs"] * (flink_rest.MAX_EDGES + 1)
    else:
        many = ",".join(f"u{i}" for i in range(flink_rest.MAX_OPERATOR_UIDS + 1))
        config = {"execution-config": {"user-config": {"hybridscaler.operator-uids": many}}}
    client = FlinkRest("http://127.0.0.1:9")
    answers = {f"/jobs/{JID}": job, f"/jobs/{JID}/plan": plan, f"/jobs/{JID}/config": config}
    client._get = lambda path: answers[path]  # type: ignore[method-assign]
    with pytest.raises(FlinkRestError) as raised:
        client.job_graph(JID)
    assert raised.value.kind == "too-large" and "at most" in str(raised.value)
