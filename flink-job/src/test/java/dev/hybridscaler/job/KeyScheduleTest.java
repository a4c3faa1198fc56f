package dev.hybridscaler.job;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.hybridscaler.job.KeySchedule.Distribution;

import org.apache.flink.configuration.Configuration;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

class KeyScheduleTest {

    /** The counter's expectation, recomputed by brute force over three rounds. */
    @Test
    void zipfSequencesCountEveryEarlierUpdateOfTheKey() {
        KeySchedule schedule = new KeySchedule(50, Distribution.ZIPF, 1.2, 7);
        long period = schedule.period();
        Map<Long, Long> seen = new HashMap<>();
        for (long i = 0; i < 3 * period; i++) {
            long key = schedule.key(i);
            long before = seen.merge(key, 1L, Long::sum) - 1;
            assertEquals(before + 1, schedule.sequence(i), "record " + i + ", key " + key);
            assertEquals(i / period + 1, schedule.round(i));
        }
        assertEquals(50, seen.size(), "every key appears");
    }

    @Test
    void zipfCountsFollowTheExponentAndTheSeedPicksTheOrder() {
        KeySchedule schedule = new KeySchedule(1000, Distribution.ZIPF, 1.0, 1);
        List<Integer> counts = new ArrayList<>();
        for (long k = 0; k < 1000; k++) {
            counts.add(schedule.count(k));
        }
        counts.sort(null);
        int top = counts.get(999);
        // Rank r appears c / r times: 1000, 500, 333, ...; the least popular key once.
        assertEquals(1000, top);
        assertEquals(500, counts.get(998));
        assertEquals(333, counts.get(997));
        assertEquals(1, counts.get(0));
        assertEquals(counts.stream().mapToLong(Integer::longValue).sum(), schedule.period());
        // A seed is a schedule: the same one again, another one differs.
        KeySchedule again = new KeySchedule(1000, Distribution.ZIPF, 1.0, 1);
        KeySchedule other = new KeySchedule(1000, Distribution.ZIPF, 1.0, 2);
        List<Long> a = new ArrayList<>();
        List<Long> b = new ArrayList<>();
        List<Long> c = new ArrayList<>();
        for (long i = 0; i < 100; i++) {
            a.add(schedule.key(i));
            b.add(again.key(i));
            c.add(other.key(i));
        }
        assertEquals(a, b);
        assertNotEquals(a, c);
    }

    @Test
    void aLargeZipfRoundIsCappedAndStillVisitsEveryKey() {
        KeySchedule schedule = new KeySchedule(100_000, Distribution.ZIPF, 1.0, 0);
        assertTrue(schedule.period() <= KeySchedule.MAX_PERIOD, "period " + schedule.period());
        assertTrue(schedule.period() > 900_000, "period " + schedule.period());
        long once = 0;
        for (long k = 0; k < 100_000; k++) {
            once += schedule.count(k) == 1 ? 1 : 0;
        }
        assertTrue(once < 100_000 && once > 0, "keys seen once a round: " + once);
    }

    @Test
    void uniformIsRoundRobin() {
        KeySchedule schedule = new KeySchedule(10, Distribution.UNIFORM, 1.0, 5);
        assertEquals(10, schedule.period());
        assertEquals(3, schedule.key(23));
        assertEquals(3, schedule.sequence(23));
        assertEquals(1, schedule.count(4));
    }

    @Test
    void badSettingsNameTheirOption() {
        Configuration conf = new Configuration();
        conf.set(StateJob.KEY_DISTRIBUTION, "pareto");
        IllegalArgumentException e =
                assertThrows(IllegalArgumentException.class, () -> StateJob.schedule(conf));
        assertTrue(e.getMessage().contains("hybridscaler.job.key-distribution"), e.getMessage());
        conf.set(StateJob.KEY_DISTRIBUTION, "zipf");
        conf.set(StateJob.ZIPF_EXPONENT, 0.0);
        e = assertThrows(IllegalArgumentException.class, () -> StateJob.schedule(conf));
        assertTrue(e.getMessage().contains("hybridscaler.job.zipf-exponent"), e.getMessage());
        conf.set(StateJob.ZIPF_EXPONENT, 1.0);
        conf.set(StateJob.KEYS, KeySchedule.MAX_PERIOD + 1L);
        e = assertThrows(IllegalArgumentException.class, () -> StateJob.schedule(conf));
        assertTrue(e.getMessage().contains("hybridscaler.job.keys"), e.getMessage());
    }
}
