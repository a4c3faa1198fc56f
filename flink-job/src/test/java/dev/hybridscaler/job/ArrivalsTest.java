package dev.hybridscaler.job;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class ArrivalsTest {
    private static final long S = 1_000_000_000L;

    @Test
    void pacesAtTheRateAndReportsTheBacklog() {
        PacedSequenceSource.Arrivals a = new PacedSequenceSource.Arrivals(100, 10, 0);
        // Record 0 is due at once; record 1 is due 10 ms later, so taking it at 0 waits.
        assertTrue(a.acquireAt(0).toCompletableFuture().isDone());
        assertFalse(a.acquireAt(0).toCompletableFuture().isDone());
        // 3 s later 300 records arrived, 2 were taken.
        assertEquals(298, a.pendingAt(3 * S));
    }

    @Test
    void theBacklogIsCappedAtMaxLag() {
        PacedSequenceSource.Arrivals a = new PacedSequenceSource.Arrivals(100, 10, 0);
        assertEquals(1000, a.pendingAt(60 * S));  // 6000 arrived, at most 10 s of them wait
        a.acquireAt(60 * S);  // the producer was throttled: the schedule moves up
        assertEquals(999, a.pendingAt(60 * S));
        assertEquals(1000, a.pendingAt(61 * S));  // still capped
    }

    @Test
    void refusesANonPositiveRate() {
        assertThrows(IllegalArgumentException.class, () -> new PacedSequenceSource.Pacing(0, 1));
    }
}
