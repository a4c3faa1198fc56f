"""The twin's Flink REST API against real Flink 1.20 responses (issue 12, G0-G10).

Each endpoint's shape (keys, JSON types, label sets) is compared with what a real
MiniCluster answered (tests/golden/flink-1.20/, recorded by flink-plugin's
GoldenRecorder; `statuses.json` has its HTTP status codes), including what Flink
answers for unknown metric names, vertices and jobs. Values are the twin's own.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from policies.restart_cost import Enactment
from simulator.model import load_model
from tests.golden import FLINK_1_20
from tests.simulator.test_serve import Q11, TM, assert_same_shape, wait_for

ADAPTIVE = {**Q11, "jobmanager.scheduler": "adaptive"}
STATUSES: dict[str, int] = json.loads((FLINK_1_20 / "statuses.json").read_text())
TM_METRICS = ("Status.JVM.Memory.Heap.Max,Status.JVM.Memory.Heap.Used,"
              "Status.JVM.Memory.Metaspace.Used,Status.Flink.Memory.Managed.Used,"
              "Status.JVM.GarbageCollector.All.TimeMsPerSecond")
ALL_AGGS = "&agg=min,max,avg,sum,skew"


def golden(name: str) -> Any:
    return json.loads((FLINK_1_20 / name).read_text())


@pytest.fixture
def server():
    from simulator.serve import TwinServer

    with TwinServer(time_scale=20.0, downtime_scale=0.05, tick_interval_s=0.05) as s:
        yield s


@pytest.fixture
def q11(server):
    """A running q11 under the adaptive scheduler with a few virtual seconds of counters:
    (its REST address, job id, vertex ids by uid)."""
    status = server.add_job("default", "q11", ADAPTIVE, TM)
    wait_for(lambda: server.twin("default", "q11").time > 5, "5 s of virtual time")
    vids = {op.uid: op.vertex_id for op in load_model("q11").operators}
    return status["restUrl"], status["jobId"], vids


def get(base: str, path: str) -> requests.Response:
    return requests.get(base + path, timeout=5)


def assert_like_flink(reply: requests.Response, sample: str) -> Any:
    """Same status as Flink's reply recorded in `sample`, and the same shape."""
    assert reply.status_code == STATUSES[sample], (sample, reply.status_code, reply.text[:300])
    body = reply.json()
    assert_same_shape(body, golden(sample), sample)
    return body


# ---- G0/G1: one endpoint per deployment, host:port only, bare and /v1/ ---------------

def test_each_deployment_has_its_own_endpoint_without_a_path_prefix(server):
    a = server.add_job("default", "q11", Q11, TM)
    b = server.add_job("team-a", "q11", Q11, TM)
    assert a["restUrl"] != b["restUrl"]
    for status in (a, b):
        url = status["restUrl"]
        assert url.count("/") == 2, f"{url}: host and port only"
        jobs = requests.get(f"{url}/jobs/overview", timeout=5).json()["jobs"]
        assert [j["jid"] for j in jobs] == [status["jobId"]]
    # The old one-port layout is gone: the server's port serves no Flink REST paths.
    assert requests.get(f"{server.url}/default/q11/jobs/overview", timeout=5).status_code == 404


def test_every_path_is_served_bare_and_under_v1(q11):
    base, jid, vids = q11
    session = vids["q11-session"]
    for path in ("/jobs/overview", f"/jobs/{jid}", f"/jobs/{jid}/plan", f"/jobs/{jid}/config",
                 f"/jobs/{jid}/jobmanager/config", "/jobmanager/metrics", "/taskmanagers",
                 "/taskmanagers/metrics", f"/jobs/{jid}/resource-requirements",
                 f"/jobs/{jid}/vertices/{session}/subtasks/metrics"):
        bare, v1 = get(base, path), get(base, "/v1" + path)
        assert bare.status_code == v1.status_code == 200, path
        assert sorted(map(str, bare.json())) == sorted(map(str, v1.json())), path


def test_unknown_paths_and_jobs_are_flinks_404(q11):
    base, _, _ = q11
    assert_like_flink(get(base, "/v1/no/such/path"), "not-found.json")
    assert_like_flink(get(base, "/v1/jobs/" + "0" * 32), "job-unknown.json")


def test_a_proxy_request_for_the_in_cluster_service_reaches_the_deployment(server):
    status = server.add_job("team-a", "q11", Q11, TM)
    proxies = {"http": server.url}
    for host in ("q11-rest.team-a.svc:8081", "q11-rest.team-a.svc.cluster.local:8081"):
        reply = requests.get(f"http://{host}/v1/jobs/overview", proxies=proxies, timeout=5)
        assert reply.json()["jobs"][0]["jid"] == status["jobId"], host
    other = requests.get("http://q11-rest.nope.svc:8081/jobs/overview", proxies=proxies,
                         timeout=5)
    assert other.status_code == 404


# ---- G2: the job's configuration --------------------------------------------------------

def test_job_jobmanager_config_is_key_value_pairs_with_the_deployments_configuration(q11):
    base, jid, _ = q11
    body = assert_like_flink(get(base, f"/v1/jobs/{jid}/jobmanager/config"),
                             "job-jobmanager-config.json")
    conf = {e["key"]: e["value"] for e in body}
    assert all(isinstance(v, str) for v in conf.values())
    assert conf["jobmanager.scheduler"] == "adaptive"
    assert conf["taskmanager.numberOfTaskSlots"] == "4"


# ---- G3: subtask metrics, listed and aggregated ------------------------------------------

def test_subtask_metrics_list_has_flinks_names_for_a_source(q11):
    base, jid, vids = q11
    source = vids["q11-source"]
    ours = {m["id"] for m in assert_like_flink(
        get(base, f"/v1/jobs/{jid}/vertices/{source}/subtasks/metrics"),
        "subtasks-metrics-list-source.json")}
    theirs = {m["id"] for m in golden("subtasks-metrics-list-source.json")}
    # Task-scope names are Flink's own; operator metrics carry the operator's name.
    task_scope = {n for n in ours if "." not in n}
    assert task_scope <= theirs, task_scope - theirs
    assert {"Source__Nexmark_Bids.numRecordsIn", "Source__Nexmark_Bids.numRecordsOut",
            "Source__Nexmark_Bids.pendingRecords"} <= ours
    flink_source = {n.split(".", 1)[1] for n in theirs if n.startswith("Source__")}
    assert {n.split(".", 1)[1] for n in ours if n.startswith("Source__")} - {
        "pendingRecords"} <= flink_source


def test_subtask_metrics_aggregate_with_every_requested_aggregation(q11):
    base, jid, vids = q11
    source = vids["q11-source"]
    names = "numRecordsIn,numRecordsOut,accumulateBusyTimeMs,Source__Nexmark_Bids.numRecordsIn"
    body = assert_like_flink(
        get(base, f"/v1/jobs/{jid}/vertices/{source}/subtasks/metrics?get={names}{ALL_AGGS}"),
        "subtasks-metrics-source.json")
    assert [m["id"] for m in body] == names.split(",")  # in the order asked for
    by_id = {m["id"]: m for m in body}
    assert by_id["numRecordsIn"]["sum"] == 0  # a source task reads nothing from the network
    # The twin's sources count what they read, as FLIP-27 readers built on SourceReaderBase
    # (Kafka, files) do; the recorded `fromSequence` reader (IteratorSourceReader) counts 0.
    assert by_id["Source__Nexmark_Bids.numRecordsIn"]["sum"] > 0
    assert by_id["numRecordsOut"]["sum"] > 0
    # Only what `agg` names; all five when it is absent (as recorded).
    session = vids["q11-session"]
    some = get(base, f"/jobs/{jid}/vertices/{session}/subtasks/metrics"
                     "?get=busyTimeMsPerSecond&agg=max,sum").json()
    assert set(some[0]) == {"id", "max", "sum"}
    assert_like_flink(get(base, f"/v1/jobs/{jid}/vertices/{session}/subtasks/metrics"
                                "?get=busyTimeMsPerSecond,numRecordsIn"),
                      "subtasks-metrics-default-agg.json")
    assert set(golden("subtasks-metrics-default-agg.json")[0]) == {
        "id", "min", "max", "avg", "sum", "skew"}


def test_subtask_metrics_with_an_unknown_name_or_vertex_are_empty_as_in_flink(q11):
    base, jid, vids = q11
    session = vids["q11-session"]
    assert golden("subtasks-metrics-unknown.json") == []
    reply = get(base, f"/v1/jobs/{jid}/vertices/{session}/subtasks/metrics"
                      f"?get=busyTimeMsPerSecond,noSuchMetric{ALL_AGGS}")
    assert reply.status_code == STATUSES["subtasks-metrics-unknown.json"]
    assert reply.json() == []
    reply = get(base, f"/v1/jobs/{jid}/vertices/{'0' * 32}/subtasks/metrics"
                      "?get=busyTimeMsPerSecond")
    assert reply.status_code == STATUSES["subtasks-metrics-unknown-vertex.json"]
    assert reply.json() == golden("subtasks-metrics-unknown-vertex.json")


def test_skew_is_flinks_score():
    from simulator.flink_format import skew

    assert skew([5.0]) == 0.0
    assert skew([0.0, 0.0]) == 0.0
    assert skew([1.0, 3.0]) == pytest.approx(50.0)  # mean 2, mean deviation 1
    assert skew([0.0, 0.0, 0.0, 12.0]) == 100.0  # capped


# ---- G4: accumulated counters in Prometheus -----------------------------------------------

def test_accumulated_counters_in_prometheus_have_flinks_labels_and_grow(server, q11):
    golden_families = {f.name: f for f in text_string_to_metric_families(
        (FLINK_1_20 / "prom-scrape-counters.txt").read_text())}

    def scrape() -> dict[str, list]:
        text = requests.get(server.url + "/metrics", timeout=5).text
        return {f.name: f.samples for f in text_string_to_metric_families(text)}

    first = scrape()
    for name in ("flink_taskmanager_job_task_numRecordsIn",
                 "flink_taskmanager_job_task_numRecordsOut",
                 "flink_taskmanager_job_task_operator_numRecordsIn",
                 "flink_taskmanager_job_task_operator_numRecordsOut",
                 "flink_taskmanager_job_task_accumulateBusyTimeMs",
                 "flink_taskmanager_Status_JVM_Memory_Heap_Max",
                 "flink_taskmanager_Status_JVM_Memory_Heap_Used",
                 "flink_taskmanager_Status_JVM_Memory_Metaspace_Used",
                 "flink_taskmanager_Status_JVM_GarbageCollector_All_TimeMsPerSecond"):
        assert name in first, name
        theirs = {frozenset(s.labels) for s in golden_families[name].samples}
        assert {frozenset(s.labels) for s in first[name]} <= theirs, name
    source = load_model("q11").operator("q11-source").vertex_id

    def source_read() -> float:
        return sum(s.value for s in scrape()["flink_taskmanager_job_task_operator_numRecordsIn"]
                   if s.labels["operator_id"] == source)

    before = source_read()
    assert before > 0
    wait_for(lambda: source_read() > before, "the source's numRecordsIn to grow")
    assert all(s.value == 0 for s in first["flink_taskmanager_job_task_numRecordsIn"]
               if s.labels["task_id"] == source)


# ---- G6: vertices[].metrics ----------------------------------------------------------------

def test_job_vertices_carry_accumulated_records_and_times(q11):
    base, jid, vids = q11
    reply = get(base, f"/v1/jobs/{jid}")
    assert reply.status_code == STATUSES["job-running.json"]
    job = reply.json()
    # The plan's node order differs from run to run (test_serve checks its shape).
    assert_same_shape({k: v for k, v in job.items() if k != "plan"},
                      {k: v for k, v in golden("job-running.json").items() if k != "plan"},
                      "job-running.json")
    metrics = {v["id"]: v["metrics"] for v in job["vertices"]}
    session = metrics[vids["q11-session"]]
    assert session["read-records"] > 0 and session["write-records"] > 0
    assert session["accumulated-busy-time"] > 0
    assert session["read-records-complete"] is True
    source = metrics[vids["q11-source"]]
    assert source["read-records"] == 0 and source["write-records"] > 0  # as Flink counts
    # busy + backpressured + idle is the time the tasks ran: about 1000 ms per second each.
    for vid, m in metrics.items():
        total = m["accumulated-busy-time"] + m["accumulated-backpressured-time"] + m[
            "accumulated-idle-time"]
        assert total > 0, vid


# ---- G7/G8: JobManager and TaskManager metrics -----------------------------------------

def test_jobmanager_metrics_are_values_as_strings_and_unknown_names_are_left_out(q11):
    base, _, _ = q11
    listed = {m["id"] for m in assert_like_flink(get(base, "/v1/jobmanager/metrics"),
                                                 "jobmanager-metrics-list.json")}
    assert {"taskSlotsTotal", "taskSlotsAvailable"} <= listed
    body = assert_like_flink(get(base, "/v1/jobmanager/metrics?get=taskSlotsTotal,"
                                       "taskSlotsAvailable"), "jobmanager-metrics.json")
    values = {m["id"]: m["value"] for m in body}
    assert values == {"taskSlotsTotal": "4", "taskSlotsAvailable": "1"}  # 1 TM x 4, 3 tasks
    unknown = assert_like_flink(get(base, "/v1/jobmanager/metrics?get=taskSlotsTotal,"
                                          "noSuchMetric"), "jobmanager-metrics-unknown.json")
    assert [m["id"] for m in unknown] == [m["id"] for m in golden(
        "jobmanager-metrics-unknown.json")] == ["taskSlotsTotal"]


def test_taskmanager_metrics_aggregate_over_taskmanagers_and_unknown_names_empty_all(q11):
    base, _, _ = q11
    listed = {m["id"] for m in get(base, "/v1/taskmanagers/metrics").json()}
    assert set(TM_METRICS.split(",")) <= listed
    theirs = {m["id"] for m in golden("taskmanagers-metrics-list.json")}
    assert listed <= theirs, listed - theirs
    body = assert_like_flink(get(base, f"/v1/taskmanagers/metrics?get={TM_METRICS}{ALL_AGGS}"),
                             "taskmanagers-metrics.json")
    by_id = {m["id"]: m for m in body}
    heap = by_id["Status.JVM.Memory.Heap.Max"]["max"]
    assert 0 < by_id["Status.JVM.Memory.Heap.Used"]["max"] < heap
    assert golden("taskmanagers-metrics-unknown.json") == []
    reply = get(base, f"/v1/taskmanagers/metrics?get={TM_METRICS},noSuchMetric{ALL_AGGS}")
    assert reply.status_code == STATUSES["taskmanagers-metrics-unknown.json"]
    assert reply.json() == []


# ---- G9: resource requirements (FLIP-291) ---------------------------------------------------

def test_resource_requirements_need_the_adaptive_scheduler(server):
    status = server.add_job("default", "q11", Q11, TM)  # the default scheduler
    reply = requests.get(f"{status['restUrl']}/v1/jobs/{status['jobId']}/resource-requirements",
                         timeout=5)
    theirs = golden("resource-requirements.json")
    assert reply.status_code == 500
    assert "DefaultScheduler does not support" in reply.json()["errors"][0]
    assert "DefaultScheduler does not support" in theirs["errors"][1]


def test_put_resource_requirements_rescales_in_place(server, q11):
    base, jid, vids = q11
    session = vids["q11-session"]
    path = f"/v1/jobs/{jid}/resource-requirements"
    reply = get(base, path)
    assert reply.status_code == STATUSES["resource-requirements-adaptive.json"]
    before = reply.json()
    theirs = golden("resource-requirements-adaptive.json")
    assert set(before) == set(vids.values())  # keyed by vertex id, each vertex once
    for vid, requirement in before.items():  # each value shaped as Flink's
        assert_same_shape(requirement, next(iter(theirs.values())), vid)
    bad = {**before, "0" * 32: before[session]}
    reply = requests.put(base + path, json=bad, timeout=5)
    assert reply.status_code == STATUSES["resource-requirements-put-unknown-vertex.json"]
    wanted = json.loads(json.dumps(before))
    wanted[session]["parallelism"]["upperBound"] = 3
    reply = requests.put(base + path, json=wanted, timeout=5)
    assert reply.status_code == STATUSES["resource-requirements-put.json"]
    assert reply.json() == golden("resource-requirements-put.json")
    wait_for(lambda: server.status("default", "q11")["state"] == "RUNNING", "the rescale")
    job = get(base, f"/v1/jobs/{jid}").json()  # the same job id
    assert {v["id"]: v["parallelism"] for v in job["vertices"]}[session] == 3
    assert server.twin("default", "q11").configuration[session].parallelism == 3
    assert get(base, path).json()[session]["parallelism"]["upperBound"] == 3
    assert server.status("default", "q11")["restarts"] == 0  # no new job: no savepoint
    # ... and it costs what an in-place rescale costs (policies/restart_cost.py), not a
    # savepoint's restart: a peer driven through this path would otherwise wait ~25x longer.
    twin = server.twin("default", "q11")
    assert twin.last_step == (Enactment.IN_PLACE, twin.downtime_s(Enactment.IN_PLACE))
    assert twin.downtime_s(Enactment.IN_PLACE) < twin.downtime_s(Enactment.SAVEPOINT) / 5
    # Natively the adaptive scheduler's new slots come with TaskManagers: the pods' CPU is
    # what the rescaled job's REST view shows, not the old job's (the twin throttles past it).
    from simulator import flink_format
    hosted = server._get("default", "q11")
    pods = len(flink_format.slot_plan(hosted.job, twin))
    assert pods > 1  # one pod more than the job had before the rescale
    assert twin.cpu_budget == pods * hosted.job.tm_cpu


# ---- G10: restarts keep time sane ------------------------------------------------------------

def assert_sane_times(job: dict[str, Any], overview: dict[str, Any]) -> None:
    now = job["now"]
    assert job["duration"] >= 0 and job["start-time"] <= now
    assert all(t <= now for t in job["timestamps"].values())
    for entry in overview["jobs"]:
        assert entry["duration"] >= 0 and entry["start-time"] <= now + 1000


@pytest.mark.parametrize("in_place", [False, True])
def test_a_restarting_job_has_no_negative_duration_or_future_start(in_place):
    from simulator.serve import TwinServer

    with TwinServer(time_scale=1.0, downtime_scale=1.0, tick_interval_s=0.05) as server:
        server.add_job("default", "q11", ADAPTIVE, TM)
        session = load_model("q11").operator("q11-session").vertex_id
        conf = {**ADAPTIVE, "pipeline.jobvertex-parallelism-overrides": f"{session}:2"}
        status = server.reconfigure("default", "q11", conf, in_place=in_place)
        assert status["state"] == "RESTARTING"
        base, jid = status["restUrl"], status["jobId"]
        for _ in range(3):
            job = get(base, f"/v1/jobs/{jid}").json()
            assert job["state"] == "RESTARTING"
            assert_sane_times(job, get(base, "/v1/jobs/overview").json())
            if in_place:  # a new execution graph of the same job, not running yet
                assert job["timestamps"]["CREATED"] > job["timestamps"]["INITIALIZING"]
                assert job["timestamps"]["RUNNING"] == 0
            time.sleep(0.05)
