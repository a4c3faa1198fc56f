"""/healthz means it: the liveness probe fails when every worker is stuck, or when no
pass finished for several resolutions while passes were due; and a pass whose daemon
stopped waiting keeps its slot until its thread is done."""

from __future__ import annotations

import asyncio
import threading

import kopf
import pytest

from controller.operator import handlers
from controller.operator.fairness import FairPool


def test_a_cancelled_pass_keeps_its_slot_until_its_thread_is_done() -> None:
    release = threading.Event()

    async def scenario() -> list[int]:
        pool = FairPool(2)
        task = asyncio.ensure_future(pool.run("ns", release.wait, budget_s=1.0))
        while not pool.started:
            await asyncio.sleep(0.01)
        task.cancel()  # the policy is deleted mid-call
        with pytest.raises(asyncio.CancelledError):
            await task
        seen = [pool.in_use(), len(pool.started)]
        release.set()  # the call ends (its deadline, in the real adapters)
        while pool.started:
            await asyncio.sleep(0.01)
        seen += [pool.in_use(), len(pool.started)]
        pool.executor.shutdown()
        return seen

    # Before: the slot was freed at once while the thread stayed busy: [0, ...].
    assert asyncio.run(scenario()) == [1, 1, 0, 0]


def test_liveness_fails_when_every_worker_is_stuck(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    pool = FairPool(2)
    monkeypatch.setattr(handlers, "_pool", lambda: pool)
    monkeypatch.setattr(handlers, "RUNNING", {"ns/p"})

    async def scenario() -> tuple[str | None, int, int]:
        tasks = [asyncio.ensure_future(pool.run(f"ns{i}", release.wait, budget_s=1.0))
                 for i in range(2)]
        while len(pool.started) < 2:
            await asyncio.sleep(0.01)
        healthy = handlers.liveness_problem()  # within deadline + grace: alive
        stuck, all_stuck = pool.stuck(), pool.stuck(grace_s=-10.0)  # grace used up
        monkeypatch.setattr(pool, "stuck", lambda grace_s=0.0: 2)
        with pytest.raises(kopf.PermanentError, match=r"every worker it can use \(2 of 2\)"):
            handlers.check_liveness()
        release.set()
        await asyncio.gather(*tasks)
        return healthy, stuck, all_stuck

    assert asyncio.run(scenario()) == (None, 0, 2)
    pool.executor.shutdown()


def test_liveness_fails_when_a_lone_namespace_holds_every_worker_it_can_use_stuck(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Alone, a namespace is given all workers but one (kept for a namespace running
    # nothing): with those stuck its own passes wait, and the probe says so at once.
    release = threading.Event()
    pool = FairPool(4)
    monkeypatch.setattr(handlers, "_pool", lambda: pool)
    monkeypatch.setattr(handlers, "RUNNING", {"ns/p"})

    async def scenario() -> tuple[int, str | None, bool]:
        tasks = [asyncio.ensure_future(pool.run("lone", release.wait, budget_s=1.0))
                 for _ in range(6)]
        while len(pool.started) < 3:
            await asyncio.sleep(0.01)
        healthy = handlers.liveness_problem()
        monkeypatch.setattr(pool, "stuck", lambda grace_s=0.0: 3)
        problem = handlers.liveness_problem()
        monkeypatch.setattr(pool, "running", {"lone": 3, "other": 1})
        two = pool.wedged()  # another namespace runs: one worker still serves it
        monkeypatch.undo()
        release.set()
        await asyncio.gather(*tasks)
        return len(pool.started), healthy, problem is not None and "3 of 4" in problem and not two

    assert asyncio.run(scenario()) == (0, None, True)
    pool.executor.shutdown()


def test_liveness_fails_when_no_pass_finished_for_several_resolutions(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pool = FairPool(2)
    monkeypatch.setattr(handlers, "_pool", lambda: pool)
    monkeypatch.setattr(handlers, "RUNNING", {"ns/p"})
    monkeypatch.setattr(handlers, "RESOLUTIONS", {"ns/p": 5.0})
    assert handlers.liveness_problem() is None  # idle: nothing due
    monkeypatch.setattr(pool, "stalled_for", lambda: 6 * 5.0 + 2 * 4.0 - 1)
    assert handlers.liveness_problem() is None
    monkeypatch.setattr(pool, "stalled_for", lambda: 6 * 5.0 + 2 * 4.0 + 1)
    assert "no pass finished" in (handlers.liveness_problem() or "")
    pool.executor.shutdown()
