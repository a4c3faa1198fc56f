package dev.hybridscaler.flink.resize;

import org.rocksdb.LRUCache;
import org.rocksdb.WriteBufferManager;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.slf4j.MDC;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.locks.ReentrantLock;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The TaskManager-side registry of every RocksDB (or ForSt) block cache and write-buffer manager
 * Flink creates for a slot (through {@link ResizableRocksDBStateBackendFactory}, or on Flink 2.x
 * {@code ResizableForStStateBackendFactory}), and the one place that resizes them. One per
 * TaskManager JVM; it binds to the JNI library of the first slot's flavour.
 *
 * <p>Safety rules (docs/flink-plugin.md, "Resizing in place"):
 *
 * <ul>
 *   <li>Close and resize take the same lock, so a resize never touches a freed handle.
 *   <li>Within a slot, shrink the write buffers before the cache and grow the cache before the
 *       write buffers, so the memtables charged to the cache always fit in it. Across slots, all
 *       shrinks before all grows.
 *   <li>The sum of the caches' capacities never exceeds the TaskManager's budget: Flink's own
 *       reservation (the sum of the capacities it created) unless the controller granted more.
 *   <li>A start-up self-test sets and reads back a capacity through the shim; on a mismatch
 *       resizing stays disabled and says why.
 * </ul>
 */
public final class ResizeAgent {
    private static final Logger LOG = LoggerFactory.getLogger(ResizeAgent.class);
    private static final ResizeAgent INSTANCE = new ResizeAgent(new NativeOps());
    /** Flink's task thread name: {@code <vertex name> (<subtask>/<parallelism>)#<attempt>}. */
    private static final Pattern TASK_THREAD = Pattern.compile("^(.*) \\((\\d+)/(\\d+)\\)#(\\d+)$");
    private static final long MIB = 1024 * 1024;
    /** The shim binds to the JNI library Flink loads with the first slot's RocksDB (or ForSt). */
    static final String NOT_YET = "no RocksDB or ForSt slot has been created on this TaskManager yet";

    /**
     * Whose RocksJava a slot's objects are: RocksDB's ({@code org.rocksdb}, librocksdbjni) or
     * ForSt's ({@code org.forstdb}, libforstjni, Flink 2.x). Both export the same C API; the shim
     * binds the one library of the TaskManager's flavour and self-tests on that flavour's objects.
     */
    interface Flavour {
        /** The file-name prefix of its JNI library, as the shim looks it up among loaded objects. */
        String library();

        /** A scratch LRU cache of this flavour, for the self-test. */
        NativeObject newCache(long bytes);

        /** A scratch write-buffer manager charged to a scratch cache of this flavour. */
        NativeObject newWriteBufferManager(long bytes, NativeObject cache);
    }

    /** A RocksJava object and its native handle. */
    interface NativeObject extends AutoCloseable {
        long handle();

        @Override
        void close();
    }

    /** RocksDB's RocksJava (Flink 1.20 and 2.x's EmbeddedRocksDBStateBackend). */
    static final Flavour ROCKSDB = new Flavour() {
        @Override
        public String library() {
            return "librocksdbjni";
        }

        @Override
        public NativeObject newCache(long bytes) {
            LRUCache cache = new LRUCache(bytes);
            return new Scratch(cache, cache.getNativeHandle(), cache::close);
        }

        @Override
        public NativeObject newWriteBufferManager(long bytes, NativeObject cache) {
            WriteBufferManager wbm = new WriteBufferManager(bytes, (LRUCache) ((Scratch) cache).object());
            return new Scratch(wbm, wbm.getNativeHandle(), wbm::close);
        }

        @Override
        public String toString() {
            return "RocksDB";
        }
    };

    /** A flavour's scratch object for the self-test. */
    record Scratch(Object object, long handle, Runnable closer) implements NativeObject {
        @Override
        public void close() {
            closer.run();
        }
    }

    /** The native calls, a port so the ordering and budget rules can be unit-tested. */
    interface Ops {
        /** Null when resizing works for this flavour's library, else why not (binding and self-test). */
        String bind(Flavour flavour);

        String library();

        boolean canResizeWriteBuffers();

        long cacheCapacity(long handle);

        boolean setCacheCapacity(long handle, long bytes);

        long writeBufferSize(long handle);

        boolean setWriteBufferSize(long handle, long bytes);
    }

    private final ReentrantLock lock = new ReentrantLock();
    private final Ops ops;
    private final Map<Long, Slot> slots = new LinkedHashMap<>();
    private long nextId = 1;
    private boolean bound;
    private Flavour flavour;
    private String disabled;
    private Long grantedBudget;
    private long resizes;

    ResizeAgent(Ops ops) {
        this.ops = ops;
    }

    /** The TaskManager's agent. */
    public static ResizeAgent get() {
        return INSTANCE;
    }

    /** One slot's RocksDB memory: the cache and write-buffer manager of its shared resources. */
    static final class Slot {
        final long id;
        final String jobId;
        final String task;
        final int subtask;
        final int parallelism;
        final int attempt;
        /** The RocksJava cache object (its close is what removes the slot) and its handle. */
        final Object cache;
        final long cacheHandle;
        final long initialCache;
        Object writeBuffers;
        long writeBufferHandle;
        long writeBufferBytes;
        long cacheBytes;

        Slot(long id, String jobId, String task, int subtask, int parallelism, int attempt,
             Object cache, long cacheHandle, long capacity) {
            this.id = id;
            this.jobId = jobId;
            this.task = task;
            this.subtask = subtask;
            this.parallelism = parallelism;
            this.attempt = attempt;
            this.cache = cache;
            this.cacheHandle = cacheHandle;
            this.initialCache = capacity;
            this.cacheBytes = capacity;
        }
    }

    /** What the controller asks for one slot (or all subtasks of a task when subtask is null). */
    public record Target(String jobId, String task, Integer subtask, long cacheBytes,
                         Long writeBufferBytes) {}

    /** What a slot holds: expected from the agent's bookkeeping, observed through the shim. */
    public record SlotView(long id, String jobId, String task, int subtask, int parallelism,
                           int attempt, long cacheBytes, long observedCacheBytes,
                           long writeBufferBytes, long observedWriteBufferBytes) {}

    /** A refused request: nothing was changed. */
    public static final class Refused extends Exception {
        Refused(String message) {
            super(message);
        }
    }

    // ---- registration, from the memory factory on Flink's task thread ----

    /**
     * A slot's cache (RocksJava object of the given flavour, and its native handle), from the
     * memory factory. A TaskManager resizes one flavour, that of its first slot: a slot of the
     * other is not registered (it keeps its size; a memory step for it restarts).
     */
    void register(Object cache, long handle, long capacity, Flavour of) {
        lock.lock();
        try {
            if (flavour != null && flavour != of) {
                LOG.warn("hybridscaler resize: a {} cache is not registered: this TaskManager resizes {}",
                        of, flavour);
                return;
            }
            String name = Thread.currentThread().getName();
            Matcher m = TASK_THREAD.matcher(name);
            String job = MDC.get("flink-job-id");
            Slot s = m.matches()
                    ? new Slot(nextId++, job, m.group(1), Integer.parseInt(m.group(2)) - 1,
                            Integer.parseInt(m.group(3)), Integer.parseInt(m.group(4)), cache, handle, capacity)
                    : new Slot(nextId++, job, name, -1, 0, 0, cache, handle, capacity);
            slots.put(s.id, s);
            ensureBound(of); // the flavour's JNI library is loaded now: the cache above needed it
            LOG.info("hybridscaler resize: slot {} registered: job {}, task '{}', subtask {}, cache {} B",
                    s.id, s.jobId, s.task, s.subtask, capacity);
        } finally {
            lock.unlock();
        }
    }

    /** A slot's write-buffer manager (and its handle), charged to a registered cache. */
    void attach(Object wbm, long handle, long bytes, Object cache) {
        lock.lock();
        try {
            for (Slot s : slots.values()) {
                if (s.cache == cache) {
                    s.writeBuffers = wbm;
                    s.writeBufferHandle = handle;
                    s.writeBufferBytes = bytes;
                }
            }
        } finally {
            lock.unlock();
        }
    }

    /** RocksJava's close of a registered object, under the resize lock. */
    void close(Object closing, Runnable close) {
        lock.lock();
        try {
            slots.values().removeIf(s -> s.cache == closing);
            for (Slot s : slots.values()) {
                if (s.writeBuffers == closing) {
                    s.writeBuffers = null;
                }
            }
            close.run();
        } finally {
            lock.unlock();
        }
    }

    // ---- the controller's operations ----

    /** Why resizing is disabled, or null when it works. */
    public String disabledReason() {
        lock.lock();
        try {
            return bound ? disabled : NOT_YET;
        } finally {
            lock.unlock();
        }
    }

    /** The budget: granted by the controller, else the sum of the capacities Flink created. */
    public long budgetBytes() {
        lock.lock();
        try {
            if (grantedBudget != null) {
                return grantedBudget;
            }
            long sum = 0;
            for (Slot s : slots.values()) {
                sum += s.initialCache;
            }
            return sum;
        } finally {
            lock.unlock();
        }
    }

    /** Null to return to Flink's own reservation. */
    public void grantBudget(Long bytes) throws Refused {
        if (bytes != null && bytes < 0) {
            throw new Refused("budgetBytes must be >= 0, got " + bytes);
        }
        lock.lock();
        try {
            grantedBudget = bytes;
            LOG.info("hybridscaler resize: budget {}", bytes == null ? "Flink's reservation" : bytes + " B");
        } finally {
            lock.unlock();
        }
    }

    public long resizeCount() {
        lock.lock();
        try {
            return resizes;
        } finally {
            lock.unlock();
        }
    }

    public List<SlotView> slots() {
        lock.lock();
        try {
            List<SlotView> out = new ArrayList<>();
            for (Slot s : slots.values()) {
                out.add(view(s));
            }
            return out;
        } finally {
            lock.unlock();
        }
    }

    private SlotView view(Slot s) {
        boolean on = bound && disabled == null;
        long cache = on ? ops.cacheCapacity(s.cacheHandle) : -1;
        long wb = on && s.writeBuffers != null && ops.canResizeWriteBuffers()
                ? ops.writeBufferSize(s.writeBufferHandle) : -1;
        return new SlotView(s.id, s.jobId, s.task, s.subtask, s.parallelism, s.attempt,
                s.cacheBytes, cache, s.writeBufferBytes, wb);
    }

    /**
     * Applies all targets or none: every target must match a live slot, stay within the budget and
     * keep the cache larger than the write buffers charged to it. Returns the slots as observed
     * after the change.
     */
    public List<SlotView> resize(List<Target> targets) throws Refused {
        lock.lock();
        try {
            if (disabledReason() != null) {
                throw new Refused("resizing is disabled on this TaskManager: " + disabledReason());
            }
            Map<Slot, long[]> plan = plan(targets);
            // Memory moves between slots: free it everywhere before taking it anywhere.
            List<Map.Entry<Slot, long[]>> order = new ArrayList<>(plan.entrySet());
            order.sort((a, b) -> Boolean.compare(grows(a), grows(b)));
            List<SlotView> out = new ArrayList<>();
            for (Map.Entry<Slot, long[]> e : order) {
                apply(e.getKey(), e.getValue()[0], e.getValue()[1]);
                out.add(view(e.getKey()));
            }
            resizes++;
            return out;
        } finally {
            lock.unlock();
        }
    }

    private static boolean grows(Map.Entry<Slot, long[]> e) {
        return e.getValue()[0] > e.getKey().cacheBytes;
    }

    private Map<Slot, long[]> plan(List<Target> targets) throws Refused {
        if (targets == null || targets.isEmpty()) {
            throw new Refused("no targets");
        }
        Map<Slot, long[]> plan = new LinkedHashMap<>();
        for (Target t : targets) {
            if (t.jobId() == null || t.task() == null) {
                throw new Refused("a target needs jobId and task");
            }
            if (t.cacheBytes() < MIB) {
                throw new Refused("cacheBytes must be >= 1 MiB, got " + t.cacheBytes());
            }
            if (t.writeBufferBytes() != null && !ops.canResizeWriteBuffers()) {
                throw new Refused("this RocksDB (" + ops.library()
                        + ") cannot resize write buffers; omit writeBufferBytes");
            }
            boolean matched = false;
            for (Slot s : slots.values()) {
                if (t.jobId().equals(s.jobId) && t.task().equals(s.task)
                        && (t.subtask() == null || t.subtask() == s.subtask)) {
                    matched = true;
                    long wb = writeBuffersFor(s, t);
                    if (wb >= t.cacheBytes()) {
                        throw new Refused("slot " + s.id + ": cacheBytes " + t.cacheBytes()
                                + " must exceed the write buffers charged to it, " + wb);
                    }
                    if (plan.put(s, new long[] {t.cacheBytes(), wb}) != null) {
                        throw new Refused("slot " + s.id + " is named by two targets");
                    }
                }
            }
            if (!matched) {
                throw new Refused("no live slot of job " + t.jobId() + ", task '" + t.task() + "'"
                        + (t.subtask() == null ? "" : ", subtask " + t.subtask()) + " on this TaskManager");
            }
        }
        long total = 0;
        for (Slot s : slots.values()) {
            total += plan.containsKey(s) ? plan.get(s)[0] : s.cacheBytes;
        }
        long budget = budgetBytes();
        if (total > budget) {
            throw new Refused("the caches would hold " + total + " B, beyond this TaskManager's budget of "
                    + budget + " B");
        }
        return plan;
    }

    /** Flink's ratio of write buffers to cache is kept when the target does not say otherwise. */
    private long writeBuffersFor(Slot s, Target t) {
        if (t.writeBufferBytes() != null) {
            return t.writeBufferBytes();
        }
        if (s.writeBuffers == null || !ops.canResizeWriteBuffers() || s.cacheBytes == 0) {
            return s.writeBufferBytes;
        }
        return Math.round((double) s.writeBufferBytes * t.cacheBytes() / s.cacheBytes);
    }

    private void apply(Slot s, long cache, long writeBuffers) throws Refused {
        boolean resizeWb = s.writeBuffers != null && ops.canResizeWriteBuffers()
                && writeBuffers != s.writeBufferBytes;
        if (cache < s.cacheBytes) {
            if (resizeWb) {
                setWriteBuffers(s, writeBuffers);
            }
            setCache(s, cache);
        } else {
            setCache(s, cache);
            if (resizeWb) {
                setWriteBuffers(s, writeBuffers);
            }
        }
    }

    private void setCache(Slot s, long bytes) throws Refused {
        long h = s.cacheHandle;
        if (!ops.setCacheCapacity(h, bytes) || ops.cacheCapacity(h) != bytes) {
            throw failed("slot " + s.id + ": cache capacity reads " + ops.cacheCapacity(h)
                    + " B after setting " + bytes + " B");
        }
        s.cacheBytes = bytes;
    }

    private void setWriteBuffers(Slot s, long bytes) throws Refused {
        long h = s.writeBufferHandle;
        if (!ops.setWriteBufferSize(h, bytes) || ops.writeBufferSize(h) != bytes) {
            throw failed("slot " + s.id + ": write buffers read " + ops.writeBufferSize(h)
                    + " B after setting " + bytes + " B");
        }
        s.writeBufferBytes = bytes;
    }

    /**
     * A read-back that disagrees after a passing self-test means the library is not what the
     * shim assumes: stop resizing on this TaskManager (the controller falls back to a restart).
     */
    private Refused failed(String why) {
        disabled = "a resize did not read back: " + why;
        LOG.error("hybridscaler resize: in-place resizing DISABLED on this TaskManager: {}", disabled);
        return new Refused(disabled);
    }

    /**
     * Disables resizing on this TaskManager for its life, with the reason every request is then
     * refused with (e.g. the ForSt hook is not what the plugin was built for).
     */
    void disable(String reason) {
        lock.lock();
        try {
            bound = true;
            if (disabled == null) {
                disabled = reason;
                LOG.error("hybridscaler resize: in-place resizing DISABLED on this TaskManager: {}",
                        reason);
            }
        } finally {
            lock.unlock();
        }
    }

    private void ensureBound(Flavour of) {
        if (!bound) {
            bound = true;
            flavour = of;
            disabled = ops.bind(of);
            if (disabled != null) {
                LOG.error("hybridscaler resize: in-place resizing DISABLED on this TaskManager: {}",
                        disabled);
            } else {
                LOG.info("hybridscaler resize: enabled through {} (write buffers {})", ops.library(),
                        ops.canResizeWriteBuffers() ? "resizable" : "fixed: not in this library's C API");
            }
        }
    }

    /** Whether a thread waits for the resize lock, for tests. */
    boolean waitsForLock(Thread t) {
        return lock.hasQueuedThread(t);
    }

    /** The live slots' ids, for tests. */
    List<Long> ids() {
        lock.lock();
        try {
            return Collections.unmodifiableList(new ArrayList<>(slots.keySet()));
        } finally {
            lock.unlock();
        }
    }

    /** The real shim: load, bind, then the self-test on a scratch cache of our own. */
    static final class NativeOps implements Ops {
        @Override
        public String bind(Flavour flavour) {
            String why = NativeResize.load();
            if (why == null) {
                why = NativeResize.bind(flavour.library());
            }
            return why != null ? why : selfTest(flavour);
        }

        /** A capacity RocksJava set, read through the shim, proves the handle layout. */
        private String selfTest(Flavour flavour) {
            long before = 3 * MIB + 4096;
            long after = 5 * MIB + 8192;
            try (NativeObject scratch = flavour.newCache(before)) {
                long h = scratch.handle();
                String layout = NativeResize.verifyCacheHandle(h);
                if (layout != null) {
                    return "self-test: " + layout + " (" + NativeResize.library() + ")";
                }
                long read = NativeResize.cacheCapacity(h);
                if (read != before) {
                    return "self-test: a cache created with " + before + " B reads " + read
                            + " B through the C API of " + NativeResize.library()
                            + "; the handle layout does not match";
                }
                NativeResize.setCacheCapacity(h, after);
                read = NativeResize.cacheCapacity(h);
                if (read != after) {
                    return "self-test: set " + after + " B, read back " + read + " B";
                }
                if (NativeResize.canResizeWriteBuffers()) {
                    try (NativeObject wbm = flavour.newWriteBufferManager(MIB, scratch)) {
                        long wh = wbm.handle();
                        long wb = NativeResize.writeBufferSize(wh);
                        if (wb != MIB) {
                            return "self-test: write buffers created with " + MIB + " B read "
                                    + wb + " B";
                        }
                        NativeResize.setWriteBufferSize(wh, 2 * MIB);
                        wb = NativeResize.writeBufferSize(wh);
                        if (wb != 2 * MIB) {
                            return "self-test: write buffers set to " + 2 * MIB + " B read back "
                                    + wb + " B";
                        }
                    }
                }
                return null;
            }
        }

        @Override
        public String library() {
            return NativeResize.library();
        }

        @Override
        public boolean canResizeWriteBuffers() {
            return NativeResize.canResizeWriteBuffers();
        }

        @Override
        public long cacheCapacity(long handle) {
            return NativeResize.cacheCapacity(handle);
        }

        @Override
        public boolean setCacheCapacity(long handle, long bytes) {
            return NativeResize.setCacheCapacity(handle, bytes);
        }

        @Override
        public long writeBufferSize(long handle) {
            return NativeResize.writeBufferSize(handle);
        }

        @Override
        public boolean setWriteBufferSize(long handle, long bytes) {
            return NativeResize.setWriteBufferSize(handle, bytes);
        }
    }
}
