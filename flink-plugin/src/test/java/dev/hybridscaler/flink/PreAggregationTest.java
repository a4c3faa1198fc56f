package dev.hybridscaler.flink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.JobStatus;
import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.jobgraph.SavepointRestoreSettings;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * {@link PreAggregation} on a real MiniCluster with RocksDB: a hot-key count, stopped with a
 * savepoint while the buffer holds records and restored from it, ends with every key's exact
 * count; and the keyed operator sees far fewer records than the source produced.
 */
class PreAggregationTest {
    private static final Duration TIMEOUT = Duration.ofSeconds(120);
    private static final long RECORDS = 40_000;
    private static final int KEYS = 50;
    /** Per key: the highest running count the keyed sum emitted (its last). */
    static final Map<Long, Long> COUNTS = new ConcurrentHashMap<>();
    static final AtomicLong PRODUCED = new AtomicLong();
    static final AtomicLong REDUCED = new AtomicLong();
    private static FlinkCluster flink;

    @BeforeAll
    static void start() throws Exception {
        flink = new FlinkCluster(256, 4);
    }

    @AfterAll
    static void stop() throws Exception {
        flink.close();
    }

    /** Key of record i: a third of all records go to key 0, the rest round-robin. */
    static long key(long i) {
        return i % 3 == 0 ? 0 : i % KEYS;
    }

    @Test
    void exactAcrossStopWithSavepointAndRestore(@TempDir Path dir) throws Exception {
        reset();
        // Flushed only by barriers and the end of input: whatever is buffered at the savepoint
        // must reach the keyed state before it, or the final counts fall short.
        JobID first = submit(1_000_000, Duration.ofHours(1), null);
        FlinkCluster.await("a third of the records produced", TIMEOUT,
                () -> PRODUCED.get() > RECORDS / 3);
        String savepoint = flink.mini()
                .stopWithSavepoint(first, dir.toUri().toString(), false,
                        SavepointFormatType.CANONICAL)
                .get(60, TimeUnit.SECONDS);
        long before = PRODUCED.get();
        assertTrue(before < RECORDS, "stopped before the end: " + before);

        JobID second = submit(1_000_000, Duration.ofHours(1), savepoint);
        awaitFinished(second);
        assertExactCounts();
        // Two runs, each folding its records per key: a handful of partials per key.
        assertTrue(REDUCED.get() <= 4L * KEYS, "partials reduced: " + REDUCED.get());
    }

    @Test
    void sizeFlushesKeepCountsExact() throws Exception {
        reset();
        awaitFinished(submit(500, Duration.ofHours(1), null));
        assertExactCounts();
        // A flush every 500 records, each with at most one partial per key.
        long flushes = RECORDS / 500;
        assertTrue(REDUCED.get() <= flushes * KEYS, "partials reduced: " + REDUCED.get());
        assertTrue(REDUCED.get() >= flushes - 1, "partials reduced: " + REDUCED.get());
    }

    @Test
    void timeFlushesKeepCountsExact() throws Exception {
        reset();
        // The job runs for seconds (the throttle): 20 ms timers flush it many times over.
        awaitFinished(submit(1_000_000, Duration.ofMillis(20), null));
        assertExactCounts();
        assertTrue(REDUCED.get() > 0, "no flush before the end of input");
    }

    @Test
    void refusesBadLimits() {
        assertThrows(IllegalArgumentException.class, () -> new PreAggregation.Operator<Long, Long>(
                k -> k, Long::sum, 0, Duration.ofMillis(1)));
        assertThrows(IllegalArgumentException.class, () -> new PreAggregation.Operator<Long, Long>(
                k -> k, Long::sum, 1, Duration.ZERO));
    }

    private static void reset() {
        COUNTS.clear();
        PRODUCED.set(0);
        REDUCED.set(0);
    }

    private static void assertExactCounts() {
        Map<Long, Long> expected = new java.util.HashMap<>();
        for (long i = 0; i < RECORDS; i++) {
            expected.merge(key(i), 1L, Long::sum);
        }
        assertEquals(expected, Map.copyOf(COUNTS));
    }

    private static void awaitFinished(JobID job) throws InterruptedException {
        FlinkCluster.await("job " + job + " finished", TIMEOUT, () -> {
            try {
                return flink.mini().getJobStatus(job).get() == JobStatus.FINISHED;
            } catch (Exception e) {
                return false;
            }
        });
    }

    private static JobID submit(int maxRecords, Duration maxDelay, String savepoint)
            throws Exception {
        StreamExecutionEnvironment env = new StreamExecutionEnvironment(new Configuration());
        env.setParallelism(1);
        DataStream<Tuple2<Long, Long>> ones = env.fromSequence(0, RECORDS - 1).uid("gen")
                .map(new Throttle()).uid("ones");
        PreAggregation.of(ones, t -> t.f0, (a, b) -> Tuple2.of(a.f0, a.f1 + b.f1),
                        maxRecords, maxDelay).uid("pre-aggregate")
                .keyBy(t -> t.f0, Types.LONG)
                .reduce((a, b) -> {
                    REDUCED.incrementAndGet();
                    return Tuple2.of(a.f0, a.f1 + b.f1);
                }).uid("count").setParallelism(2)
                .map(t -> {
                    COUNTS.merge(t.f0, t.f1, Math::max);
                    return t.f1;
                }).returns(Types.LONG).uid("record").setParallelism(2)
                .sinkTo(new DiscardingSink<>()).uid("sink").setParallelism(2);
        JobGraph graph = env.getStreamGraph().getJobGraph();
        if (savepoint != null) {
            graph.setSavepointRestoreSettings(SavepointRestoreSettings.forPath(savepoint, false));
        }
        return flink.mini().submitJob(graph).get(30, TimeUnit.SECONDS).getJobID();
    }

    /** About 5,000 records/s, so a savepoint lands mid-stream. */
    static final class Throttle implements MapFunction<Long, Tuple2<Long, Long>> {
        @Override
        public Tuple2<Long, Long> map(Long i) throws Exception {
            if (i % 5 == 0) {
                Thread.sleep(1);
            }
            PRODUCED.incrementAndGet();
            return Tuple2.of(key(i), 1L);
        }
    }
}
