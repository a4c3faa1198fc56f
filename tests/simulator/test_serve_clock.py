"""The twins' clock as Flink's REST API shows it: manual (lockstep) and time-scaled."""

from __future__ import annotations

import time

import requests

from policies.restart_cost import Enactment
from simulator.serve import JOB_MODEL_KEY, SCHEDULER_KEY, SLOTS_KEY, TwinServer

Q11 = {JOB_MODEL_KEY: "q11", SLOTS_KEY: "4", SCHEDULER_KEY: "adaptive"}
TM = {"resource": {"cpu": 4, "memory": "2048m"}, "replicas": 1}


def test_a_manual_clock_moves_only_by_step_and_flinks_timestamps_follow_it():
    with TwinServer(manual_clock=True) as server:
        server.add_job("default", "q11", Q11, TM)
        rest = server.rest_url("default", "q11")
        twin = server.twin("default", "q11")
        time.sleep(0.3)  # wall time passes; the twins' does not
        assert twin.time == 0.0
        assert server.now_ms() == server.clock_anchor_ms
        server.step(90.0)
        assert twin.time == 90.0
        assert server.now_ms() == server.clock_anchor_ms + 90_000
        overview = requests.get(rest + "/jobs/overview", timeout=5).json()["jobs"][0]
        assert overview["start-time"] == server.clock_anchor_ms
        assert overview["duration"] == 90_000
        jid = overview["jid"]
        job = requests.get(f"{rest}/v1/jobs/{jid}", timeout=5).json()
        assert job["now"] == server.clock_anchor_ms + 90_000
        # Accumulated counters cover exactly the 90 s: the source read 90 s of its output.
        source = next(v for v in job["vertices"] if v["name"].startswith("Source"))
        written = source["metrics"]["write-records"]
        assert written > 0

        # An in-place rescale (FLIP-291): down for the twin's downtime, on the same clock.
        requirements = requests.get(f"{rest}/jobs/{jid}/resource-requirements", timeout=5).json()
        session = twin.model.operator("q11-session").vertex_id
        requirements[session]["parallelism"]["upperBound"] = 4
        assert requests.put(f"{rest}/jobs/{jid}/resource-requirements", json=requirements,
                            timeout=5).status_code == 200
        downtime_ms = int(1000 * twin.downtime_s(Enactment.IN_PLACE))
        assert downtime_ms < 1000 * twin.downtime_s(Enactment.SAVEPOINT)  # not a restart
        assert requests.get(f"{rest}/jobs/{jid}", timeout=5).json()["state"] == "RESTARTING"
        server.step(downtime_ms / 1000 + 5)
        job = requests.get(f"{rest}/jobs/{jid}", timeout=5).json()
        assert job["timestamps"]["RUNNING"] == server.clock_anchor_ms + 90_000 + downtime_ms
        assert twin.configuration[session].parallelism == 4


def test_step_needs_a_manual_clock():
    with TwinServer(time_scale=5.0) as server:
        try:
            server.step(1.0)
        except RuntimeError as exc:
            assert "manual_clock" in str(exc)
        else:
            raise AssertionError("step() on a wall-clock server must fail")


def test_a_scaled_clock_starts_at_the_wall_clock_and_runs_ahead_of_it():
    with TwinServer(time_scale=50.0) as server:
        before = int(time.time() * 1000)
        now = server.now_ms()
        # Equal to the wall clock at the anchor, never behind it afterwards, and ahead by
        # the scale: no bound on how far (the machine may be slow), only the direction.
        assert server.clock_anchor_ms <= before <= now
        time.sleep(0.05)
        wall = int(time.time() * 1000)
        assert server.now_ms() - server.clock_anchor_ms >= (wall - server.clock_anchor_ms)
