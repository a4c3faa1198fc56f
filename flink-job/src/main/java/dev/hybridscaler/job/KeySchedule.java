package dev.hybridscaler.job;

import java.io.Serializable;
import java.util.Locale;
import java.util.SplittableRandom;

/**
 * Which key record i updates, and how many times that key was updated before it: the job's keyed
 * counter checks the second against its state, so both must follow from i alone (a restored job
 * resumes at any i).
 *
 * <p>Keys repeat in rounds of {@link #period()} records. {@code uniform}: round-robin, key
 * {@code i mod keys}, every key once a round (the cache's worst case: each read is of the least
 * recently used key). {@code zipf}: within a round, the key of popularity rank r appears
 * {@code max(1, round(c / r^s))} times (exponent s, c chosen so a round has at most
 * {@link #MAX_PERIOD} records; the tail below one occurrence a round is floored at one), in an
 * order and a rank-to-key mapping drawn from the seed. Same settings, same schedule, on every JVM.
 */
final class KeySchedule implements Serializable {
    private static final long serialVersionUID = 1L;
    /** A zipf round's records at most: its tables take 8 bytes a record, shared in a JVM. */
    static final int MAX_PERIOD = 1 << 20;

    enum Distribution { UNIFORM, ZIPF }

    final long keys;
    final Distribution distribution;
    final double exponent;
    final long seed;
    private transient volatile Table table;

    KeySchedule(long keys, Distribution distribution, double exponent, long seed) {
        if (keys < 1) {
            throw new IllegalArgumentException(StateJob.KEYS.key() + " must be >= 1, got " + keys);
        }
        if (distribution == Distribution.ZIPF) {
            if (keys > MAX_PERIOD) {
                throw new IllegalArgumentException(StateJob.KEYS.key() + " must be <= "
                        + MAX_PERIOD + " with zipf keys (each key once a round), got " + keys);
            }
            if (!(exponent > 0 && exponent <= 5)) {
                throw new IllegalArgumentException(StateJob.ZIPF_EXPONENT.key()
                        + " must be in (0, 5], got " + exponent);
            }
        }
        this.keys = keys;
        this.distribution = distribution;
        this.exponent = exponent;
        this.seed = seed;
    }

    /** Parses {@code hybridscaler.job.key-distribution}, naming the option when it is not one. */
    static Distribution distribution(String value) {
        try {
            return Distribution.valueOf(value.trim().toUpperCase(Locale.ROOT));
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(StateJob.KEY_DISTRIBUTION.key()
                    + " must be uniform or zipf, got '" + value + "'", e);
        }
    }

    /** Records in a round. */
    long period() {
        return distribution == Distribution.UNIFORM ? keys : table().keyAt.length;
    }

    long key(long index) {
        if (distribution == Distribution.UNIFORM) {
            return index % keys;
        }
        Table t = table();
        return t.keyAt[(int) (index % t.keyAt.length)];
    }

    /** 1 + how many records before {@code index} updated the same key. */
    long sequence(long index) {
        if (distribution == Distribution.UNIFORM) {
            return index / keys + 1;
        }
        Table t = table();
        int p = (int) (index % t.keyAt.length);
        return index / t.keyAt.length * t.count[t.keyAt[p]] + t.before[p] + 1;
    }

    /** The round record {@code index} is in, from 1. */
    long round(long index) {
        return index / period() + 1;
    }

    /** How many times a key appears in a round (for tests and the docs' numbers). */
    int count(long key) {
        return distribution == Distribution.UNIFORM ? 1 : table().count[(int) key];
    }

    private Table table() {
        Table t = table;
        if (t == null) {
            t = Table.of(keys, exponent, seed);
            table = t;
        }
        return t;
    }

    /** One zipf round: its keys in order, and per record how often its key came before. */
    private static final class Table {
        private static Table cached;
        private final long keys;
        private final double exponent;
        private final long seed;
        final int[] keyAt;
        final int[] before;
        final int[] count;

        private Table(long keys, double exponent, long seed) {
            this.keys = keys;
            this.exponent = exponent;
            this.seed = seed;
            int n = (int) keys;
            // The largest c whose round fits MAX_PERIOD (the round's size grows with c).
            double lo = 0;
            double hi = Math.pow(n, exponent);
            for (int i = 0; i < 60 && size(n, hi, exponent) > MAX_PERIOD; i++) {
                double mid = (lo + hi) / 2;
                if (size(n, mid, exponent) > MAX_PERIOD) {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            double c = size(n, hi, exponent) <= MAX_PERIOD ? hi : lo;
            SplittableRandom random = new SplittableRandom(seed);
            int[] keyOfRank = shuffled(identity(n), random);
            count = new int[n];
            keyAt = new int[(int) size(n, c, exponent)];
            int p = 0;
            for (int r = 1; r <= n; r++) {
                int key = keyOfRank[r - 1];
                count[key] = occurrences(c, r, exponent);
                for (int j = 0; j < count[key]; j++) {
                    keyAt[p++] = key;
                }
            }
            shuffled(keyAt, random);
            before = new int[keyAt.length];
            int[] seen = new int[n];
            for (p = 0; p < keyAt.length; p++) {
                before[p] = seen[keyAt[p]]++;
            }
        }

        static synchronized Table of(long keys, double exponent, long seed) {
            Table t = cached;
            if (t == null || t.keys != keys || t.exponent != exponent || t.seed != seed) {
                t = new Table(keys, exponent, seed);
                cached = t;
            }
            return t;
        }

        private static int occurrences(double c, int rank, double exponent) {
            return (int) Math.max(1, Math.min(MAX_PERIOD, Math.round(c / Math.pow(rank, exponent))));
        }

        private static long size(int n, double c, double exponent) {
            long total = 0;
            for (int r = 1; r <= n && total <= MAX_PERIOD; r++) {
                total += occurrences(c, r, exponent);
            }
            return total;
        }

        private static int[] identity(int n) {
            int[] a = new int[n];
            for (int i = 0; i < n; i++) {
                a[i] = i;
            }
            return a;
        }

        /** Fisher-Yates, in place. */
        private static int[] shuffled(int[] a, SplittableRandom random) {
            for (int i = a.length - 1; i > 0; i--) {
                int j = random.nextInt(i + 1);
                int swap = a[i];
                a[i] = a[j];
                a[j] = swap;
            }
            return a;
        }
    }
}
