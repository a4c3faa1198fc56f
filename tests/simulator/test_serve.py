"""Serve mode against the golden scrape and REST samples of a real Flink 1.20.5 job."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from simulator.model import load_model
from simulator.serve import ConfigError, TwinServer, configuration_from_flink
from tests.golden import FLINK_1_20

SAMPLES = FLINK_1_20
# Column-family metrics carry the state name in the metric name: compare them by shape.
STATE_CF = re.compile(
    r"^(flink_taskmanager_job_task_operator_)\w+?"
    r"(_rocksdb_(?:block_cache_capacity|block_cache_usage|estimate_live_data_size))$"
)

Q11 = {"hybridscaler.twin.job-model": "q11", "taskmanager.numberOfTaskSlots": "4"}
TM = {"resource": {"cpu": 4, "memory": "2048m"}, "replicas": 1}


def label_keys(text: str) -> dict[str, set[frozenset[str]]]:
    keys: dict[str, set[frozenset[str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name = STATE_CF.sub(r"\1<cf>\2", sample.name)
            keys.setdefault(name, set()).add(frozenset(sample.labels))
    return keys


@pytest.fixture
def server():
    with TwinServer(time_scale=20.0, downtime_scale=0.05, tick_interval_s=0.05) as s:
        yield s


def wait_for(predicate, what: str, timeout: float = 30.0):
    """Poll until `predicate` holds; fail naming `what` (the clock thread runs the twins)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


def test_scrape_has_flinks_names_and_label_keys(server):
    server.add_job("default", "q11", Q11, TM)
    wait_for(lambda: server.twin("default", "q11").time > 2, "2 s of virtual time")
    ours = label_keys(requests.get(server.url + "/metrics", timeout=5).text)
    golden = label_keys((SAMPLES / "prom-scrape.txt").read_text())
    wanted = {
        "flink_taskmanager_job_task_busyTimeMsPerSecond",
        "flink_taskmanager_job_task_backPressuredTimeMsPerSecond",
        "flink_taskmanager_job_task_idleTimeMsPerSecond",
        "flink_taskmanager_job_task_numRecordsInPerSecond",
        "flink_taskmanager_job_task_numRecordsOutPerSecond",
        "flink_taskmanager_job_task_operator_numRecordsInPerSecond",
        "flink_taskmanager_job_task_operator_numRecordsOutPerSecond",
        "flink_taskmanager_job_task_operator_pendingRecords",
        "flink_taskmanager_job_task_operator_rocksdb_block_cache_hit",
        "flink_taskmanager_job_task_operator_rocksdb_block_cache_miss",
        "flink_taskmanager_job_task_operator_<cf>_rocksdb_block_cache_capacity",
        "flink_taskmanager_job_task_operator_state_name_valueStateGetLatency",
        "flink_taskmanager_job_task_operator_state_name_valueStateGetLatency_count",
        "flink_jobmanager_job_uptime",
        "flink_jobmanager_job_numRestarts",
    }
    assert wanted <= set(ours), wanted - set(ours)
    for name, keysets in ours.items():
        assert name in golden, f"{name} is not a metric real Flink exports"
        assert keysets <= golden[name], f"{name}: labels {keysets} vs Flink's {golden[name]}"


def help_lines(text: str) -> dict[str, str]:
    """# HELP text per metric name, the column family (name and scope) written <cf>."""
    helps = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line.removeprefix("# HELP ").partition(" ")
            cf = STATE_CF.match(name)
            if cf:
                state = name[len(cf.group(1)):-len(cf.group(2))]
                name = f"{cf.group(1)}<cf>{cf.group(2)}"
                help_text = help_text.replace(f"_{state})", "_<cf>)")
            helps[name] = help_text
    return helps


def test_scrape_help_texts_are_flinks(server):
    server.add_job("default", "q11", Q11, TM)
    wait_for(lambda: server.twin("default", "q11").time > 2, "2 s of virtual time")
    ours = help_lines(requests.get(server.url + "/metrics", timeout=5).text)
    golden = help_lines((SAMPLES / "prom-scrape.txt").read_text())
    assert "flink_taskmanager_Status_Flink_Memory_Managed_Used" in ours
    assert {n: h for n, h in ours.items() if golden.get(n) != h} == {}


def test_scrape_keeps_flinks_text_quirks(server):
    server.add_job("ns-1", "word count", {**Q11, "hybridscaler.twin.job-model": "read"}, TM)
    wait_for(lambda: server.twin("ns-1", "word count").time > 1, "1 s of virtual time")
    text = requests.get(server.url + "/metrics", timeout=5).text
    assert ',} ' in text  # trailing comma, as Flink's reporter writes
    assert 'job_name="word_count"' in text  # sanitised label value
    assert re.search(r"block_cache_capacity\{.*\} \d\.\d+E\d+", text)  # Java's double format


def test_rest_shapes_match_the_golden_samples(server):
    status = server.add_job("default", "q11", Q11, TM)
    jid = status["jobId"]
    base = server.rest_url("default", "q11")
    first_tm = requests.get(f"{base}/taskmanagers", timeout=5).json()["taskmanagers"][0]["id"]
    for path, golden in (
        ("jobs/overview", "jobs-overview.json"),
        (f"jobs/{jid}", "job.json"),
        (f"jobs/{jid}/plan", "plan.json"),
        (f"jobs/{jid}/config", "job-config.json"),
        ("taskmanagers", "taskmanagers.json"),
        (f"taskmanagers/{first_tm}", "taskmanager.json"),
    ):
        ours = requests.get(f"{base}/{path}", timeout=5).json()
        theirs = json.loads((SAMPLES / golden).read_text())
        assert_same_shape(ours, theirs, path)


def test_the_taskmanager_list_has_no_slots_and_unknown_ids_are_404(server):
    server.add_job("default", "q11", Q11, TM)
    base = server.rest_url("default", "q11") + "/taskmanagers"
    listed = requests.get(base, timeout=5).json()["taskmanagers"]
    assert listed and all("allocatedSlots" not in tm for tm in listed)
    one = requests.get(f"{base}/{listed[0]['id']}", timeout=5).json()
    assert len(one["allocatedSlots"]) == listed[0]["slotsNumber"] - listed[0]["freeSlots"]
    assert requests.get(f"{base}/nope", timeout=5).status_code == 404


# Free-form maps: their keys are the job's, not Flink's.
FREE_FORM = ("user-config",)


def assert_same_shape(ours, theirs, where):
    """Every key Flink sends (recursively, first list element) is there, same JSON type,
    and no key Flink does not send."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), where
        if not where.endswith(FREE_FORM):
            extra = set(ours) - set(theirs)
            assert not extra, f"{where}: keys real Flink does not send: {sorted(extra)}"
        for key, value in theirs.items():
            if key == "metrics" and where.startswith("taskmanagers"):
                continue  # JVM statistics of a real TaskManager process
            assert key in ours, f"{where}: missing {key!r}"
            assert_same_shape(ours[key], value, f"{where}.{key}")
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and ours, where
        if theirs:
            assert_same_shape(ours[0], theirs[0], f"{where}[0]")
    elif isinstance(theirs, bool):
        assert isinstance(ours, bool), where
    elif isinstance(theirs, int | float):
        assert isinstance(ours, int | float) and not isinstance(ours, bool), where
    else:
        assert isinstance(ours, type(theirs)), where


def test_job_graph_over_rest_is_the_models(server):
    status = server.add_job("default", "q3", {"hybridscaler.twin.job-model": "q3"}, TM)
    jid = status["jobId"]
    base = server.rest_url("default", "q3")
    job = requests.get(f"{base}/jobs/{jid}", timeout=5).json()
    plan = requests.get(f"{base}/jobs/{jid}/plan", timeout=5).json()["plan"]
    model = load_model("q3")
    assert {v["id"] for v in job["vertices"]} == {o.vertex_id for o in model.operators}
    join = model.operator("q3-join").vertex_id
    node = next(n for n in plan["nodes"] if n["id"] == join)
    assert [i["ship_strategy"] for i in node["inputs"]] == ["HASH", "HASH"]
    assert requests.get(f"{base}/jobs/{'0' * 32}", timeout=5).status_code == 404


def test_reconfigure_restarts_with_the_written_parallelism_and_memory(server):
    model = load_model("q11")
    session = model.operator("q11-session")
    first = server.add_job("default", "q11", Q11, TM)
    conf = {
        **Q11,
        "pipeline.jobvertex-parallelism-overrides": f"{session.vertex_id}:4",
        "hybridscaler.operator-resources": json.dumps({
            "q11-session": {"cpuCores": 1.0, "taskHeapMb": 128, "managedMemoryMb": 316},
            "q11-sink": {"cpuCores": 0.5, "taskHeapMb": 64, "managedMemoryMb": 0},
        }),
    }
    reply = requests.put(f"{server.url}/control/jobs/default/q11", timeout=5,
                         json={"flinkConfiguration": conf, "taskManager": TM})
    assert reply.status_code == 200
    status = reply.json()
    assert status["state"] == "RESTARTING" and status["restarts"] == 1
    assert status["jobId"] != first["jobId"]
    assert status["configuration"]["q11-session"] == {
        "vertexId": session.vertex_id, "parallelism": 4, "memoryLevel": 1}
    assert status["configuration"]["q11-sink"]["memoryLevel"] is None
    wait_for(lambda: server.status("default", "q11")["state"] == "RUNNING", "the restart")

    # Task metrics come back with the first running tick after the restart, which may
    # come after the job reports RUNNING (as a real reporter's next scrape does).
    def busy_series() -> int:
        text = requests.get(server.url + "/metrics", timeout=5).text
        return text.count("flink_taskmanager_job_task_busyTimeMsPerSecond{")

    wait_for(lambda: busy_series() > 0, "task metrics after the restart")
    assert busy_series() == 1 + 4 + 1  # source, the session window at 4 tasks, sink


def test_control_endpoint_adds_lists_and_removes(server):
    url = f"{server.url}/control/jobs/team-a/upd"
    body = {"flinkConfiguration": {"hybridscaler.twin.job-model": "update"}}
    created = requests.put(url, json=body, timeout=5)
    assert created.status_code == 201 and created.json()["model"] == "update"
    listed = requests.get(f"{server.url}/control/jobs", timeout=5).json()
    assert [j["name"] for j in listed] == ["upd"]
    bad = requests.put(f"{server.url}/control/jobs/team-a/x", timeout=5,
                       json={"flinkConfiguration": {"hybridscaler.twin.job-model": "nope"}})
    assert bad.status_code == 400 and "no job model" in bad.json()["errors"][0]
    assert requests.delete(url, timeout=5).status_code == 200
    assert requests.get(url, timeout=5).status_code == 404


def test_a_failed_job_comes_back_under_a_new_id(server):
    url = f"{server.url}/control/jobs/team-a/crash"
    requests.put(url, json={"flinkConfiguration": Q11, "taskManager": TM}, timeout=5)
    rest = requests.get(url, timeout=5).json()["restUrl"]
    first = requests.get(f"{rest}/jobs/overview", timeout=5).json()["jobs"][0]
    ids = {first["jid"]}
    for _ in range(3):
        assert requests.post(f"{url}/fail", timeout=5).status_code == 200
        ids.add(requests.get(f"{rest}/jobs/overview", timeout=5).json()["jobs"][0]["jid"])
    assert len(ids) == 4  # each failure a new job, as a crash-looping job shows
    assert requests.post(f"{server.url}/control/jobs/team-a/nope/fail",
                         timeout=5).status_code == 404


def test_a_failover_keeps_the_job_and_counts_in_num_restarts(server):
    """A restart in place: the same id and start, and only Flink's numRestarts gauge (REST
    and the scrape) says it happened."""
    url = f"{server.url}/control/jobs/team-a/flaky"
    requests.put(url, json={"flinkConfiguration": Q11, "taskManager": TM}, timeout=5)
    rest = requests.get(url, timeout=5).json()["restUrl"]
    first = requests.get(f"{rest}/jobs/overview", timeout=5).json()["jobs"][0]
    metrics = f"{rest}/jobs/{first['jid']}/metrics"
    assert requests.get(metrics, params={"get": "numRestarts"}, timeout=5).json() == [
        {"id": "numRestarts", "value": "0"}]
    for _ in range(2):
        assert requests.post(f"{url}/failover", timeout=5).status_code == 200
    again = requests.get(f"{rest}/jobs/overview", timeout=5).json()["jobs"][0]
    assert (again["jid"], again["start-time"]) == (first["jid"], first["start-time"])
    assert requests.get(metrics, params={"get": "numRestarts,nope"}, timeout=5).json() == [
        {"id": "numRestarts", "value": "2"}]
    assert requests.get(metrics, timeout=5).json() == [{"id": "numRestarts"}]


def test_flink_configuration_parsing_rejects_what_flink_rejects():
    model = load_model("q11")
    with pytest.raises(ConfigError):
        configuration_from_flink(model, {"pipeline.jobvertex-parallelism-overrides": "abc:x"}, 158)
    with pytest.raises(ConfigError):
        configuration_from_flink(model, {"hybridscaler.operator-resources": "[1]"}, 158)
    sink = model.operator("q11-sink").vertex_id
    with pytest.raises(ConfigError):
        configuration_from_flink(
            model, {"pipeline.jobvertex-parallelism-overrides": f"{sink}:999"}, 158
        )
    resources = json.dumps({"q11-session": {"cpuCores": 1, "taskHeapMb": 64,
                                            "managedMemoryMb": 632}})
    levels = configuration_from_flink(model, {"hybridscaler.operator-resources": resources}, 158)
    assert levels[model.operator("q11-session").vertex_id].memory_level == 2


def entry(**fields):
    return json.dumps({"q11-session": {"cpuCores": 1, "taskHeapMb": 64, "managedMemoryMb": 316,
                                       **fields}})


def without(field):
    return json.dumps({"q11-session": {k: v for k, v in json.loads(entry())["q11-session"].items()
                                       if k != field}})


# flink-plugin's table of bad values (HybridResourcesTest): each fails the job at start there.
@pytest.mark.parametrize("value, fault", [
    ("[1, 2]", "must be a JSON object keyed by operator uid"),
    ("null", "must be a JSON object keyed by operator uid"),
    ('{"a":', "not valid JSON"),
    (entry() + "}", "not valid JSON"),
    ('{"q": NaN}', "not valid JSON"),
    ('{"q11-session": 3}', "'q11-session': must be an object"),
    (entry(memMb=1), "'q11-session': unknown field 'memMb'"),
    (without("cpuCores"), "cpuCores must be a number > 0, got None"),
    (entry(cpuCores=0), "cpuCores must be a number > 0, got 0"),
    (entry(cpuCores=-0.5), "cpuCores must be a number > 0, got -0.5"),
    (entry(cpuCores="1"), "cpuCores must be a number > 0, got '1'"),
    (entry(cpuCores=True), "cpuCores must be a number > 0, got True"),
    (without("taskHeapMb"), "taskHeapMb must be an integer >= 1, got None"),
    (entry(taskHeapMb=0), "taskHeapMb must be an integer >= 1, got 0"),
    (entry(taskHeapMb=64.5), "taskHeapMb must be an integer >= 1, got 64.5"),
    (entry(taskHeapMb="64"), "taskHeapMb must be an integer >= 1, got '64'"),
    (without("managedMemoryMb"), "managedMemoryMb must be an integer >= 0, got None"),
    (entry(managedMemoryMb=1.5), "managedMemoryMb must be an integer >= 0, got 1.5"),
    (entry(managedMemoryMb=-1), "managedMemoryMb must be an integer >= 0, got -1"),
    (entry(managedMemoryMb=3_000_000_000), "managedMemoryMb must be an integer >= 0"),
    (entry(slotSharingGroup=""), "slotSharingGroup must be a non-empty string, got ''"),
    (entry(slotSharingGroup=3), "slotSharingGroup must be a non-empty string, got 3"),
    (json.dumps({"q11-session": {"cpuCores": 1, "taskHeapMb": 64, "managedMemoryMb": 632,
                                 "slotSharingGroup": "g"},
                 "q11-sink": {"cpuCores": 1, "taskHeapMb": 64, "managedMemoryMb": 0,
                              "slotSharingGroup": "g"}}),
     "slot sharing group 'g' is described with different resources by its members"),
])
def test_operator_resources_flink_plugin_refuses_are_refused(value, fault):
    with pytest.raises(ConfigError, match=r"^hybridscaler\.operator-resources") as refused:
        configuration_from_flink(load_model("q11"), {"hybridscaler.operator-resources": value},
                                 158)
    assert fault in str(refused.value)


def test_operator_resources_as_the_controller_writes_them_are_accepted():
    model = load_model("q11")
    written = entry(managedMemoryMb=316.0)  # an integral double passes, as in Jackson
    config = configuration_from_flink(model, {"hybridscaler.operator-resources": written}, 158)
    assert config[model.operator("q11-session").vertex_id].memory_level == 1


def test_a_slot_sharing_group_is_honoured_as_the_controller_writes_it():
    """One slot of the group for every member; the managed memory is the member's the group
    is named after, riders have none; the REST job graph shows the written group."""
    from simulator.serve import slot_sharing_groups
    from simulator.twin import Twin

    model = load_model("q11")
    session, sink = model.operator("q11-session"), model.operator("q11-sink")
    slot = {"cpuCores": 1, "taskHeapMb": 134, "managedMemoryMb": 632,
            "slotSharingGroup": session.vertex_id}
    conf = {"hybridscaler.operator-resources": json.dumps({"q11-session": slot,
                                                             "q11-sink": slot})}
    config = configuration_from_flink(model, conf, 158)
    assert config[session.vertex_id].memory_level == 2
    assert config[sink.vertex_id].memory_level is None
    groups = slot_sharing_groups(model, conf)
    assert groups == {session.vertex_id: session.vertex_id, sink.vertex_id: session.vertex_id}
    twin = Twin(model, configuration=config)
    twin.groups = groups
    assert twin.slot_sharing_group(session.vertex_id) == twin.slot_sharing_group(sink.vertex_id)
    source = model.operator("q11-source").vertex_id
    assert twin.slot_sharing_group(source) != twin.slot_sharing_group(sink.vertex_id)


def test_twin_serve_command_runs_standalone():
    import selectors
    import subprocess
    import sys

    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "hybrid-scaler"), "twin", "serve", "--port", "0",
         "--job", "team-a/q1=q1", "--job", "q11=q11", "--time-scale", "10"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stdout is not None
        ready = selectors.DefaultSelector()
        ready.register(proc.stdout, selectors.EVENT_READ)
        if not ready.select(timeout=60):  # a hung start-up fails instead of blocking CI
            pytest.fail("hybrid-scaler twin serve printed nothing in 60 s")
        line = proc.stdout.readline()
        url = re.search(r"http://\S+?(?=:\s|$)", line)
        assert url, line
        base = url.group(0)
        jobs = requests.get(f"{base}/control/jobs", timeout=5).json()
        assert {(j["namespace"], j["name"]) for j in jobs} == {("team-a", "q1"), ("default", "q11")}
        wait_for(lambda: "busyTimeMsPerSecond" in requests.get(f"{base}/metrics", timeout=5).text,
                 "task metrics from the standalone server")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_managed_memory_is_per_taskmanager_and_only_stateful_slots_use_it(server):
    session = load_model("q11").operator("q11-session")
    conf = {**Q11, "pipeline.jobvertex-parallelism-overrides": f"{session.vertex_id}:4",
            "hybridscaler.operator-resources": json.dumps(
                {"q11-session": {"cpuCores": 1, "taskHeapMb": 64, "managedMemoryMb": 316}})}
    server.add_job("default", "q11", conf, TM)
    base = server.rest_url("default", "q11")
    tms = [tm["id"] for tm in requests.get(f"{base}/taskmanagers", timeout=5).json()[
        "taskmanagers"]]
    assert len(tms) == 2  # 6 tasks, 4 slots each

    def samples(name: str) -> list:
        text = requests.get(server.url + "/metrics", timeout=5).text
        return [s for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == name]

    wait_for(lambda: samples("flink_taskmanager_job_task_busyTimeMsPerSecond"), "task metrics")
    used = {s.labels["tm_id"]: s.value
            for s in samples("flink_taskmanager_Status_Flink_Memory_Managed_Used")}
    assert set(used) == {t.replace("-", "_") for t in tms}
    assert sum(used.values()) == 4 * 316 * 2**20  # the stateless source and sink hold none
    hosts = {s.labels["tm_id"] for s in samples("flink_taskmanager_job_task_busyTimeMsPerSecond")}
    assert hosts == set(used)


def test_new_taskmanager_resources_restart_the_job_with_downtime(server):
    first = server.add_job("default", "q11", Q11, TM)
    bigger = {"resource": {"cpu": 4, "memory": "4096m"}, "replicas": 1}
    status = server.reconfigure("default", "q11", Q11, bigger)
    assert status["state"] == "RESTARTING" and status["jobId"] != first["jobId"]
    assert server.twin("default", "q11").restarts == 1
    same = server.reconfigure("default", "q11", Q11, bigger)
    assert same["jobId"] == status["jobId"] and server.twin("default", "q11").restarts == 1
