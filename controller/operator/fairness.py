"""The worker threads that run loop passes, shared fairly between namespaces.

A pass blocks a thread on Prometheus, Flink REST and the API server. With one FIFO
pool, the passes of one tenant whose endpoints hang can hold every thread, and
everybody else's passes queue behind them. Here a pass first takes a slot in
`FairPool`: at most `workers` passes run at once, a namespace holds at most its
share (`workers` / namespaces running or waiting for a pass, rounded up, at least
one), and a free slot goes to the waiting namespace holding the fewest. The last free
slot is kept for a namespace running nothing, so one namespace cannot hold every slot:
a tenant arriving then starts at once instead of waiting for one of its passes to end
(alone, a namespace uses all but one worker). Each pass also runs under a
deadline derived from its resolution (controller.adapters.outbound), so a slot is
held for a bounded time.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from controller import telemetry
from controller.adapters import outbound

T = TypeVar("T")
# Share of the resolution a pass may spend on outbound calls; the rest is slack, so a
# pass against hung endpoints ends (and says so) within one resolution.
BUDGET_SHARE = 0.8
MIN_BUDGET_S, MAX_BUDGET_S = 1.0, 60.0
# A pass still on its thread this long after its deadline is stuck (liveness); API
# server calls (not under the deadline) are retried for a few seconds at most.
STUCK_GRACE_S = 30.0
UNBUDGETED_S = 60.0  # small API server calls made outside a pass


def pass_budget(resolution_s: float, max_s: float = MAX_BUDGET_S) -> float:
    """Seconds of outbound calls (PromQL and REST together) one pass may spend."""
    return min(max_s, max(MIN_BUDGET_S, BUDGET_SHARE * resolution_s))


class FairPool:
    """Runs blocking calls on `workers` threads, fairly between namespaces.

    Slots are granted on the event loop's thread only, so no lock is needed.
    """

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="loop")
        self.running: dict[str, int] = {}
        self.waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()
        # Passes on threads now: (started, budget), for the liveness probe.
        self.started: dict[asyncio.Future[Any], tuple[float, float | None]] = {}
        self.last_finished = self.busy_since = time.monotonic()
        telemetry.WORKERS.set(workers)

    def share(self) -> int:
        contending = len(set(self.running) | set(self.waiting))
        return max(1, math.ceil(self.workers / max(1, contending)))

    def in_use(self) -> int:
        return sum(self.running.values())

    async def run(self, namespace: str, call: Callable[..., T], *args: object,
                  budget_s: float | None = None) -> T:
        """`call(*args)` on a worker, in a copy of the caller's context (kopf's event
        poster follows the pass), under a pass deadline of `budget_s` if given.

        The slot is given back when the thread is done, not when the caller stops
        waiting: a daemon cancelled mid-call (its policy deleted) leaves the pass
        running on its thread until its deadline, and until then the slot is taken,
        so a re-created policy cannot pile a second pass onto a busy pool.
        """
        await self._acquire(namespace)
        loop = asyncio.get_running_loop()
        try:
            context = contextvars.copy_context()
            started = time.monotonic()
            future = loop.run_in_executor(
                self.executor, context.run, _under_deadline, budget_s, call, args)
        except BaseException:
            self._release(namespace)
            raise
        self.started[future] = (started, budget_s)

        def done(_: asyncio.Future[T]) -> None:
            self.started.pop(future, None)
            self.last_finished = time.monotonic()
            self._release(namespace)

        future.add_done_callback(done)
        return await asyncio.shield(future)

    def stalled_for(self) -> float:
        """Seconds since a pass last finished, while passes are running or waiting (0
        when idle: nothing is due then)."""
        if not self.started and not self.waiting:
            return 0.0
        return time.monotonic() - max(self.last_finished, self.busy_since)

    def stuck(self, grace_s: float = STUCK_GRACE_S) -> int:
        """Passes running past their deadline plus `grace_s` (or unbudgeted for long)."""
        now = time.monotonic()
        return sum(1 for started, budget in self.started.values()
                   if now - started > (budget if budget is not None else UNBUDGETED_S)
                   + grace_s)

    def wedged(self, grace_s: float = STUCK_GRACE_S) -> bool:
        """Every worker a namespace could be given is held by a pass past its deadline:
        all of them, or, while one namespace alone runs, all but the one kept for a
        namespace running nothing (its own passes wait for a stuck one to end)."""
        usable = self.workers if len(self.running) != 1 else max(1, self.workers - 1)
        return self.stuck(grace_s) >= usable

    async def _acquire(self, namespace: str) -> None:
        if not self.started and not self.waiting:  # idle until now: a stall counts from here
            self.busy_since = time.monotonic()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(namespace, deque()).append(future)
        self._grant()
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release(namespace)  # granted, then cancelled: give the slot back
            else:
                self._forget(namespace, future)
            raise

    def _forget(self, namespace: str, future: asyncio.Future[None]) -> None:
        queue = self.waiting.get(namespace)
        if queue is not None and future in queue:
            queue.remove(future)
            if not queue:
                del self.waiting[namespace]
        self._grant()

    def _release(self, namespace: str) -> None:
        self.running[namespace] -= 1
        if not self.running[namespace]:
            del self.running[namespace]
            telemetry.WORKERS_BUSY.remove(namespace)
        else:
            telemetry.WORKERS_BUSY.labels(namespace).set(self.running[namespace])
        self._grant()

    def _grant(self) -> None:
        while self.in_use() < self.workers and self.waiting:
            share = self.share()
            # The last free worker goes only to a namespace running nothing: a tenant that
            # arrives while one other holds the rest starts at once, not when a pass of the
            # other's ends (which may be its deadline later).
            last = self.workers - self.in_use() == 1
            eligible = [ns for ns in self.waiting if self.running.get(ns, 0) < share
                        and not (last and self.running.get(ns, 0))]
            if not eligible:
                return
            # Fewest running first; ties go to the namespace that has waited longest.
            namespace = min(eligible, key=lambda ns: self.running.get(ns, 0))
            queue = self.waiting[namespace]
            future = queue.popleft()
            if not queue:
                del self.waiting[namespace]
            else:
                self.waiting.move_to_end(namespace)
            if future.cancelled():
                continue
            self.running[namespace] = self.running.get(namespace, 0) + 1
            telemetry.WORKERS_BUSY.labels(namespace).set(self.running[namespace])
            future.set_result(None)


def _under_deadline(budget_s: float | None, call: Callable[..., T], args: tuple[object, ...]
                    ) -> T:
    if budget_s is None:
        return call(*args)
    with outbound.deadline(budget_s):
        return call(*args)
