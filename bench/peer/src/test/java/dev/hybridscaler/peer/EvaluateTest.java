package dev.hybridscaler.peer;

import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;

import org.junit.jupiter.api.Test;

import java.io.InputStream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The replay through upstream's evaluator and executor, on examples/recorded/q11-memory-pressure. */
class EvaluateTest {
    static final String SOURCE = "bc764cd8ddf7a0cff126f51c16239658";
    static final String SESSION = "90bea66de1c231edf33913ecd54406c1";
    static final String SINK = "6d2677a0ecc3fd8df0b72ec675edf8f4";

    static ObjectNode q11() throws Exception {
        try (InputStream in = EvaluateTest.class.getResourceAsStream("/q11-memory-pressure.json")) {
            return (ObjectNode) Json.MAPPER.readTree(in);
        }
    }

    static ObjectNode session(ObjectNode input, int window) {
        return (ObjectNode) input.get("windows").get(window).get("vertices").get(SESSION);
    }

    @Test
    void saturatedSessionWindowIsScaledOutAndAlignedToKeyGroups() throws Exception {
        JsonNode out = Evaluate.evaluate(Recording.parse(q11()));
        assertTrue(out.get("rescale").asBoolean());
        // TPR = 40,000 / 0.985 (MAX busy); target capacity = 60,000 / 0.5 + lag / 30 min
        // + 60,000 × 5 min restart / 30 min = 131,333 → 4 × 3.23 = 12.9 → 13 → 16 (divides 128).
        assertEquals(16, out.get("parallelism").get(SESSION).asInt());
        assertEquals(2, out.get("parallelism").get(SOURCE).asInt());
        assertEquals(1, out.get("parallelism").get(SINK).asInt()); // excluded
        assertEquals(40609.137,
                out.get("evaluated").get(SESSION).get("true_processing_rate").get("average")
                        .asDouble(), 0.01);
    }

    @Test
    void aVertexInsideItsBandTriggersNothing() throws Exception {
        var input = q11();
        // No lag and a session window at 50 % utilization: everything is within [0.2, 0.8]
        // except the sink (excluded) and the source, whose parallelism would not change.
        var source = (ObjectNode) input.get("windows").get(0).get("vertices").get(SOURCE);
        source.put("pending_records", 0.0).put("pending_records_growth_per_s", 0.0);
        session(input, 0).put("busy_ms_per_s", 500.0).put("busy_ms_per_s_max", 500.0);
        JsonNode out = Evaluate.evaluate(Recording.parse(input));
        assertFalse(out.get("rescale").asBoolean());
        assertEquals(4, out.get("parallelism").get(SESSION).asInt());
    }

    @Test
    void aWindowTwiceAsLongWeighsTwiceInTheRates() throws Exception {
        // Two contiguous windows: 40,000/s for 120 s, then 10,000/s for 240 s. Upstream's rate
        // from accumulated counters is the time-weighted mean, (40k·120 + 10k·240) / 360 = 20k.
        var input = q11();
        var windows = input.withArray("windows");
        var second = windows.get(0).deepCopy();
        ((ObjectNode) second).put("time", windows.get(0).get("time").asDouble() + 240)
                .put("window_s", 240);
        ((ObjectNode) second.get("vertices").get(SESSION)).put("records_in_per_s", 10000.0);
        windows.add(second);
        JsonNode out = Evaluate.evaluate(Recording.parse(input));
        double load = (0.985 + 0.985) / 2;
        assertEquals(20000 / load,
                out.get("evaluated").get(SESSION).get("true_processing_rate").get("average")
                        .asDouble(), 1.0);
    }

    @Test
    void badInputNamesTheField() throws Exception {
        var input = q11();
        session(input, 0).remove("busy_ms_per_s");
        var error = assertThrows(Json.InputError.class, () -> Recording.parse(input));
        assertEquals("windows[0].vertices." + SESSION + ".busy_ms_per_s: missing",
                error.getMessage());
    }
}
