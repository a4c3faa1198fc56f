"""Calibration: the twin reproduces the shapes of Justin's Figure 4 and the cliff
measured on real RocksDB (ARCHITECTURE.md), measured through the twin itself."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.simulate_all import FIG4_MEMORY_MB as MEMORY_MB
from bench.simulate_all import FIG4_PARALLELISM as PARALLELISM
from bench.simulate_all import FIG4_SUSTAINS
from bench.simulate_all import fig4_rate as measured
from simulator.model import Uniform, load_model
from simulator.perf import MIB, memtable_mb, task_cost
from simulator.twin import Twin


def sustains(job: str, parallelism: int, memory_mb: int) -> bool:
    return measured(job, parallelism, memory_mb) >= FIG4_SUSTAINS * load_model(job).load.rate


def sustaining(job: str) -> set[tuple[int, int]]:
    """The (tasks; managed MB) cells of Figure 4 that reach the job's target."""
    return {(p, m) for p in PARALLELISM for m in MEMORY_MB if sustains(job, p, m)}


def test_read_reaches_the_target_from_4x1024_or_8x512_and_not_below():
    # Takeaway: memory substitutes for tasks. (2;512) and even (2;2048) fall short,
    # (4;512) falls short, (4;1024) and (8;512) reach 50k/s.
    assert sustaining("read") == {(4, 1024), (4, 2048), (8, 512), (8, 1024), (8, 2048)}
    # "With 256 MB, even the 8-task configuration is slightly below the target."
    assert 0.85 * 50_000 < measured("read", 8, 256) < 50_000


def test_read_gains_from_memory_are_large():
    rates = [measured("read", 4, m) for m in MEMORY_MB]
    assert rates == sorted(rates) and rates[-1] > 3 * rates[0]


def test_write_is_flat_in_memory_and_scale_out_helps():
    for p in PARALLELISM:
        rates = [measured("write", p, m) for m in MEMORY_MB[1:]]
        assert max(rates) - min(rates) < 0.03 * max(rates), p
    # "except the smallest (1;128), which is slightly below (1;256)" (smaller MemTable)
    assert 0.9 * measured("write", 1, 256) < measured("write", 1, 128) < measured("write", 1, 256)
    by_p = [measured("write", p, 512) for p in PARALLELISM]
    assert by_p == sorted(by_p) and by_p[2] > 3.5 * by_p[0]
    # Only 8 tasks reach 50k/s, at any memory; 4 tasks come close.
    assert sustaining("write") == {(8, m) for m in MEMORY_MB}
    assert 0.9 * 50_000 < measured("write", 4, 512) < 50_000


def test_update_needs_8_tasks_has_a_plateau_and_128mb_is_never_enough():
    assert sustaining("update") == {(8, m) for m in MEMORY_MB if m >= 256}
    # Plateau: past a threshold more memory brings no significant gain.
    assert measured("update", 8, 2048) < 1.05 * measured("update", 8, 256)
    assert measured("update", 4, 2048) < 1.05 * measured("update", 4, 1024)


@pytest.mark.parametrize(
    ("managed_mib", "cache_mb", "rate_range", "hit_range"),
    [
        # ARCHITECTURE.md: 56 MB cache -> 1.2-2k reads/s (hit 0.2-0.3); 224 MB -> 43k (0.77);
        # 447 MB -> 57k (0.76). Managed 64/256/512 MiB give those caches (× 5/6).
        (64, 56, (1_200, 2_000), (0.2, 0.3)),
        (256, 224, (0.9 * 43_000, 1.1 * 43_000), (0.72, 0.82)),
        (512, 447, (0.9 * 57_000, 1.1 * 57_000), (0.70, 0.82)),
    ],
)
def test_the_measured_rocksdb_cliff(managed_mib, cache_mb, rate_range, hit_range):
    model = load_model("read-cliff")
    read = model.operator("cliff-read")
    twin = Twin(model, seed=3, base_managed_mib=float(managed_mib))
    twin.advance(30)
    metrics = twin.observe(30).vertices[read.vertex_id]
    assert round(twin.cost(read.vertex_id).cache_bytes / 1e6) == cache_mb
    assert rate_range[0] <= metrics.records_in_per_s <= rate_range[1]
    assert metrics.cache_hit_rate is not None
    assert hit_range[0] <= metrics.cache_hit_rate <= hit_range[1]


def test_the_same_model_shows_a_smooth_curve_without_the_index_penalty():
    model = load_model("read-cliff")
    smooth = model.rocksdb.model_copy(update={"index_miss_us": model.rocksdb.miss_us})
    read = model.operator("cliff-read")

    def largest_jump(rocksdb) -> float:
        """Largest throughput ratio between neighbouring 16 MiB memory steps."""
        rates = [task_cost(read, 1, m, rocksdb, forst=None).capacity for m in range(32, 528, 16)]
        return max(b / a for a, b in itertools.pairwise(rates))

    assert largest_jump(model.rocksdb) > 3  # a cliff
    assert largest_jump(smooth) < 1.25  # a curve


def test_memtable_sizes_follow_justin_section_3():
    assert memtable_mb(128) == 32 and memtable_mb(158) == 32
    assert memtable_mb(256) == memtable_mb(512) == memtable_mb(2048) == 64


def test_stateless_operators_ignore_memory():
    op = load_model("q1").operator("q1-map")
    rocksdb = load_model("q1").rocksdb
    costs = {task_cost(op, 3, m, rocksdb, forst=None).us_per_record for m in (0, 158, 632)}
    assert len(costs) == 1


@settings(deadline=None)  # no timed assertions: CI's 2 cores are shared
@given(
    managed=st.floats(16, 4096), more=st.floats(1.01, 8), p=st.integers(1, 64),
    job=st.sampled_from(["read", "update", "q11", "q8", "q5"]),
)
def test_more_memory_never_hurts_and_hit_rate_is_a_rate(managed, more, p, job):
    model = load_model(job)
    op = next(o for o in model.operators if o.state is not None)
    low = task_cost(op, p, managed, model.rocksdb, forst=None)
    high = task_cost(op, p, managed * more, model.rocksdb, forst=None)
    assert high.capacity >= low.capacity * (1 - 1e-9)
    assert low.hit_rate is not None and 0.0 <= low.hit_rate <= 1.0
    assert high.cache_bytes == pytest.approx(low.cache_bytes * more)
    assert low.cache_bytes == pytest.approx(managed * MIB * 2.5 / 3)


def test_zipf_skew_hits_more_than_uniform_for_the_same_cache():
    model = load_model("q11")
    op = model.operator("q11-session")
    assert op.state is not None
    uniform = op.model_copy(
        update={"state": op.state.model_copy(update={"distribution": Uniform()})}
    )
    skewed = task_cost(op, 2, 158, model.rocksdb, forst=None)
    flat = task_cost(uniform, 2, 158, model.rocksdb, forst=None)
    assert skewed.hit_rate is not None and flat.hit_rate is not None
    assert skewed.hit_rate > flat.hit_rate and skewed.capacity > flat.capacity
