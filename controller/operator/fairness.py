"""The worker threads that run loop passes, shared fairly between namespaces.

A pass blocks a thread on Prometheus, Flink REST and the API server. With one FIFO
pool, the passes of one tenant whose endpoints hang can hold every thread, and
everybody else's passes queue behind them. Here a pass first takes a slot in
`FairPool`: at most `workers` passes run at once, a namespace holds at most its
share (`workers` / namespaces running or waiting for a pass, rounded up, at least
one), and a free slot goes to the waiting namespace holding the fewest. Each pass also runs under a
deadline derived from its resolution (controller.adapters.outbound), so a slot is
held for a bounded time.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from controller import telemetry
from controller.adapters import outbound

T = TypeVar("T")
# Share of the resolution a pass may spend on outbound calls; the rest is slack, so a
# pass against hung endpoints ends (and says so) within one resolution.
BUDGET_SHARE = 0.8
MIN_BUDGET_S, MAX_BUDGET_S = 1.0, 60.0


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
        telemetry.WORKERS.set(workers)

    def share(self) -> int:
        contending = len(set(self.running) | set(self.waiting))
        return max(1, math.ceil(self.workers / max(1, contending)))

    def in_use(self) -> int:
        return sum(self.running.values())

    async def run(self, namespace: str, call: Callable[..., T], *args: object,
                  budget_s: float | None = None) -> T:
        """`call(*args)` on a worker, in a copy of the caller's context (kopf's event
        poster follows the pass), under a pass deadline of `budget_s` if given."""
        await self._acquire(namespace)
        try:
            context = contextvars.copy_context()
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(
                self.executor, context.run, _under_deadline, budget_s, call, args)
        finally:
            self._release(namespace)

    async def _acquire(self, namespace: str) -> None:
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
            eligible = [ns for ns in self.waiting if self.running.get(ns, 0) < share]
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
