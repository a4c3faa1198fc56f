package dev.hybridscaler.flink;

import org.apache.flink.api.common.functions.MapFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.state.v2.ValueState;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.Collector;

import java.util.concurrent.ThreadLocalRandom;

/**
 * The Flink 2.x test job on ForSt: a throttled sequence (p=1) keyed into two counters that keep a
 * blob per key, one with the asynchronous State V2 API ({@code enableAsyncState()}, what ForSt
 * is built for) and one with the classic synchronous API, so one scrape shows both. Keys cycle
 * over {@link #KEYS}, so the state ({@code KEYS x BLOB} bytes a counter) outgrows a small block
 * cache and misses reach the "remote" primary directory.
 */
final class ForStJob {
    static final String SOURCE = "gen";
    static final String ASYNC = "async-counter";
    static final String SYNC = "sync-counter";
    static final String ASYNC_STATE = "blob-async";
    static final String SYNC_STATE = "blob-sync";
    static final int KEYS = 20_000;
    static final int BLOB = 1024;
    static final TypeInformation<byte[]> BLOB_TYPE = PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO;

    private ForStJob() {}

    static void build(StreamExecutionEnvironment env, int recordsPerMs) {
        env.setParallelism(2);
        DataStream<Long> keys = env.fromSequence(0, Long.MAX_VALUE).uid(SOURCE).name(SOURCE)
                .setParallelism(1)
                .map(new Throttle(recordsPerMs)).uid("key-map").name("key-map").setParallelism(1);
        keys.keyBy(k -> k).enableAsyncState()
                .process(new AsyncBlobCounter()).uid(ASYNC).name(ASYNC)
                .sinkTo(new DiscardingSink<>()).uid("async-sink").name("async-sink");
        keys.keyBy(k -> k)
                .process(new SyncBlobCounter()).uid(SYNC).name(SYNC)
                .sinkTo(new DiscardingSink<>()).uid("sync-sink").name("sync-sink");
    }

    /** About {@code recordsPerMs} thousand records a second, so the job leaves CPU for the test. */
    static final class Throttle implements MapFunction<Long, Long> {
        private final int recordsPerMs;

        Throttle(int recordsPerMs) {
            this.recordsPerMs = recordsPerMs;
        }

        @Override
        public Long map(Long i) throws Exception {
            if (i % recordsPerMs == 0) {
                Thread.sleep(1);
            }
            // A multiplicative hash spreads consecutive records over the key space.
            return (long) Math.floorMod(i * 0x9E3779B97F4A7C15L, KEYS);
        }
    }

    /** A fresh random blob: incompressible, so the state on disk is what {@link #KEYS} says. */
    static byte[] next(byte[] before) {
        byte[] blob = new byte[BLOB];
        ThreadLocalRandom.current().nextBytes(blob);
        return blob;
    }

    /** Read-modify-write of the key's blob through State V2 futures (asynchronous access). */
    static final class AsyncBlobCounter extends KeyedProcessFunction<Long, Long, Long> {
        private transient ValueState<byte[]> blob;

        @Override
        public void open(OpenContext context) {
            blob = getRuntimeContext().getState(
                    new org.apache.flink.api.common.state.v2.ValueStateDescriptor<>(
                            ASYNC_STATE, BLOB_TYPE));
        }

        @Override
        public void processElement(Long key, Context ctx, Collector<Long> out) {
            blob.asyncValue().thenCompose(v -> blob.asyncUpdate(next(v)))
                    .thenAccept(done -> out.collect(key));
        }
    }

    /** The same with the synchronous API, which ForSt also serves. */
    static final class SyncBlobCounter extends KeyedProcessFunction<Long, Long, Long> {
        private transient org.apache.flink.api.common.state.ValueState<byte[]> blob;

        @Override
        public void open(OpenContext context) {
            blob = getRuntimeContext().getState(
                    new ValueStateDescriptor<>(SYNC_STATE, BLOB_TYPE));
        }

        @Override
        public void processElement(Long key, Context ctx, Collector<Long> out) throws Exception {
            blob.update(next(blob.value()));
            out.collect(key);
        }
    }
}
