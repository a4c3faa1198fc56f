"""A hot key (State.hot_key_share): one key, one key group, one subtask at any parallelism."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from policies.model import VertexConfig
from simulator.model import JobModel, Noise, State, load_model
from simulator.perf import (
    data_hit_rate,
    hot_key_group,
    key_group_shares,
    key_group_weights,
    task_cost,
    vertex_limit,
    vertex_shares,
)
from simulator.results import oracle
from simulator.twin import Twin


def with_hot_key(model: JobModel, uid: str, share: float) -> JobModel:
    ops = tuple(
        o.model_copy(update={"state": o.state.model_copy(update={"hot_key_share": share})})
        if o.uid == uid and o.state is not None else o
        for o in model.operators)
    return model.model_copy(update={"operators": ops})


def owner(group: int, max_parallelism: int, parallelism: int) -> int:
    """The subtask Flink's KeyGroupRangeAssignment gives a key group."""
    return group * parallelism // max_parallelism


@pytest.mark.parametrize("noise", [True, False])
@pytest.mark.parametrize("parallelism", [2, 8, 32, 128])
def test_the_hot_key_stays_on_one_subtask_whatever_the_parallelism(noise, parallelism):
    model = with_hot_key(load_model("q11"), "q11-session", 0.2)
    if not noise:
        model = model.model_copy(update={"noise": Noise.off()})
    op = model.operator("q11-session")
    shares = vertex_shares(model, op, parallelism, seed=3)
    group = hot_key_group(op.uid, op.max_parallelism)
    hot = owner(group, op.max_parallelism, parallelism)
    assert shares[hot] == max(shares)
    assert shares[hot] >= 0.2


def test_the_hot_key_group_is_fixed_by_the_key_not_the_seed():
    model = with_hot_key(load_model("q11"), "q11-session", 0.3)
    op = model.operator("q11-session")
    assert op.state is not None
    group = hot_key_group(op.uid, op.max_parallelism)
    for seed in ("0/keys/q11-session", "7/keys/q11-session"):
        weights = key_group_weights(op.state, op.max_parallelism, seed, group)
        assert max(range(len(weights)), key=weights.__getitem__) == group
        assert sum(weights) == pytest.approx(1.0)


def test_no_hot_key_leaves_the_key_groups_as_they_were():
    state = load_model("q5").operator("q5-window").state
    assert state is not None and state.hot_key_share == 0
    plain = key_group_weights(state, 128, "1/keys/q5-window")
    with_group = key_group_weights(state, 128, "1/keys/q5-window", 17)
    assert plain == with_group


def test_adding_tasks_stops_helping_once_the_hot_key_is_the_limit():
    model = with_hot_key(load_model("q11"), "q11-session", 0.25)
    op = model.operator("q11-session")
    limits = [vertex_limit(op, p, 632.0, model.rocksdb,
                           shares=vertex_shares(model, op, p, seed=0), forst=None)
              for p in (4, 16, 64)]
    for p, limit in zip((4, 16, 64), limits, strict=True):
        # One task's capacity / 0.25 bounds the vertex, whatever the parallelism.
        assert limit <= task_cost(op, p, 632.0, model.rocksdb, forst=None).capacity / 0.25 + 1e-6
    assert limits[2] < 1.3 * limits[1]  # 4x the tasks: only the cache per key grows
    plain = load_model("q11")
    plain_op = plain.operator("q11-session")
    grows = [vertex_limit(plain_op, p, 632.0, plain.rocksdb,
                          shares=vertex_shares(plain, plain_op, p, seed=0), forst=None)
             for p in (16, 64)]
    assert grows[1] > 2 * grows[0]


def test_the_hot_subtask_saturates_while_the_mean_looks_fine():
    model = with_hot_key(load_model("q11"), "q11-session", 0.3)
    session = model.operator("q11-session").vertex_id
    twin = Twin(model, seed=1, configuration={session: VertexConfig(16, 2)})
    twin.advance(60)
    m = twin.observe(60).vertices[session]
    assert m.busy_ms_per_s_max > 950
    assert m.busy_ms_per_s < 400


def test_the_hot_key_is_one_always_cached_entry():
    base = State(keys=1_000_000, value_bytes=100, access={"update": 1.0})
    hot = base.model_copy(update={"hot_key_share": 0.4})
    rocksdb = load_model("q11").rocksdb
    entry = (100 + 40) * rocksdb.footprint_factor
    small = 1000 * entry  # a thousand entries of a million-key working set
    assert data_hit_rate(hot, 1, small, rocksdb) == pytest.approx(
        0.4 + 0.6 * data_hit_rate(base, 1, small - entry, rocksdb), rel=1e-3)
    assert data_hit_rate(hot, 1, small, rocksdb) > data_hit_rate(base, 1, small, rocksdb)
    assert data_hit_rate(hot, 1, 0.5 * entry, rocksdb) == 0.0  # not even one entry fits


def test_a_hot_key_can_put_the_utilization_target_out_of_reach():
    plain = load_model("q11")
    plain = plain.model_copy(update={"operators": tuple(
        o.model_copy(update={"max_parallelism": 128}) for o in plain.operators)})
    assert oracle(plain, utilization=0.5).feasible
    assert oracle(with_hot_key(plain, "q11-session", 0.05), utilization=0.5).feasible
    # 30 % of 100k records/s on one task: more than half a task's capacity at any memory.
    assert not oracle(with_hot_key(plain, "q11-session", 0.3), utilization=0.5).feasible


@pytest.mark.parametrize("share, keys", [(1.0, 10), (-0.1, 10), (0.2, 1)])
def test_a_hot_key_share_out_of_range_is_refused(share, keys):
    with pytest.raises(ValidationError) as err:
        State(keys=keys, value_bytes=10, access={"read": 1.0}, hot_key_share=share)
    assert "hot_key_share" in str(err.value)


def test_key_group_shares_sum_the_hot_group_into_its_subtask():
    weights = tuple([0.5 / 127] * 64 + [0.5] + [0.5 / 127] * 63)
    shares = key_group_shares(weights, 4)
    assert shares[owner(64, 128, 4)] == max(shares)
