package dev.hybridscaler.peer;

import java.time.Clock;
import java.time.Instant;
import java.time.ZoneId;
import java.time.ZoneOffset;

/**
 * The twin's clock (simulator/serve.py, TwinServer.now_ms): equal to the wall clock at the anchor,
 * {@code scale} times faster from then on. Both sides compute it from the same machine clock, so
 * upstream's timestamps agree with the start, restart and sample times the twin reports.
 */
final class ScaledClock extends Clock {
    final long anchorMs;
    final double scale;

    ScaledClock(long anchorMs, double scale) {
        if (!(scale > 0)) {
            throw new IllegalArgumentException("time scale must be > 0, got " + scale);
        }
        this.anchorMs = anchorMs;
        this.scale = scale;
    }

    @Override
    public long millis() {
        return anchorMs + (long) ((System.currentTimeMillis() - anchorMs) * scale);
    }

    @Override
    public Instant instant() {
        return Instant.ofEpochMilli(millis());
    }

    @Override
    public ZoneId getZone() {
        return ZoneOffset.UTC;
    }

    @Override
    public Clock withZone(ZoneId zone) {
        return this; // upstream reads instants only
    }

    /** Sleeps for {@code virtualMs} of this clock's time. */
    void sleep(long virtualMs) throws InterruptedException {
        long wall = (long) Math.ceil(virtualMs / scale);
        if (wall > 0) {
            Thread.sleep(wall);
        }
    }
}
