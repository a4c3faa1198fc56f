"""The pure parts of the real-Flink engine (e2e/realflink.py); the engine itself is
exercised on real JVMs by e2e/test_realflink.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller.realize import RESIZABLE_FORST_BACKEND
from e2e import realflink
from simulator.serve import ConfigError


def test_memory_sizes_become_flinks_mib() -> None:
    assert realflink.flink_memory("2Gi", "1m") == "2048m"
    assert realflink.flink_memory("2048m", "1m") == "2048m"
    assert realflink.flink_memory(None, "1024m") == "1024m"


def test_the_last_request_wins_but_a_pending_restart_stays_a_restart() -> None:
    a, b = {"k": "1"}, {"k": "2"}
    assert realflink._coalesce([("upgrade", a, {}), ("upgrade", b, {})]) == [("upgrade", b, {})]
    assert realflink._coalesce([("upgrade", a, {}), ("rescale", b, {})]) == [("upgrade", b, {})]
    assert realflink._coalesce([("rescale", a, {}), ("rescale", b, {})]) == [("rescale", b, {})]
    assert realflink._coalesce([]) == []


def test_last_state_restores_the_newest_completed_checkpoint(tmp_path: Path) -> None:
    for n, complete in ((3, True), (12, True), (13, False)):
        chk = tmp_path / "job" / f"chk-{n}"
        chk.mkdir(parents=True)
        if complete:
            (chk / "_metadata").write_bytes(b"x")
    assert realflink._latest_checkpoint(tmp_path) == f"file://{tmp_path / 'job' / 'chk-12'}"
    assert realflink._latest_checkpoint(tmp_path / "none") is None


@pytest.mark.parametrize("conf", [
    {realflink.OPERATOR_RESOURCES_KEY: '{"counter": {"cpuCores": 1}}'},
    {realflink.OVERRIDES_KEY: "abc:2"},
    {realflink.OVERRIDES_KEY: "0da08f51eaa85fc298e176a139b3649a:0"},
])
def test_a_spec_the_job_would_refuse_is_refused_at_once(conf: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        realflink._validate(conf)


def test_only_deployments_that_ask_run_on_real_flink() -> None:
    assert realflink.wanted({realflink.ENGINE_KEY: "Flink"})
    assert not realflink.wanted({realflink.ENGINE_KEY: "twin"})
    assert not realflink.wanted({})


def test_the_rest_proxy_forwards_deployments_it_does_not_run_to_the_twin(
        tmp_path: Path) -> None:
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import requests

    seen: list[str] = []

    class Twin(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            seen.append(self.path)
            body = json.dumps({"jobs": []}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    twin = ThreadingHTTPServer(("127.0.0.1", 0), Twin)
    threading.Thread(target=twin.serve_forever, daemon=True).start()
    engine = realflink.RealFlink(tmp_path, fallback_url=f"http://127.0.0.1:{twin.server_port}")
    engine.start()
    try:
        url = json.loads((tmp_path / realflink.STATE_FILE).read_text())["restUrl"]
        assert requests.get(f"{url}/ns/q11/jobs/overview", timeout=5).json() == {"jobs": []}
        # As an HTTP proxy for the in-cluster Service name, the way the controller calls it.
        reply = requests.get("http://q11-rest.ns.svc:8081/jobs/overview",
                             proxies={"http": url}, timeout=5)
        assert reply.json() == {"jobs": []}
        assert seen == ["/ns/q11/jobs/overview", "http://q11-rest.ns.svc:8081/jobs/overview"]
    finally:
        engine.stop()
        twin.shutdown()


def test_the_rest_proxy_answers_503_while_a_deployment_is_between_clusters(
        tmp_path: Path) -> None:
    """As a Service without ready endpoints: the controller reads JobUnavailable."""
    import json

    import requests

    engine = realflink.RealFlink(tmp_path).start()
    try:
        url = json.loads((tmp_path / realflink.STATE_FILE).read_text())["restUrl"]
        # Known, but no JobManager (stopping for a savepoint, or the next one starting).
        engine.deployments[("ns", "state")] = realflink.Deployment(engine, "ns", "state")
        assert requests.get(f"{url}/ns/state/jobs/overview", timeout=5).status_code == 503
        reply = requests.get("http://state-rest.ns.svc:8081/jobs/overview",
                             proxies={"http": url}, timeout=5)
        assert reply.status_code == 503
        # Unknown (and no twin to forward to): not found.
        assert requests.get(f"{url}/ns/other/jobs/overview", timeout=5).status_code == 404
    finally:
        engine.stop()


def test_a_forst_cluster_gets_its_metric_switches_and_a_primary_directory(
        tmp_path: Path) -> None:
    assert realflink.forst_settings({"state.backend.type": "rocksdb"}, tmp_path) == {}
    assert realflink.forst_settings({}, tmp_path) == {}
    added = realflink.forst_settings({"state.backend.type": " ForSt "}, tmp_path)
    assert added["state.backend.forst.primary-dir"] == f"file://{tmp_path / 'forst-primary'}"
    assert added["state.backend.forst.metrics.block-cache-hit"] == "true"
    assert added["state.backend.forst.metrics.block-cache-capacity"] == "true"
    # flink-plugin's resizable ForSt backend is ForSt too.
    resizable = realflink.forst_settings({"state.backend.type": RESIZABLE_FORST_BACKEND},
                                         tmp_path)
    assert resizable == added
    # What the deployment says about ForSt wins over the defaults.
    own = realflink.forst_settings({"state.backend.type": "forst",
                                    "state.backend.forst.primary-dir": "s3://b/p",
                                    "state.backend.forst.metrics.block-cache-hit": "false"},
                                   tmp_path)
    assert own["state.backend.forst.primary-dir"] == "s3://b/p"
    assert own["state.backend.forst.metrics.block-cache-hit"] == "false"


def test_a_cluster_runs_flink_plugins_own_build_for_its_flink(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job module's classpath names the plugin jar Maven resolved (~/.m2, a 1.20 build);
    a 2.2 cluster must run flink-plugin's 2.x build instead, and a missing build is named
    with the commands that make it."""
    m2 = tmp_path / "m2" / "flink-hybrid-scaler-plugin-0.1.0.jar"
    for directory, _ in realflink.BUILDS.values():
        (tmp_path / "job" / directory).mkdir(parents=True)
        classpath = os.pathsep.join(["/a.jar", str(m2), "/b.jar"])
        (tmp_path / "job" / directory / "flink.classpath").write_text(classpath)
        (tmp_path / "job" / directory / "flink-hybrid-scaler-e2e-job-0.1.0.jar").touch()
    monkeypatch.setattr(realflink, "JOB_MODULE", tmp_path / "job")
    monkeypatch.setattr(realflink, "REPO", tmp_path)
    with pytest.raises(FileNotFoundError, match="-P flink-2 package"):
        realflink.job_build("2.2")
    plugin = tmp_path / "flink-plugin" / "target-flink2" / "flink-hybrid-scaler-plugin-0.1.0.jar"
    plugin.parent.mkdir(parents=True)
    plugin.touch()
    classpath, jar = realflink.job_build("2.2")
    assert classpath.split(os.pathsep) == ["/a.jar", str(plugin), "/b.jar", str(jar)]
    assert jar.parent.name == "target-flink2"
