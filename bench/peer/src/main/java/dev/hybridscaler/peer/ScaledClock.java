package dev.hybridscaler.peer;

import java.time.Clock;
import java.time.Instant;
import java.time.ZoneId;
import java.time.ZoneOffset;

/**
 * The twin's clock (simulator/serve.py, TwinServer.now_ms): equal to the wall clock at the anchor,
 * {@code scale} times faster from then on. Both sides compute it from the same machine clock, so
 * upstream's timestamps agree with the start, restart and sample times the twin reports. Scale 0
 * is the twin's manual clock: time stands where {@link #set} put it (lockstep with the bench).
 */
final class ScaledClock extends Clock {
    final long anchorMs;
    final double scale;
    private volatile long setMs;

    ScaledClock(long anchorMs, double scale) {
        if (!(scale >= 0)) {
            throw new IllegalArgumentException("time scale must be >= 0, got " + scale);
        }
        this.anchorMs = anchorMs;
        this.scale = scale;
        this.setMs = anchorMs;
    }

    void set(long epochMs) {
        if (scale != 0) {
            throw new IllegalStateException("only a manual clock (scale 0) is set");
        }
        setMs = epochMs;
    }

    @Override
    public long millis() {
        if (scale == 0) {
            return setMs;
        }
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
