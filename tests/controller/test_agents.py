"""The `Resizer` adapter over HTTP: flink-plugin's agent protocol (docs/flink-plugin.md,
"Control channel") served by the test on a real socket, as ControlServer answers it (its
own tests, flink-plugin's MiniClusterResizeTest, hold the Java side to the same paths)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from controller.adapters.agents import AgentResizer
from controller.operator.run import check_agent_url
from controller.ports import CacheTarget, ResizeFailed

JOB = "a" * 32
TOKEN = "t0ken-of-at-least-16-bytes"
TEMPLATE = "http://{pod_ip}:{port}"


@dataclass
class Agent:
    """One TaskManager's agent: its slots, its budget, what it was asked."""

    slots: list[dict[str, Any]]
    budget: int = 0
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    refuse: int | None = None  # answer this HTTP code to a resize, with a chatty body
    garbage: bool = False

    def slot(self, task: str, subtask: int, cache: int) -> None:
        self.slots.append({"id": len(self.slots), "jobId": JOB, "task": task,
                           "subtask": subtask, "parallelism": 2, "attempt": 0,
                           "cacheBytes": cache, "observedCacheBytes": cache,
                           "writeBufferBytes": -1, "observedWriteBufferBytes": -1})


def serve(agent: Agent) -> tuple[ThreadingHTTPServer, int]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, code: int, body: Any) -> None:
            raw = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            agent.requests.append((self.command, self.path, body))
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._answer(401, {"error": "unauthorized"})
            if agent.garbage:
                return self._answer(200, b"<html>not json")
            if self.command == "PUT" and self.path == "/v1/budget":
                agent.budget = body["budgetBytes"]
                return self._answer(200, {"budgetBytes": agent.budget})
            if self.command == "POST" and self.path == "/v1/resize":
                if agent.refuse:
                    return self._answer(agent.refuse, {"error": "SECRET internal detail"})
                # As ResizeAgent: every live slot's cache counts against the budget, and
                # the answer lists only the slots it resized.
                targets = {t["task"]: t["cacheBytes"] for t in body["targets"]
                           if t["jobId"] == JOB}
                after = [targets.get(s["task"], s["cacheBytes"]) for s in agent.slots]
                if sum(after) > agent.budget:
                    return self._answer(409, {"error": "over budget"})
                resized = [s for s in agent.slots if s["task"] in targets]
                for s in resized:
                    s["cacheBytes"] = s["observedCacheBytes"] = targets[s["task"]]
                return self._answer(200, {"slots": resized})
            return self._answer(200, {"enabled": True, "slots": agent.slots})

        do_GET = do_PUT = do_POST = _handle

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, int(server.server_address[1])


@pytest.fixture
def agents() -> Iterator[list[tuple[Agent, int]]]:
    """Two TaskManagers' agents: subtask 0 of `counter` on the first, 1 on the second."""
    started = []
    for subtask in (0, 1):
        agent = Agent([])
        agent.slot("counter", subtask, 26_000_000)
        agent.slot("other", subtask, 5_000_000)
        server, port = serve(agent)
        started.append((server, agent, port))
    yield [(agent, port) for _, agent, port in started]
    for server, _, _ in started:
        server.shutdown()


def resizer(agents: list[tuple[Agent, int]], token: str = TOKEN) -> AgentResizer:
    """Each pod's agent on a port of its own: the template takes the port from the pod."""
    pods = [(f"tm-{port}", "127.0.0.1") for _, port in agents]
    by_pod = {f"tm-{port}": port for _, port in agents}

    class PerPod(AgentResizer):
        def _url(self, pod: str, ip: str) -> Any:
            self.port = by_pod[pod]
            return super()._url(pod, ip)

    return PerPod(pods, 0, token, TEMPLATE, "ns", "job")


def test_every_subtask_is_resized_after_a_budget_grant_and_read_back(
        agents: list[tuple[Agent, int]]) -> None:
    done = resizer(agents).resize(JOB, [CacheTarget("counter", 106_000_000)], 400_000_000)
    assert done.read_back == {"counter": 106_000_000} and done.changed == ("counter",)
    for agent, _ in agents:
        assert [m for m, _, _ in agent.requests] == ["GET", "PUT", "POST"]
        assert agent.budget == 400_000_000
        post = agent.requests[-1][2]
        assert post == {"targets": [{"jobId": JOB, "task": "counter", "cacheBytes": 106_000_000}]}
        assert {s["task"]: s["observedCacheBytes"] for s in agent.slots}["other"] == 5_000_000


def test_slots_already_at_their_target_are_left_alone(agents: list[tuple[Agent, int]]) -> None:
    resizer(agents).resize(JOB, [CacheTarget("counter", 106_000_000)], 400_000_000)
    again = resizer(agents).resize(JOB, [CacheTarget("counter", 106_000_000)], 400_000_000)
    assert again.changed == () and again.read_back == {"counter": 106_000_000}
    assert [m for m, _, _ in agents[0][0].requests] == ["GET", "PUT", "POST", "GET"]
    # A failover restored one subtask at Flink's size: only its TaskManager is asked again.
    agents[1][0].slots[0]["observedCacheBytes"] = 26_000_000
    healed = resizer(agents).resize(JOB, [CacheTarget("counter", 106_000_000)], 400_000_000)
    assert healed.changed == ("counter",)
    assert [m for m, _, _ in agents[0][0].requests][-1] == "GET"
    assert [m for m, _, _ in agents[1][0].requests][-2:] == ["PUT", "POST"]


@pytest.mark.parametrize(("code", "kind"), [(409, "refused"), (500, "malformed")])
def test_a_refusal_names_the_pod_and_the_code_never_the_answer(
        agents: list[tuple[Agent, int]], code: int, kind: str) -> None:
    agents[0][0].refuse = code
    with pytest.raises(ResizeFailed) as failed:
        resizer(agents).resize(JOB, [CacheTarget("counter", 106_000_000)], 400_000_000)
    assert failed.value.kind == kind
    assert f"HTTP {code}" in str(failed.value) and f"tm-{agents[0][1]}" in str(failed.value)
    assert "SECRET" not in str(failed.value)


def test_over_budget_is_refused(agents: list[tuple[Agent, int]]) -> None:
    with pytest.raises(ResizeFailed) as failed:
        resizer(agents).resize(JOB, [CacheTarget("counter", 106_000_000)], 50_000_000)
    assert failed.value.kind == "refused"


def test_a_wrong_token_is_unauthorized(agents: list[tuple[Agent, int]]) -> None:
    with pytest.raises(ResizeFailed) as failed:
        resizer(agents, token="another-token-of-16-bytes").resize(
            JOB, [CacheTarget("counter", 1)], 1)
    assert failed.value.kind == "unauthorized" and "HTTP 401" in str(failed.value)


def test_a_task_no_agent_holds_is_missing_by_name(agents: list[tuple[Agent, int]]) -> None:
    with pytest.raises(ResizeFailed) as failed:
        resizer(agents).resize(JOB, [CacheTarget("absent", 1)], 1)
    assert failed.value.kind == "missing" and "absent" in str(failed.value)
    with pytest.raises(ResizeFailed) as failed:  # another job's slots are not this job's
        resizer(agents).resize("b" * 32, [CacheTarget("counter", 1)], 1)
    assert failed.value.kind == "missing"


def test_a_second_resize_reads_back_the_slots_it_did_not_touch(
        agents: list[tuple[Agent, int]]) -> None:
    """The agent answers a resize with the slots it resized; a task already at its target
    on the same TaskManager is read back from the GET before it."""
    first = resizer(agents).resize(JOB, [CacheTarget("counter", 106_000_000)], 400_000_000)
    assert first.changed == ("counter",)
    both = [CacheTarget("counter", 106_000_000), CacheTarget("other", 20_000_000)]
    second = resizer(agents).resize(JOB, both, 400_000_000)
    assert second.changed == ("other",)
    assert second.read_back == {"counter": 106_000_000, "other": 20_000_000}


def test_an_answer_that_is_not_json_is_malformed(agents: list[tuple[Agent, int]]) -> None:
    agents[0][0].garbage = True
    with pytest.raises(ResizeFailed) as failed:
        resizer(agents).resize(JOB, [CacheTarget("counter", 1)], 1)
    assert failed.value.kind == "malformed" and "<html>" not in str(failed.value)


def test_no_running_pod_or_an_unusable_address_reaches_nothing() -> None:
    with pytest.raises(ResizeFailed) as failed:
        AgentResizer([], 9260, TOKEN, TEMPLATE).resize(JOB, [CacheTarget("c", 1)], 1)
    assert failed.value.kind == "unreachable"
    with pytest.raises(ResizeFailed) as failed:
        AgentResizer([("tm-1", "10.0.0.1")], 9260, TOKEN, "http://{nope}:{port}").resize(
            JOB, [CacheTarget("c", 1)], 1)
    assert failed.value.kind == "unreachable" and "tm-1" in str(failed.value)
    with pytest.raises(ResizeFailed) as failed:  # nothing listens there
        AgentResizer([("tm-1", "127.0.0.1")], 1, TOKEN, TEMPLATE).resize(
            JOB, [CacheTarget("c", 1)], 1)
    assert failed.value.kind == "unreachable"


def test_the_agent_url_template_is_checked_when_the_controller_starts() -> None:
    check_agent_url("http://{pod_ip}:{port}")
    check_agent_url("http://{pod}.{name}-tm.{namespace}.svc:{port}")
    with pytest.raises(ValueError, match="pod_ip"):
        check_agent_url("http://{ip}:{port}")
    with pytest.raises(ValueError, match="resize-agent-url"):
        check_agent_url("http://user@{pod_ip}:{port}")
