package dev.hybridscaler.flink.resize;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.rocksdb.Cache;
import org.rocksdb.RocksDB;
import org.rocksdb.WriteBufferManager;
import org.slf4j.MDC;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * The agent's rules with the native calls replaced by a recording port (the real shim is covered
 * by NativeResizeTest and the MiniCluster test): order of operations, the budget, all-or-nothing,
 * and close waiting for a resize in flight.
 */
class ResizeAgentTest {
    private static final long MIB = 1024 * 1024;
    private static final String JOB = "0123456789abcdef0123456789abcdef";

    @BeforeAll
    static void rocksdb() {
        RocksDB.loadLibrary(); // the agent holds real RocksJava objects
    }

    /** Records every call; capacities live in a map keyed by handle. */
    static final class Recording implements ResizeAgent.Ops {
        final List<String> calls = Collections.synchronizedList(new ArrayList<>());
        final Map<Long, Long> bytes = new HashMap<>();
        final Map<Long, String> names = new HashMap<>();
        boolean writeBuffers = true;
        String bindResult;
        final List<ResizeAgent.Flavour> bound = new ArrayList<>();
        RuntimeException onRead; // thrown by every capacity read, when set
        CountDownLatch inResize;
        CountDownLatch release;

        @Override
        public String bind(ResizeAgent.Flavour flavour) {
            bound.add(flavour);
            return bindResult;
        }

        @Override
        public String library() {
            return "fake";
        }

        @Override
        public boolean canResizeWriteBuffers() {
            return writeBuffers;
        }

        @Override
        public long cacheCapacity(long h) {
            if (onRead != null) {
                throw onRead;
            }
            return bytes.getOrDefault(h, -1L);
        }

        @Override
        public boolean setCacheCapacity(long h, long b) {
            calls.add("cache " + names.get(h) + " " + b / MIB);
            block();
            bytes.put(h, b);
            return true;
        }

        @Override
        public long writeBufferSize(long h) {
            return bytes.getOrDefault(h, -1L);
        }

        @Override
        public boolean setWriteBufferSize(long h, long b) {
            calls.add("wb " + names.get(h) + " " + b / MIB);
            bytes.put(h, b);
            return true;
        }

        private void block() {
            if (inResize != null) {
                inResize.countDown();
                try {
                    release.await(10, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        }
    }

    static ResizableCache slot(ResizeAgent agent, Recording ops, String task, int subtask,
                                       long cacheMb, long wbMb) {
        String old = Thread.currentThread().getName();
        Thread.currentThread().setName(task + " (" + (subtask + 1) + "/2)#0");
        MDC.put("flink-job-id", JOB);
        try {
            ResizableCache cache = new ResizableCache(cacheMb * MIB, 0.1, agent);
            agent.register(cache, cache.getNativeHandle(), cacheMb * MIB, ResizeAgent.ROCKSDB);
            ops.bytes.put(cache.getNativeHandle(), cacheMb * MIB);
            ops.names.put(cache.getNativeHandle(), task + subtask);
            WriteBufferManager wbm = new ResizableWriteBufferManager(wbMb * MIB, cache, agent);
            agent.attach(wbm, wbm.getNativeHandle(), wbMb * MIB, cache);
            ops.bytes.put(wbm.getNativeHandle(), wbMb * MIB);
            ops.names.put(wbm.getNativeHandle(), task + subtask);
            return cache;
        } finally {
            Thread.currentThread().setName(old);
            MDC.remove("flink-job-id");
        }
    }

    private static ResizeAgent.Target target(String task, int subtask, long cacheMb) {
        return new ResizeAgent.Target(JOB, task, subtask, cacheMb * MIB, null);
    }

    @Test
    void slotsAreKeyedByJobTaskAndSubtaskFromFlinksTaskThread() {
        Recording ops = new Recording();
        ResizeAgent agent = new ResizeAgent(ops);
        slot(agent, ops, "counter -> format -> Sink: sink", 1, 80, 16);
        ResizeAgent.SlotView v = agent.slots().get(0);
        assertEquals(JOB, v.jobId());
        assertEquals("counter -> format -> Sink: sink", v.task());
        assertEquals(1, v.subtask());
        assertEquals(2, v.parallelism());
        assertEquals(80 * MIB, v.observedCacheBytes());
        assertEquals(16 * MIB, v.observedWriteBufferBytes());
    }

    /**
     * The shim binds one JNI library, that of the first slot's flavour: a cache of the other
     * flavour (RocksDB's and ForSt's in one TaskManager) is not registered, so no resize can
     * pass its handle to the wrong library.
     */
    @Test
    void aTaskManagerResizesTheFlavourOfItsFirstSlotOnly() {
        Recording ops = new Recording();
        ResizeAgent agent = new ResizeAgent(ops);
        slot(agent, ops, "a", 0, 64, 16);
        ResizeAgent.Flavour other = new ResizeAgent.Flavour() {
            @Override
            public String library() {
                return "libforstjni";
            }

            @Override
            public ResizeAgent.NativeObject newCache(long bytes) {
                throw new AssertionError("not bound: no self-test");
            }

            @Override
            public ResizeAgent.NativeObject newWriteBufferManager(long bytes, ResizeAgent.NativeObject cache) {
                throw new AssertionError("not bound: no self-test");
            }
        };
        try (ResizableCache foreign = new ResizableCache(8 * MIB, 0.1, agent)) {
            agent.register(foreign, foreign.getNativeHandle(), 8 * MIB, other);
            assertEquals(1, agent.slots().size());
            assertEquals(64 * MIB, agent.budgetBytes(), "the other flavour's cache is not in the budget");
        }
        assertEquals(List.of(ResizeAgent.ROCKSDB), ops.bound);
    }

    @Test
    void memoryMovesBetweenSlotsShrinkingFirstAndInsideASlotTheWriteBuffersYieldFirst() throws Exception {
        Recording ops = new Recording();
        ResizeAgent agent = new ResizeAgent(ops);
        slot(agent, ops, "a", 0, 80, 16);
        slot(agent, ops, "b", 0, 80, 16);
        // The grow is listed first; the agent still frees the memory before it takes it.
        agent.resize(List.of(target("b", 0, 120), target("a", 0, 40)));
        assertEquals(List.of("wb a0 8", "cache a0 40", "cache b0 120", "wb b0 24"), ops.calls);
        assertEquals(160 * MIB, agent.budgetBytes(), "Flink's own reservation: 80 + 80 MiB");
    }

    @Test
    void growthBeyondTheBudgetIsRefusedAndChangesNothing() throws Exception {
        Recording ops = new Recording();
        ResizeAgent agent = new ResizeAgent(ops);
        slot(agent, ops, "a", 0, 80, 16);
        slot(agent, ops, "b", 0, 80, 16);
        ResizeAgent.Refused e = assertThrows(ResizeAgent.Refused.class,
                () -> agent.resize(List.of(target("a", 0, 40), target("b", 0, 130))));
        assertTrue(e.getMessage().contains("beyond this TaskManager's budget of " + 160 * MIB), e.getMessage());
        assertEquals(List.of(), ops.calls, "all or nothing: not even the shrink ran");
        // The controller grants unreserved managed memory (or a grown pod): now it fits.
        agent.grantBudget(200 * MIB);
        agent.resize(List.of(target("b", 0, 120)));
        assertEquals(List.of("cache b0 120", "wb b0 24"), ops.calls);
    }

    @Test
    void refusesUnknownSlotsCachesNotAboveTheirWriteBuffersAndFixedWriteBuffers() {
        Recording ops = new Recording();
        ResizeAgent agent = new ResizeAgent(ops);
        slot(agent, ops, "a", 0, 80, 16);
        assertThrows(ResizeAgent.Refused.class, () -> agent.resize(List.of(target("zzz", 0, 40))));
        assertThrows(ResizeAgent.Refused.class, () -> agent.resize(List.of(target("a", 1, 40))));
        assertThrows(ResizeAgent.Refused.class, () -> agent.resize(List.of(
                new ResizeAgent.Target(JOB, "a", 0, 40 * MIB, 40 * MIB))));
        ops.writeBuffers = false; // 6.20.3: the cache moves, the write buffers stay
        assertThrows(ResizeAgent.Refused.class, () -> agent.resize(List.of(
                new ResizeAgent.Target(JOB, "a", 0, 40 * MIB, 8 * MIB))));
        assertThrows(ResizeAgent.Refused.class, () -> agent.resize(List.of(target("a", 0, 16))),
                "cache must stay above the 16 MiB of write buffers charged to it");
        assertEquals(List.of(), ops.calls);
    }

    @Test
    void aFailedSelfTestDisablesResizingWithItsReason() {
        Recording ops = new Recording();
        ops.bindResult = "self-test: a cache created with 1 B reads 2 B";
        ResizeAgent agent = new ResizeAgent(ops);
        slot(agent, ops, "a", 0, 80, 16);
        ResizeAgent.Refused e = assertThrows(ResizeAgent.Refused.class,
                () -> agent.resize(List.of(target("a", 0, 40))));
        assertEquals("resizing is disabled on this TaskManager: " + ops.bindResult, e.getMessage());
        assertEquals(ops.bindResult, agent.disabledReason());
    }

    /** The use-after-free guard: Flink's close of a slot's cache waits for a resize in flight. */
    @Test
    void closeWaitsForAResizeInFlightAndTheClosedSlotIsGone() throws Exception {
        Recording ops = new Recording();
        ResizeAgent agent = new ResizeAgent(ops);
        Cache cache = slot(agent, ops, "a", 0, 80, 16);
        ops.inResize = new CountDownLatch(1);
        ops.release = new CountDownLatch(1);
        Thread resizer = new Thread(() -> {
            try {
                agent.resize(List.of(target("a", 0, 40)));
            } catch (ResizeAgent.Refused e) {
                throw new AssertionError(e);
            }
        });
        resizer.start();
        assertTrue(ops.inResize.await(10, TimeUnit.SECONDS));
        Thread closer = new Thread(cache::close);
        closer.start();
        while (closer.isAlive() && !agent.waitsForLock(closer)) {
            Thread.onSpinWait();
        }
        assertTrue(agent.waitsForLock(closer), "close must wait for the resize's lock");
        assertTrue(cache.isOwningHandle(), "the native cache is still alive during the resize");
        ops.inResize = null;
        ops.release.countDown();
        resizer.join(10_000);
        closer.join(10_000);
        assertFalse(cache.isOwningHandle());
        assertEquals(List.of(), agent.ids(), "a closed slot leaves the registry");
        assertThrows(ResizeAgent.Refused.class, () -> agent.resize(List.of(target("a", 0, 40))));
    }
}
