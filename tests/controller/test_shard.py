"""Sharding by namespace: stable, disjoint, complete, and the finalizers it leaves."""

from __future__ import annotations

from collections import Counter

import pytest

from controller.operator import shard
from controller.operator.shard import FINALIZER


def test_every_namespace_has_exactly_one_shard_for_any_count() -> None:
    names = [f"team-{i}" for i in range(500)]
    for shards in (1, 2, 3, 7):
        owners = {n: [i for i in range(shards) if shard.shard_of(n, shards) == i] for n in names}
        assert all(len(found) == 1 for found in owners.values()), shards


def test_the_hash_is_stable_across_processes_and_versions() -> None:
    # MurmurHash3_x86_32, seed 0, unsigned: the published test vector, so another
    # implementation (a Go or Java tool, a newer mmh3) places namespaces the same way.
    # Python's hash() would not do: it is salted per process.
    fox = "The quick brown fox jumps over the lazy dog"
    assert shard.shard_of(fox, 2**32) == 0x2E4FF723
    assert shard.shard_of(fox, 10) == 0x2E4FF723 % 10


def test_namespaces_spread_evenly() -> None:
    counts = Counter(shard.shard_of(f"tenant-{i}", 4) for i in range(4000))
    assert set(counts) == {0, 1, 2, 3}
    assert max(counts.values()) < 1.1 * min(counts.values()), counts


def test_one_shard_keeps_the_unsharded_names() -> None:
    assert shard.finalizer(0, 1) == FINALIZER
    assert shard.peering_name("hs", 0, 1) == "hs"
    assert shard.identity(0, 1) == ""
    assert shard.finalizer(1, 3) == f"{FINALIZER}-shard-1"
    assert shard.peering_name("hs", 2, 3) == "hs-shard-2"
    assert shard.identity(2, 3) == "shard-2-of-3"


def test_the_owner_finds_finalizers_of_a_previous_sharding() -> None:
    others = ["example.com/keep", f"{FINALIZER}x"]
    # 1 -> 2 shards: the plain finalizer is stale for both.
    assert shard.stale_finalizers([FINALIZER, *others], 1, 2) == [FINALIZER]
    # 3 -> 2: shard-2 no longer exists; its finalizer is the owner's to remove.
    assert shard.stale_finalizers(
        [f"{FINALIZER}-shard-2", f"{FINALIZER}-shard-0", *others], 0, 2) == [
        f"{FINALIZER}-shard-2"]
    # 2 -> 1: every shard's finalizer goes, the plain one stays.
    assert shard.stale_finalizers([f"{FINALIZER}-shard-1", FINALIZER], 0, 1) == [
        f"{FINALIZER}-shard-1"]
    assert shard.stale_finalizers([FINALIZER, *others], 0, 1) == []


@pytest.mark.parametrize(("index", "shards", "flag"),
                         [(0, 0, "--shards"), (2, 2, "--shard-index"), (-1, 2, "--shard-index")])
def test_bad_flags_are_refused_naming_the_flag(index: int, shards: int, flag: str) -> None:
    with pytest.raises(ValueError, match=flag):
        shard.check(index, shards)
