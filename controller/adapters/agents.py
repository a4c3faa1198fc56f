"""flink-plugin's resize agents, one on each TaskManager of a FlinkDeployment (the `Resizer`
port; docs/flink-plugin.md, "Resizing in place").

Where the agents are comes from Kubernetes, never from Flink: the pod IPs of the
deployment's running TaskManager pods in the policy's own namespace (the Flink operator
labels them `app=<deployment>, component=taskmanager`). A JobManager a tenant controls can
therefore not point the controller at another address. The port and the token are the
policy's (`spec.resize`, the token read from a Secret in its namespace each pass).

Every call goes through `controller.adapters.dial` under the pass's deadline: one parse of
the address, one deadline per call, a size limit. Errors name the pod and the field and
carry the HTTP code only, never what an agent answered.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from controller.adapters import dial, outbound
from controller.ports import CacheTarget, Resized, ResizeFailed

FIELD = "spec.resize"
WHAT = "the resize agent"

CALL_TIMEOUT_S = 5.0
MAX_ANSWER_BYTES = 4 * 2**20
# A deployment with more TaskManagers is not resized: a pass would call each of them.
MAX_TASK_MANAGERS = 256
KUBE_TIMEOUT_S = 5.0

# (namespace, deployment) -> its running TaskManager pods as (pod name, pod IP).
TaskManagerPods = Callable[[str, str], Sequence[tuple[str, str]]]


def kube_task_managers(core: Any) -> TaskManagerPods:
    """`TaskManagerPods` over a kubernetes `CoreV1Api` (the controller's `list` on pods)."""
    from kubernetes.client.exceptions import ApiException

    def pods(namespace: str, deployment: str) -> Sequence[tuple[str, str]]:
        try:
            listed = core.list_namespaced_pod(
                namespace, label_selector=f"app={deployment},component=taskmanager",
                field_selector="status.phase=Running", limit=MAX_TASK_MANAGERS + 1,
                _request_timeout=KUBE_TIMEOUT_S)
        except ApiException as e:
            if e.status == 403:
                raise ResizeFailed(f"{FIELD}: the controller may not list pods in {namespace} "
                                   f"(install the chart with resize.enabled=true)",
                                   "credentials") from None
            raise ResizeFailed(f"{FIELD}: the TaskManager pods of {deployment} could not be "
                               f"listed (HTTP {e.status})", "unreachable") from None
        except Exception:  # a timeout or a broken connection to the API server
            raise ResizeFailed(f"{FIELD}: the TaskManager pods of {deployment} could not be "
                               f"listed", "unreachable") from None
        # Pods being deleted are going away; a host-network pod's IP is its node's, which
        # a tenant must not make the controller dial.
        return sorted((p.metadata.name, p.status.pod_ip) for p in listed.items
                      if p.status is not None and p.status.phase == "Running"
                      and p.status.pod_ip and p.metadata.deletion_timestamp is None
                      and not (p.spec is not None and p.spec.host_network))

    return pods


class AgentResizer:
    """The agents of one deployment's TaskManager pods, called with one token."""

    def __init__(self, pods: Sequence[tuple[str, str]], port: int, token: str,
                 url_template: str, namespace: str = "", deployment: str = "",
                 timeout_s: float = CALL_TIMEOUT_S,
                 breakers: outbound.Breakers | None = None) -> None:
        """`url_template`: the operator's `--resize-agent-url` ({pod_ip} and {pod} of the
        TaskManager pod, {port} of spec.resize, {namespace}, {name} are filled in)."""
        self.pods, self.port, self.timeout_s = pods, port, timeout_s
        self.breakers = breakers or outbound.BREAKERS  # a hung TaskManager cools down
        self.url_template, self.namespace, self.deployment = url_template, namespace, deployment
        self._header = {"Authorization": f"Bearer {token}"}

    def resize(self, job_id: str, targets: Iterable[CacheTarget], budget_bytes: int
               ) -> Resized:
        wanted = {t.task: t.cache_bytes for t in targets}
        if not self.pods:
            raise ResizeFailed(f"{FIELD}: no TaskManager pod of the deployment is running",
                               "unreachable")
        if len(self.pods) > MAX_TASK_MANAGERS:
            raise ResizeFailed(f"{FIELD}: over {MAX_TASK_MANAGERS} TaskManager pods",
                               "refused")
        read_back: dict[str, int] = {}
        changed: set[str] = set()
        for pod, ip in self.pods:
            url = self._url(pod, ip)
            slots = self._slots(pod, self._call(pod, url, "GET", "/v1/slots"), job_id, wanted)
            due = sorted({task for (task, _), observed in slots.items()
                          if observed != wanted[task]})
            if due:
                self._call(pod, url, "PUT", "/v1/budget", {"budgetBytes": budget_bytes})
                answer = self._call(pod, url, "POST", "/v1/resize", {"targets": [
                    {"jobId": job_id, "task": task, "cacheBytes": wanted[task]}
                    for task in due]})
                # The answer lists the slots it resized; the others are as GET read them.
                slots.update(self._slots(pod, answer, job_id, wanted))
                changed.update(due)
            for (task, _), observed in slots.items():
                read_back[task] = min(read_back.get(task, observed), observed)
        missing = sorted(set(wanted) - set(read_back))
        if missing:
            # No slot of the job yet (it is starting or failing over), or the backend is
            # not in the TaskManagers' lib/: the caller decides which (`kind` "missing").
            raise ResizeFailed(f"{FIELD}: no agent holds a slot of {', '.join(missing[:5])} "
                               f"(is the resizable backend in the TaskManagers' lib/?)",
                               "missing")
        return Resized(read_back, tuple(sorted(changed)))

    def _url(self, pod: str, ip: str) -> dial.Url:
        host = f"[{ip}]" if ":" in ip else ip
        try:
            return dial.parse_url(self.url_template.format(
                pod_ip=host, pod=pod, port=self.port, namespace=self.namespace,
                name=self.deployment), FIELD)
        except (dial.UrlRefused, KeyError, IndexError, ValueError):
            raise ResizeFailed(f"{FIELD}: TaskManager pod {pod} has no usable pod IP",
                               "unreachable") from None

    def _call(self, pod: str, url: dial.Url, method: str, path: str,
              body: Mapping[str, Any] | None = None) -> Any:
        def failed(message: str, kind: str) -> ResizeFailed:
            # An agent that times out, is cooling down or does not answer at all is
            # unreachable (retried); one that answers something else is malformed.
            return ResizeFailed(f"{message} ({method} {path})", kind if kind in (
                "unauthorized", "refused") else "malformed" if kind in (
                "http", "too-large", "malformed") else "unreachable")

        return outbound.request_json(
            method, url, path, None, failed=failed, breakers=self.breakers,
            default_s=self.timeout_s, field=FIELD, what=f"{WHAT} on TaskManager pod {pod}",
            max_bytes=MAX_ANSWER_BYTES, headers=self._header,
            body=None if body is None else json.dumps(body).encode(),
            status_kinds={401: "unauthorized", 409: "refused"})

    @staticmethod
    def _slots(pod: str, answer: Any, job_id: str, wanted: Mapping[str, int]
               ) -> dict[tuple[str, int], int]:
        """(task, subtask) -> observed cache bytes, of this job's slots of the wanted tasks."""
        slots = answer.get("slots") if isinstance(answer, dict) else None
        if not isinstance(slots, list):
            raise ResizeFailed(f"{WHAT} on TaskManager pod {pod} answered no slot list",
                               "malformed")
        found: dict[tuple[str, int], int] = {}
        for slot in slots:
            if not isinstance(slot, dict) or slot.get("jobId") != job_id:
                continue
            task, subtask, observed = (slot.get("task"), slot.get("subtask"),
                                       slot.get("observedCacheBytes"))
            if task not in wanted:
                continue
            if (not isinstance(subtask, int) or not isinstance(observed, int)
                    or isinstance(subtask, bool) or isinstance(observed, bool)):
                raise ResizeFailed(f"{WHAT} on TaskManager pod {pod} answered a slot "
                                   f"without its subtask or capacity", "malformed")
            found[(str(task), subtask)] = observed
        return found
