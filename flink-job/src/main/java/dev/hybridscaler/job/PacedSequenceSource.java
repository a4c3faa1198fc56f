package dev.hybridscaler.job;

import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.SourceReader;
import org.apache.flink.api.connector.source.SourceReaderContext;
import org.apache.flink.api.connector.source.lib.NumberSequenceSource.NumberSequenceSplit;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiter;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.TimeUnit;

/**
 * Flink's generator source of 0, 1, 2, ... paced like a message queue that receives {@code rate}
 * records/s: records the job does not take in time wait as a backlog, reported as the source's
 * {@code pendingRecords} (FLIP-33), which is how the controller learns the rate the job should
 * sustain. The backlog is capped at {@code maxLagS} seconds of arrivals (as if the producers were
 * throttled beyond that), so a long slow phase does not leave an unbounded catch-up.
 */
final class PacedSequenceSource extends DataGeneratorSource<Long> {
    private static final long serialVersionUID = 1L;
    private final Pacing pacing;

    PacedSequenceSource(double rate, double maxLagS) {
        this(new Pacing(rate, maxLagS));
    }

    private PacedSequenceSource(Pacing pacing) {
        super(index -> index, Long.MAX_VALUE, pacing, Types.LONG);
        this.pacing = pacing;
    }

    @Override
    public SourceReader<Long, NumberSequenceSplit> createReader(SourceReaderContext context)
            throws Exception {
        SourceReader<Long, NumberSequenceSplit> reader = super.createReader(context);
        Pacing own = pacing;  // the same instance super.createReader asked for a limiter
        context.metricGroup().setPendingRecordsGauge(() -> own.limiter == null ? 0L : own.limiter.pending());
        return reader;
    }

    static final class Pacing implements RateLimiterStrategy {
        private static final long serialVersionUID = 1L;
        final double rate;
        final double maxLagS;
        transient volatile Arrivals limiter;

        Pacing(double rate, double maxLagS) {
            if (!(rate > 0) || !(maxLagS >= 0)) {
                throw new IllegalArgumentException(
                        "rate must be > 0 and max lag >= 0, got " + rate + ", " + maxLagS);
            }
            this.rate = rate;
            this.maxLagS = maxLagS;
        }

        @Override
        public RateLimiter createRateLimiter(int parallelism) {
            limiter = new Arrivals(rate / parallelism, maxLagS, System.nanoTime());
            return limiter;
        }
    }

    /** Record n (counted from this reader's start) arrives at start + n / rate. */
    static final class Arrivals implements RateLimiter {
        private static final CompletionStage<Void> NOW = CompletableFuture.completedFuture(null);
        private final double nanosPerRecord;
        private final long maxLagNanos;
        private long startNanos;
        private volatile long taken;

        Arrivals(double rate, double maxLagS, long startNanos) {
            this.nanosPerRecord = 1e9 / rate;
            this.maxLagNanos = (long) (maxLagS * 1e9);
            this.startNanos = startNanos;
        }

        @Override
        public CompletionStage<Void> acquire() {
            return acquireAt(System.nanoTime());
        }

        /** Flink 2.x's form (the reader asks for several records at once); not in 1.20. */
        public CompletionStage<Void> acquire(int records) {
            long now = System.nanoTime();
            CompletionStage<Void> last = NOW;
            for (int i = 0; i < records; i++) {
                last = acquireAt(now);  // arrivals only grow: the last one is due last
            }
            return last;
        }

        CompletionStage<Void> acquireAt(long now) {
            long due = startNanos + (long) (taken * nanosPerRecord);
            if (now - due > maxLagNanos) {
                startNanos += now - due - maxLagNanos;  // older arrivals were never produced
                due = now - maxLagNanos;
            }
            taken++;
            long wait = due - now;
            if (wait <= 1_000_000) {
                return NOW;
            }
            return CompletableFuture.runAsync(
                    () -> {}, CompletableFuture.delayedExecutor(wait, TimeUnit.NANOSECONDS));
        }

        /** Records arrived and not yet taken. */
        long pending() {
            return pendingAt(System.nanoTime());
        }

        long pendingAt(long now) {
            long arrived = (long) ((now - startNanos) / nanosPerRecord);
            return Math.max(0, Math.min(arrived - taken, (long) (maxLagNanos / nanosPerRecord)));
        }
    }
}
