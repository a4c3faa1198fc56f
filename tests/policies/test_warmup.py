"""Cold block caches after a restart: held-back windows never enter the capacity surface."""

from __future__ import annotations

from dataclasses import replace

from policies import PolicyState, evaluate
from policies.decision import Branch
from policies.warmup import MAX_HELD_WINDOWS, WARM_AFTER_S, admit
from tests.policies.test_capacity import PARAMS, World, graph

WINDOW = 120.0


def test_the_first_window_of_a_run_is_held_and_a_stable_second_admitted() -> None:
    ok, w = admit(None, 0.40, restarted=1000.0, time=1150.0, window_s=WINDOW)
    assert not ok and w is not None and w.held == 1
    ok, w = admit(w, 0.70, 1000.0, 1270.0, WINDOW)  # still climbing
    assert not ok and w is not None and w.held == 2
    ok, w = admit(w, 0.71, 1000.0, 1390.0, WINDOW)  # settled
    assert ok and w is not None and w.warm
    ok, again = admit(w, 0.50, 1000.0, 1510.0, WINDOW)  # warm stays warm within the run
    assert ok and again == w  # and its record stays as it was: nothing more is tracked


def test_a_window_that_reaches_the_known_warm_hit_rate_is_admitted_at_once() -> None:
    assert admit(None, 0.69, 1000.0, 1150.0, WINDOW, known=0.70)[0]
    assert not admit(None, 0.40, 1000.0, 1150.0, WINDOW, known=0.70)[0]


def test_a_run_that_never_settles_is_held_a_bounded_number_of_windows() -> None:
    ok, w = admit(None, 0.1, 0.0, 150.0, WINDOW)
    held = 1
    for n in range(10):
        ok, w = admit(w, 0.1 + 0.1 * (n + 1), 0.0, 150.0 + WINDOW * (n + 1), WINDOW)
        if ok:
            break
        held += 1
    assert ok and held == MAX_HELD_WINDOWS


def test_a_new_restart_starts_over_and_the_same_window_is_not_counted_twice() -> None:
    ok, w = admit(None, 0.7, 0.0, 150.0, WINDOW)
    ok, w = admit(w, 0.7, 0.0, 270.0, WINDOW)
    assert ok
    ok, w2 = admit(w, 0.7, 500.0, 650.0, WINDOW)
    assert not ok
    assert admit(w2, 0.7, 500.0, 660.0, WINDOW) == (False, w2)


def test_stateless_unknown_starts_and_long_running_jobs_are_admitted() -> None:
    assert admit(None, None, 0.0, 150.0, WINDOW)[0]
    assert admit(None, 0.3, None, 150.0, WINDOW)[0]
    assert admit(None, 0.3, 0.0, WINDOW + WARM_AFTER_S, WINDOW)[0]


def test_a_cold_cache_window_after_a_restart_neither_enters_the_surface_nor_steps() -> None:
    """A failover restarts the counter at its configuration; the first window after it
    measures a cold cache (θ far below, every record dearer, backlog growing). The
    surface keeps the warm point, no step is taken, and the vertex says why."""
    world = World()
    g = graph(p=8, level=1)
    rate = 0.7 * 8e6 / world.service_us(8, 1)
    state = PolicyState()
    for n in range(1, 4):  # warm, long-running: learned at (8, 1)
        now = WINDOW * n + WARM_AFTER_S
        e = evaluate(g, replace(world.observe(g, rate, now), restarted=0.0), state, PARAMS, now)
        assert not e.decision.reconfigures
        state = e.state
    warm = state.learned["counter"].point(8, 1)
    assert warm is not None

    restarted = 1000.0
    cold = replace(world, skew=6.0)  # the same job with its cache nearly empty
    assert cold.service_us(8, 1) > 1.5 * world.service_us(8, 1)
    now = restarted + 15.0 + WINDOW
    e = evaluate(g, replace(cold.observe(g, rate, now), restarted=restarted), state, PARAMS,
                 now)
    assert not e.decision.reconfigures, e.decision.reason
    assert e.state.learned["counter"].point(8, 1) == warm
    counter = next(v for v in e.decision.vertices if v.vertex_id == "counter")
    assert counter.branch == Branch.CACHE_WARMING, counter.reason

    # Warm again: admitted at once (it reaches the θ known here), and learned.
    now += WINDOW
    e = evaluate(g, replace(world.observe(g, rate, now), restarted=restarted), e.state,
                 PARAMS, now)
    assert not e.decision.reconfigures
    point = e.state.learned["counter"].point(8, 1)
    assert point is not None and point.windows == warm.windows + 1
    assert abs(point.service_us - warm.service_us) < 0.01 * warm.service_us


def test_a_vertex_that_turns_too_idle_to_measure_is_not_held_forever() -> None:
    """A held window, then windows too idle for a capacity point (the real demo after its
    scale-up): the vertex is no longer reported as warming, and plans as before."""
    world = World()
    g = graph(p=8, level=1)
    rate = 0.7 * 8e6 / world.service_us(8, 1)
    now = WINDOW + 15.0
    e = evaluate(g, replace(world.observe(g, rate, now), restarted=0.0), PolicyState(),
                 PARAMS, now)
    assert e.state.learned["counter"].warming
    now += WINDOW
    idle = world.observe(g, 0.0001 * rate, now)
    e = evaluate(g, replace(idle, restarted=0.0), e.state, PARAMS, now)
    assert not e.state.learned["counter"].warming
    counter = next(v for v in e.decision.vertices if v.vertex_id == "counter")
    assert counter.branch != Branch.CACHE_WARMING
