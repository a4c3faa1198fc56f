package dev.hybridscaler.flink.resize;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.rocksdb.BlockBasedTableConfig;
import org.rocksdb.LRUCache;
import org.rocksdb.Options;
import org.rocksdb.RocksDB;
import org.rocksdb.WriteBufferManager;

import java.lang.reflect.Method;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Random;

/**
 * The shim against the RocksDB JNI library of the Flink version under test (frocksdbjni 6.20.3 on
 * 1.20, 8.10.0 on 2.x), no Flink involved: it binds, passes the self-test, and resizes a cache a
 * live RocksDB reads through.
 */
class NativeResizeTest {
    private static final long MIB = 1024 * 1024;

    @BeforeAll
    static void bind() {
        RocksDB.loadLibrary(); // as Flink does before it creates a slot's cache
        assertNull(new ResizeAgent.NativeOps().bind(ResizeAgent.ROCKSDB), "the shim binds and passes its self-test");
        assertTrue(NativeResize.library().contains("librocksdbjni"), NativeResize.library());
    }

    @Test
    void writeBuffersAreResizableExactlyWhereTheCApiHasIt() {
        // rocksdb_write_buffer_manager_set_buffer_size came after 6.20.3 (Flink 1.20).
        boolean expected = RocksDB.rocksdbVersion().getMajor() >= 7;
        assertEquals(expected, NativeResize.canResizeWriteBuffers(), RocksDB.rocksdbVersion().toString());
        if (expected) {
            try (LRUCache cache = new LRUCache(16 * MIB);
                 WriteBufferManager wbm = new WriteBufferManager(4 * MIB, cache)) {
                assertEquals(4 * MIB, NativeResize.writeBufferSize(wbm.getNativeHandle()));
                assertTrue(NativeResize.setWriteBufferSize(wbm.getNativeHandle(), 2 * MIB));
                assertEquals(2 * MIB, NativeResize.writeBufferSize(wbm.getNativeHandle()));
            }
        }
    }

    /**
     * A copy of the agent in a job's classloader (Flink's user-code classloader is child-first)
     * refuses to load the shim and says how to install it instead.
     */
    @Test
    void refusesToLoadTheShimFromAJobsClassLoader() throws Exception {
        URL classes = NativeResize.class.getProtectionDomain().getCodeSource().getLocation();
        try (URLClassLoader job = new URLClassLoader(new URL[] {classes},
                ClassLoader.getPlatformClassLoader())) {
            Class<?> copy = job.loadClass(NativeResize.class.getName());
            assertNotSame(NativeResize.class, copy);
            Method load = copy.getDeclaredMethod("load");
            load.setAccessible(true);
            String why = (String) load.invoke(null);
            assertNotNull(why, "loaded from a job's classloader");
            assertTrue(why.contains("lib/")
                    && why.contains("classloader.parent-first-patterns.additional"), why);
        }
    }

    /**
     * The shim binds one JNI library per JVM: asked again for the same flavour it stays bound,
     * asked for the other (ForSt's, whose handles RocksDB's functions must never see) it refuses
     * and keeps the binding it has.
     */
    @Test
    void theBoundLibraryIsKeptAndAnotherFlavoursIsRefused() {
        String bound = NativeResize.library();
        assertNull(NativeResize.bind("librocksdbjni"));
        assertEquals("the shim is bound to " + bound + " already, not to a libforstjni* library",
                NativeResize.bind("libforstjni"));
        assertEquals("the JNI library's name is empty or too long", NativeResize.bind(""));
        assertEquals(bound, NativeResize.library());
    }

    /** The layout check reads through the kernel: a wrong handle is refused, not a crash. */
    @Test
    void handlesOfAnotherKindAreRefusedWithoutCrashing() {
        assertNotNull(NativeResize.verifyCacheHandle(8), "an unmapped address");
        try (LRUCache cache = new LRUCache(MIB);
             WriteBufferManager wbm = new WriteBufferManager(MIB / 2, cache)) {
            assertNotNull(NativeResize.verifyCacheHandle(wbm.getNativeHandle()), "not a cache");
            assertNotNull(NativeResize.verifyCacheHandle(cache.getNativeHandle() + 8), "a shifted handle");
            assertNull(NativeResize.verifyCacheHandle(cache.getNativeHandle()));
        }
    }

    /** A live database's reads fill the cache; shrinking it evicts down to the new capacity. */
    @Test
    void shrinkingTheCacheOfALiveDatabaseEvictsAndGrowingLetsItFillAgain(@TempDir Path dir)
            throws Exception {
        try (LRUCache cache = new LRUCache(32 * MIB);
             Options options = new Options().setCreateIfMissing(true)
                     .setTableFormatConfig(new BlockBasedTableConfig().setBlockCache(cache));
             RocksDB db = RocksDB.open(options, dir.toString())) {
            long h = cache.getNativeHandle();
            assertEquals(32 * MIB, NativeResize.cacheCapacity(h), "RocksJava's capacity, read by the shim");
            Random random = new Random(1);
            byte[] value = new byte[1000];
            for (int i = 0; i < 40_000; i++) {
                random.nextBytes(value); // incompressible
                db.put(key(i), value);
            }
            db.flush(new org.rocksdb.FlushOptions().setWaitForFlush(true));
            readAll(db);
            long full = cache.getUsage();
            assertTrue(full > 16 * MIB, "reads filled the cache: " + full);

            assertTrue(NativeResize.setCacheCapacity(h, 4 * MIB));
            assertEquals(4 * MIB, NativeResize.cacheCapacity(h));
            assertTrue(cache.getUsage() <= 4 * MIB + MIB, "evicted to the new capacity: " + cache.getUsage());
            readAll(db); // still serves every key
            assertTrue(cache.getUsage() <= 4 * MIB + MIB, "stays within it: " + cache.getUsage());

            assertTrue(NativeResize.setCacheCapacity(h, 64 * MIB));
            readAll(db);
            assertTrue(cache.getUsage() > 16 * MIB, "fills again after growing: " + cache.getUsage());
        }
    }

    /** Resizing allocates nothing: many cycles leave the process's resident memory where it was. */
    @Test
    void twoHundredThousandResizesDoNotGrowResidentMemory() throws Exception {
        try (LRUCache cache = new LRUCache(8 * MIB)) {
            long h = cache.getNativeHandle();
            cycle(h, 10_000); // warm up the JIT
            long before = rssBytes();
            cycle(h, 200_000);
            long after = rssBytes();
            assertTrue(after - before < 8 * MIB, "RSS " + before + " -> " + after);
            assertEquals(8 * MIB, NativeResize.cacheCapacity(h));
        }
    }

    private static void cycle(long h, int n) {
        for (int i = 0; i < n; i++) {
            NativeResize.setCacheCapacity(h, (i % 2 == 0 ? 4 : 8) * MIB);
        }
        NativeResize.setCacheCapacity(h, 8 * MIB);
    }

    /** VmRSS of this JVM, from the kernel. */
    static long rssBytes() throws Exception {
        for (String line : Files.readAllLines(Path.of("/proc/self/status"))) {
            if (line.startsWith("VmRSS:")) {
                return Long.parseLong(line.replaceAll("[^0-9]", "")) * 1024;
            }
        }
        throw new IllegalStateException("no VmRSS in /proc/self/status");
    }

    private static void readAll(RocksDB db) throws Exception {
        for (int i = 0; i < 40_000; i++) {
            if (db.get(key(i)) == null) {
                throw new AssertionError("key " + i + " lost");
            }
        }
    }

    private static byte[] key(int i) {
        return String.format("key-%08d", i).getBytes(StandardCharsets.UTF_8);
    }
}
