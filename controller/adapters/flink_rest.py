"""Read a running job's graph from the JobManager REST API into `policies.model.JobGraph`.

Endpoints (shapes pinned by the golden samples of Flink 1.20.5):
`/jobs/overview` (which job, its state), `/jobs/<jid>` (vertices, parallelism, max
parallelism), `/jobs/<jid>/plan` (edges and ship strategies), `/jobs/<jid>/config`
(user config, where flink-plugin lists operator uids), and before a step
`/jobs/<jid>/jobmanager/config` (the configuration the operator deployed: whether its own
autoscaler is on, `controller.upstream.upstream_switched_on`).

Flink never reports operator uids, but it derives ids from them: a vertex id is the
128-bit murmur3 (seed 0) of its chain head's uid, and every chained operator's
`operator_id` is the hash of its own uid (StreamGraphHasherV2). So a uid we know of
(from the job config, the FlinkDeployment or the policy) is attached to the vertex
whose id, or one of whose operator ids, equals its hash.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import quote

import mmh3
import requests

from controller.adapters import dial, outbound
from controller.ports import FlinkRestError, JobSummary
from policies.model import Edge, JobGraph, ShipStrategy, Vertex

log = logging.getLogger(__name__)
# flink-plugin publishes the uids it manages here, comma separated (docs/flink-contract.md).
OPERATOR_UIDS_KEY = "hybridscaler.operator-uids"
# Job states in which a job can be measured and reconfigured.
RUNNING = "RUNNING"
# A job graph of 1,000 vertices is well under 2 MiB of JSON.
MAX_ANSWER_BYTES = 4 * 2**20
# What one job may hold for the controller to scale it. Past these the pass stops
# (JobAnswerTooLarge) before any work grows with them: the policies look up a vertex's
# edges, and the planner prices slot mixes, in time that grows faster than the graph,
# and 4 MiB of JSON can list 100,000 vertices. Flink jobs, chained, hold tens of
# vertices; a few hundred is already rare.
MAX_VERTICES = 200
MAX_EDGES = 2_000
MAX_OPERATOR_UIDS = 10_000


def environ_proxy(url: dial.Url) -> dial.Proxy | None:
    """The operator's HTTP(S)_PROXY for `url` (NO_PROXY honoured), parsed by our parser."""
    found = requests.utils.get_environ_proxies(str(url)).get(url.scheme)
    if not found:
        return None
    parsed = dial.parse_url(found, "HTTP(S)_PROXY")
    return dial.Proxy(parsed.host, parsed.port)


def operator_id(uid: str) -> str:
    """The OperatorID (and, for a chain head, JobVertexID) Flink derives from a uid."""
    return mmh3.hash_bytes(uid.encode("utf-8"), 0, True).hex()


# A JobID as Flink writes it (32 hex digits): anything else is not a job we read, and
# never a text we repeat in status (`watching job <jid>`).
JOB_ID = re.compile(r"[0-9a-f]{32}")


def pick_job(overview: Mapping[str, Any]) -> JobSummary | None:
    """The job a FlinkDeployment runs: the running one, else the most recently started.
    An entry whose jid is no JobID is passed over."""
    jobs = [
        JobSummary(
            jid=str(j["jid"]),
            name=str(j.get("name", "")),
            state=str(j.get("state", "")),
            start_time_ms=int(j.get("start-time", 0)),
            last_modification_ms=int(j.get("last-modification", j.get("start-time", 0))),
        )
        for j in overview.get("jobs", [])
        if JOB_ID.fullmatch(str(j.get("jid", "")))
    ]
    if not jobs:
        return None
    return max(jobs, key=lambda j: (j.state == RUNNING, j.start_time_ms))


def _within_limits(jid: str, job: Mapping[str, Any], plan: Mapping[str, Any],
                   uids: Sequence[str]) -> None:
    """`FlinkRestError` (too-large) when the job is larger than the controller scales."""
    try:
        vertices = len(job.get("vertices", []))
        nodes = plan.get("plan", plan).get("nodes", [])
        edges = sum(len(node.get("inputs", []) or []) for node in nodes)
    except (AttributeError, TypeError):
        return  # malformed, not large: the parse says so
    for count, most, what in ((vertices, MAX_VERTICES, "vertices"),
                              (edges, MAX_EDGES, "edges"),
                              (len(uids), MAX_OPERATOR_UIDS, "operator uids")):
        if count > most:
            raise FlinkRestError(f"job {jid} has {count} {what}; this controller scales "
                                 f"jobs of at most {most}", kind="too-large")


def uids_from_config(config: Mapping[str, Any]) -> tuple[str, ...]:
    user = config.get("execution-config", {}).get("user-config", {}) or {}
    raw = str(user.get(OPERATOR_UIDS_KEY, ""))
    return tuple(u.strip() for u in raw.split(",") if u.strip())


def parse_job_graph(
    job: Mapping[str, Any],
    plan: Mapping[str, Any],
    uid_candidates: Iterable[str] = (),
    operator_ids: Mapping[str, Iterable[str]] | None = None,
) -> JobGraph:
    """Build the job graph from `/jobs/<jid>` and `/jobs/<jid>/plan`.

    `operator_ids` maps a vertex id to the operator ids of its chain (from the
    `operator_id` Prometheus label), so uids of chained operators are found too.
    Memory levels are unknown to Flink; they are left at 0 for the caller to set.
    """
    chains: dict[str, set[str]] = {}
    for vertex in job.get("vertices", []):
        vid = str(vertex["id"])
        chains[vid] = {vid, *((operator_ids or {}).get(vid, ()))}
    uids_by_vertex: dict[str, list[str]] = {vid: [] for vid in chains}
    holders: dict[str, list[str]] = {}  # operator id -> the vertices whose chain holds it
    for vid, ids in chains.items():
        for oid in ids:
            holders.setdefault(oid, []).append(vid)
    for uid in dict.fromkeys(uid_candidates):
        for vid in holders.get(operator_id(uid), ()):
            uids_by_vertex[vid].append(uid)
    vertices = tuple(
        Vertex(
            id=str(v["id"]),
            name=str(v.get("name", v["id"])),
            max_parallelism=_max_parallelism(v, job),
            parallelism=int(v["parallelism"]),
            memory_level=0,
            operator_uids=tuple(uids_by_vertex[str(v["id"])]),
        )
        for v in job.get("vertices", [])
    )
    edges = tuple(
        Edge(
            source=str(i["id"]),
            target=str(node["id"]),
            ship_strategy=ShipStrategy.parse(str(i.get("ship_strategy", ""))),
        )
        for node in plan.get("plan", plan).get("nodes", [])
        for i in node.get("inputs", []) or []
    )
    return JobGraph(vertices=vertices, edges=edges)


def _max_parallelism(vertex: Mapping[str, Any], job: Mapping[str, Any]) -> int:
    for value in (vertex.get("maxParallelism"), job.get("maxParallelism")):
        if isinstance(value, int) and value > 0:
            return value
    # Flink's default when nothing is set: 128 for small parallelism (KeyGroupRangeAssignment).
    return max(128, int(vertex["parallelism"]))


class FlinkRest:
    """A small synchronous client of one JobManager's REST API.

    Built on controller.adapters.dial: the URL is parsed once, each call has one
    deadline for the whole answer (from the pass's budget) and a size limit; a
    JobManager that timed out is not dialled again until its cool-down ends; errors
    name the endpoint by its setting and never quote answer bodies (they end up in
    status and Events). The operator's HTTP proxy (HTTP_PROXY/NO_PROXY) applies: the
    JobManager address comes from --flink-rest-url (the operator's), never from a
    tenant's spec.
    """

    def __init__(self, base_url: dial.Url | str, timeout_s: float = 5.0,
                 breakers: outbound.Breakers | None = None,
                 field: str = "--flink-rest-url", max_bytes: int = MAX_ANSWER_BYTES,
                 proxy: dial.Proxy | bool | None = True) -> None:
        self.url = base_url if isinstance(base_url, dial.Url) else dial.parse_url(
            base_url, field)
        self.base_url = str(self.url)
        self.timeout_s, self.field, self.max_bytes = timeout_s, field, max_bytes
        self.endpoint = self.url.endpoint
        self.breakers = breakers or outbound.BREAKERS
        self.proxy = environ_proxy(self.url) if proxy is True else (proxy or None)

    def _get(self, path: str) -> dict[str, Any]:
        body = self._get_json(path)
        if not isinstance(body, dict):
            raise FlinkRestError(f"Flink REST ({self.field}) answered {type(body).__name__}, "
                                 f"not an object (GET {path})", "malformed")
        return body

    def _get_json(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        def failed(message: str, kind: str) -> FlinkRestError:
            return FlinkRestError(f"{message} (GET {path})", kind)

        return outbound.get_json(self.url, path, params, failed=failed,
                                 breakers=self.breakers, default_s=self.timeout_s,
                                 field=self.field, what="Flink REST",
                                 max_bytes=self.max_bytes, proxy=self.proxy)

    def job(self) -> JobSummary | None:
        job = pick_job(self._get("/jobs/overview"))
        return None if job is None else replace(job, restarts=self._restarts(job.jid))

    def _restarts(self, jid: str) -> int | None:
        """The job's numRestarts gauge (GET /jobs/:jid/metrics?get=numRestarts): a failover
        in place keeps the job's id and start, and shows only here. None when unanswered."""
        try:
            answer = self._get_json(f"/jobs/{quote(jid, safe='')}/metrics",
                                    {"get": "numRestarts"})
        except FlinkRestError:
            return None
        for metric in answer if isinstance(answer, list) else ():
            if isinstance(metric, dict) and metric.get("id") == "numRestarts":
                try:
                    value = float(metric.get("value", ""))
                except (TypeError, ValueError):
                    return None
                return int(value) if math.isfinite(value) and value >= 0 else None
        return None

    def configuration(self, jid: str, keys: Iterable[str]) -> Mapping[str, str] | None:
        try:
            answer = self._get_json(f"/jobs/{quote(jid, safe='')}/jobmanager/config")
        except FlinkRestError:
            return None
        if not isinstance(answer, list):
            return None
        wanted = set(keys)  # only these are kept: nothing else of the answer is repeated
        return {e["key"]: e["value"] for e in answer
                if isinstance(e, dict) and isinstance(e.get("key"), str)
                and e["key"] in wanted and isinstance(e.get("value"), str)}

    def job_graph(
        self,
        jid: str,
        uid_candidates: Iterable[str] = (),
        operator_ids: Mapping[str, Iterable[str]] | None = None,
    ) -> JobGraph:
        jid = quote(jid, safe="")  # the JobManager's word, not a path
        job = self._get(f"/jobs/{jid}")
        plan = self._get(f"/jobs/{jid}/plan") if "plan" not in job else {"plan": job["plan"]}
        try:
            config = self._get(f"/jobs/{jid}/config")
        except FlinkRestError:
            config = {}
        candidates = tuple(dict.fromkeys((*uids_from_config(config), *uid_candidates)))
        _within_limits(jid, job, plan, candidates)
        try:
            return parse_job_graph(job, plan, candidates, operator_ids)
        except (KeyError, ValueError, TypeError) as e:
            # What failed quotes the answer: logged, never repeated in status or Events.
            log.debug("job %s: unusable job graph: %s", jid, e)
            raise FlinkRestError(
                f"job {jid}: the JobManager answered a job graph this controller cannot use "
                f"(a field of GET /jobs/{jid} or its plan is missing or malformed)") from None
