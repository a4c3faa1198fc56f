"""Two shards on the real API server: every policy served exactly once, a dead shard
loses nothing (issue 16.7).

Two `hybrid-scaler run --shards 2 --shard-index i` processes with the chart's RBAC
watch every namespace. Policies live in namespaces chosen so that each shard owns
two. A policy's owner shows in three places no other shard could fake: the
finalizer kopf put on it (`hybridscaler.dev/finalizer-shard-<i>`), the per-policy
counters on that process' own /metrics, and the `reportingInstance` of its Events.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from controller.operator.shard import finalizer, identity, shard_of
from e2e.conftest import Cluster, wait_until
from e2e.demo import ControllerProcess, flink_deployment, policy
from e2e.stack import StackInfo
from e2e.test_controller import hsp
from policies.decision import epoch_seconds

pytestmark = pytest.mark.e2e

SHARDS, PER_SHARD = 2, 2
WINDOW_S, RESOLUTION_S = 10, 5
METRICS = {"window": f"{WINDOW_S}s", "resolution": f"{RESOLUTION_S}s", "stabilization": "0s"}
# Generous: passes queue behind other work on 2 shared cores.
FIRST_DECISION_S = 180


class Shard:
    def __init__(self, index: int, info: StackInfo, kubeconfig: Path, log: Path) -> None:
        self.index = index
        self.info, self.kubeconfig, self.log = info, kubeconfig, log
        self.process = self._process()

    def _process(self) -> ControllerProcess:
        return ControllerProcess(
            str(self.kubeconfig), self.info.prometheus_url, self.info.controller_env(),
            self.log, extra_args=("--shards", str(SHARDS), "--shard-index", str(self.index)))

    def start(self) -> Shard:
        self.process.start()
        return self

    def restart(self) -> None:
        self.process = self._process().start()

    def evaluated(self) -> set[str]:
        """namespace/policy of every policy this process evaluated (its own /metrics)."""
        found = set()
        for family in text_string_to_metric_families(self.process.metrics()):
            if family.name == "hybridscaler_evaluations":
                found |= {f"{s.labels['namespace']}/{s.labels['policy']}"
                          for s in family.samples if s.name.endswith("_total") and s.value > 0}
        return found


@pytest.fixture
def namespaces(cluster: Cluster) -> Iterator[dict[int, list[str]]]:
    """PER_SHARD fresh namespaces per shard (names drawn until each shard has its own)."""
    owned: dict[int, list[str]] = {i: [] for i in range(SHARDS)}
    while any(len(names) < PER_SHARD for names in owned.values()):
        name = f"e2e-shard-{uuid.uuid4().hex[:8]}"
        names = owned[shard_of(name, SHARDS)]
        if len(names) < PER_SHARD:
            names.append(name)
    every = [n for names in owned.values() for n in names]
    for name in every:
        cluster.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield owned
    for name in every:
        cluster.core.delete_namespace(name)


@pytest.fixture
def shards(e2e_stack: StackInfo, controller_kubeconfig: Path, cluster: Cluster,
           namespaces: dict[int, list[str]], tmp_path: Path) -> Iterator[list[Shard]]:
    running = [Shard(i, e2e_stack, controller_kubeconfig, tmp_path / f"shard-{i}.log").start()
               for i in range(SHARDS)]
    yield running
    # Policies first, while their shards still run and remove their finalizers.
    for names in namespaces.values():
        for ns in names:
            cluster.kubectl("delete", "hsp", "--all", "-n", ns, "--timeout=60s", check=False)
    for shard in running:
        shard.process.stop()


def decided_at(cluster: Cluster, key: str) -> float | None:
    namespace, name = key.split("/")
    stamp = ((hsp(cluster, namespace, name).get("status") or {}).get("lastDecision")
             or {}).get("time")
    return None if stamp is None else float(epoch_seconds(stamp))


def decided_after(cluster: Cluster, keys: list[str], since: dict[str, float | None]) -> bool:
    """Every policy in `keys` has a decision newer than `since` shows."""
    for key in keys:
        at = decided_at(cluster, key)
        if at is None or (since.get(key) is not None and at <= (since[key] or 0)):
            return False
    return True


def reporting_instances(cluster: Cluster, key: str) -> set[str]:
    namespace, name = key.split("/")
    found = cluster.core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},involvedObject.kind="
        "HybridScalingPolicy")
    return {e.reporting_instance or "" for e in found.items}


def test_two_shards_serve_every_policy_once_and_a_killed_shard_resumes_its_own(
    cluster: Cluster, namespaces: dict[int, list[str]], shards: list[Shard],
) -> None:
    docs: list[dict[str, Any]] = []
    for names in namespaces.values():
        for ns in names:
            docs.append(flink_deployment(ns, "job", model="read"))
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    for names in namespaces.values():
        for ns in names:
            cluster.wait_flink(ns, "job")
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([
        policy(ns, "p", "job", mode="Recommend", metrics=METRICS)
        for names in namespaces.values() for ns in names]))
    owned = {i: [f"{ns}/p" for ns in names] for i, names in namespaces.items()}
    every = [key for keys in owned.values() for key in keys]

    wait_until(lambda: decided_after(cluster, every, {}), FIRST_DECISION_S,
               "a decision on every policy")

    # Served exactly once: the owner's finalizer alone, the owner's counters alone.
    for i, keys in owned.items():
        for key in keys:
            ns, name = key.split("/")
            mine = [f for f in hsp(cluster, ns, name)["metadata"].get("finalizers", [])
                    if f.startswith("hybridscaler.dev/")]
            assert mine == [finalizer(i, SHARDS)], (key, mine)
    evaluated = {shard.index: shard.evaluated() & set(every) for shard in shards}
    for i, keys in owned.items():
        assert evaluated[i] == set(keys), (i, evaluated)
    # Events, where a decision posted one, name the owner's shard only.
    for i, keys in owned.items():
        for key in keys:
            for instance in reporting_instances(cluster, key) - {""}:
                assert instance.endswith(identity(i, SHARDS)), (key, instance)

    # kill -9 shard 1: its policies wait, untouched, while shard 0 keeps deciding.
    dead, alive = shards[1], shards[0]
    dead.process.kill9()
    stopped = {key: decided_at(cluster, key) for key in every}
    history = {key: hsp(cluster, *key.split("/"))["status"] for key in owned[dead.index]}
    wait_until(lambda: decided_after(cluster, owned[alive.index], stopped), FIRST_DECISION_S,
               "shard 0 deciding again after shard 1 died")
    again = {key: decided_at(cluster, key) for key in owned[alive.index]}
    wait_until(lambda: decided_after(cluster, owned[alive.index], again), FIRST_DECISION_S,
               "shard 0 deciding twice after shard 1 died")
    for key in owned[dead.index]:
        assert decided_at(cluster, key) == stopped[key], f"{key} decided while its shard was dead"
    assert not alive.evaluated() & set(owned[dead.index])

    # Restarted, shard 1 continues from the status it left: nothing lost, nothing redone.
    dead.restart()
    wait_until(lambda: decided_after(cluster, owned[dead.index], stopped), FIRST_DECISION_S,
               "shard 1's policies deciding again after its restart")
    for key in owned[dead.index]:
        status = hsp(cluster, *key.split("/"))["status"]
        before = history[key]
        assert status.get("step", 0) >= before.get("step", 0), (key, before, status)
        kept = status.get("history") or []
        assert kept[:len(before.get("history") or [])] == (before.get("history") or []), key
    assert dead.evaluated() & set(every) == set(owned[dead.index])
    assert not alive.evaluated() & set(owned[dead.index])

    # N changes (2 -> 1): one unsharded process takes every policy over from its status
    # and removes the shards' finalizers, which no process would remove otherwise.
    for shard in shards:
        shard.process.kill9()
    handed_over = {key: decided_at(cluster, key) for key in every}
    alone = shards[0]
    alone.process = ControllerProcess(str(alone.kubeconfig), alone.info.prometheus_url,
                                      alone.info.controller_env(), alone.log).start()

    def only_the_plain_finalizer() -> bool:
        return all([f for f in hsp(cluster, *key.split("/"))["metadata"].get("finalizers", [])
                    if f.startswith("hybridscaler.dev/")] == [finalizer(0, 1)] for key in every)

    wait_until(only_the_plain_finalizer, FIRST_DECISION_S, "the shards' finalizers removed")
    wait_until(lambda: decided_after(cluster, every, handed_over), FIRST_DECISION_S,
               "every policy deciding under one process")
