"""Which controller process serves which policy, when the chart runs N of them.

A policy belongs to shard `murmur3(namespace) mod N`. The namespace, not the
policy: one tenant's policies share a process, so the per-namespace fairness of
that process (controller/operator/fairness.py) still bounds the tenant, and a
shard's share of the work follows from how tenants spread, with no label a tenant
could set (or forget) to move itself. Every process watches every policy; kopf's
`when=` filter keeps the daemon of a policy to its own shard.

kopf removes its finalizer from any object none of its handlers match, so the
shards cannot share one: each has its own (`FINALIZER-shard-<i>`); an unsharded
controller keeps the plain one. When N changes, a policy may carry a finalizer of
a shard that no longer owns it; the owner removes those (`stale_finalizers`), as
nobody else would.
"""

from __future__ import annotations

from collections.abc import Iterable

import mmh3

# kopf's finalizer on the policies an unsharded controller serves (the name predates
# sharding; policies that carry it keep working).
FINALIZER = "hybridscaler.dev/finalizer"


def shard_of(namespace: str, shards: int) -> int:
    """The shard (0 … shards-1) serving the policies in `namespace`; stable across
    processes, restarts and Python versions (unlike `hash`)."""
    return mmh3.hash(namespace, 0, signed=False) % shards


def finalizer(index: int, shards: int) -> str:
    return FINALIZER if shards <= 1 else f"{FINALIZER}-shard-{index}"


def peering_name(base: str, index: int, shards: int) -> str:
    """Peering (active/standby election) happens within a shard only: two shards
    sharing a peering would pause all but one of them."""
    return base if shards <= 1 else f"{base}-shard-{index}"


def identity(index: int, shards: int) -> str:
    """What Events name as this process' shard (appended to the reporting instance)."""
    return "" if shards <= 1 else f"shard-{index}-of-{shards}"


def stale_finalizers(finalizers: Iterable[str], index: int, shards: int) -> list[str]:
    """The controller's finalizers on a policy that shard `index` of `shards` owns,
    other than its own: left by the shard that served it before N changed."""
    own = finalizer(index, shards)
    return [f for f in finalizers
            if f != own and (f == FINALIZER or f.startswith(f"{FINALIZER}-shard-"))]


def check(index: int, shards: int) -> None:
    if shards < 1:
        raise ValueError(f"--shards must be at least 1, not {shards}")
    if not 0 <= index < shards:
        raise ValueError(f"--shard-index must be in 0…{shards - 1} (--shards {shards}), "
                         f"not {index}")
