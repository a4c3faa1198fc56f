package dev.hybridscaler.peer;

import org.apache.flink.autoscaler.metrics.FlinkMetric;
import org.apache.flink.autoscaler.topology.IOMetrics;
import org.apache.flink.autoscaler.topology.JobTopology;
import org.apache.flink.autoscaler.topology.ShipStrategy;
import org.apache.flink.autoscaler.topology.VertexInfo;
import org.apache.flink.runtime.jobgraph.JobVertexID;
import org.apache.flink.runtime.rest.messages.job.metrics.AggregatedMetric;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import static dev.hybridscaler.peer.Json.InputError;

/**
 * Recorded metric windows (our {@code policies.model} field names) turned into what Flink's REST
 * API would have answered to upstream's collector at each window boundary.
 *
 * <p>A window is an average over {@code [time - window_s, time]}. Upstream instead samples Flink at
 * points in time: gauges (busy, backpressured ms/s, pending records) as they read then, and
 * accumulated counters (records in/out, busy time) from which it derives rates over its whole
 * metric window. So the windows become samples: one at the start of the first window, holding
 * counters at zero and the lag the first window started from ({@code pending_records -
 * pending_records_growth_per_s * window_s}), and one at the end of every window, whose counters
 * grew by the window's rates times the time since the previous sample and whose gauges read the
 * window's averages. Upstream's rates over any run of windows are then exactly the time-weighted
 * averages of the recorded rates, and its average load is the mean of the recorded busy times.
 *
 * <p>Flink's conventions kept: a source vertex reads no records at task scope ({@code
 * read-records} is 0); its source operator counts what it reads in {@code numRecordsIn}, which for
 * us is {@code records_in_per_s}, or {@code records_out_per_s} when a recording has no input rate
 * for sources. Accumulated busy time is summed over subtasks (average busy × parallelism).
 * Recordings have no minimum over subtasks: MIN as {@code metrics.busy-time.aggregator} reads NaN.
 */
final class Recording {

    record VertexSpec(
            JobVertexID id,
            String name,
            int parallelism,
            int maxParallelism,
            Map<JobVertexID, ShipStrategy> inputs) {}

    record Window(double time, double windowS, Map<JobVertexID, double[]> values) {}

    // Indexes into a window's per-vertex values.
    static final int BUSY = 0, BUSY_MAX = 1, BACKPRESSURED = 2, IN = 3, OUT = 4, PENDING = 5,
            PENDING_GROWTH = 6;
    private static final String[] FIELDS = {
        "busy_ms_per_s",
        "busy_ms_per_s_max",
        "backpressured_ms_per_s",
        "records_in_per_s",
        "records_out_per_s",
        "pending_records",
        "pending_records_growth_per_s"
    };

    final Map<JobVertexID, VertexSpec> vertices = new LinkedHashMap<>();
    final List<Window> windows = new ArrayList<>();
    final Map<String, String> options = new LinkedHashMap<>();

    static Recording parse(JsonNode input) {
        var r = new Recording();
        var graph = Json.field(input, "", "graph");
        var vertices = Json.field(graph, "graph", "vertices");
        if (!vertices.isArray() || vertices.isEmpty()) {
            throw new InputError("graph.vertices", "must be a non-empty list");
        }
        var inputs = new HashMap<JobVertexID, Map<JobVertexID, ShipStrategy>>();
        for (int i = 0; i < vertices.size(); i++) {
            var path = "graph.vertices[" + i + "]";
            var v = vertices.get(i);
            var id = vertexId(Json.text(v, path, "id"), path + ".id");
            int p = Json.integer(v, path, "parallelism", 1);
            int maxP = Json.integer(v, path, "max_parallelism", p);
            if (r.vertices.containsKey(id)) {
                throw new InputError(path + ".id", "duplicate vertex " + id);
            }
            var in = new HashMap<JobVertexID, ShipStrategy>();
            inputs.put(id, in);
            r.vertices.put(id, new VertexSpec(id, Json.text(v, path, "name"), p, maxP, in));
        }
        var edges = graph.get("edges");
        if (edges != null && !edges.isNull()) {
            if (!edges.isArray()) {
                throw new InputError("graph.edges", "must be a list");
            }
            for (int i = 0; i < edges.size(); i++) {
                var path = "graph.edges[" + i + "]";
                var e = edges.get(i);
                var source = knownVertex(r, Json.text(e, path, "source"), path + ".source");
                var target = knownVertex(r, Json.text(e, path, "target"), path + ".target");
                var ship = e.hasNonNull("ship_strategy") ? e.get("ship_strategy").asText() : "FORWARD";
                inputs.get(target).put(source, ShipStrategy.of(ship));
            }
        }
        var windows = Json.field(input, "", "windows");
        if (!windows.isArray() || windows.isEmpty()) {
            throw new InputError("windows", "must be a non-empty list");
        }
        double previousEnd = Double.NEGATIVE_INFINITY;
        for (int i = 0; i < windows.size(); i++) {
            var path = "windows[" + i + "]";
            var w = windows.get(i);
            double time = Json.number(w, path, "time");
            double length = Json.number(w, path, "window_s");
            if (length <= 0) {
                throw new InputError(path + ".window_s", "must be > 0, got " + length);
            }
            if (time <= previousEnd) {
                throw new InputError(path + ".time", "windows must be in increasing time order");
            }
            if (i > 0 && time - length < previousEnd - 1e-6) {
                throw new InputError(path, "overlaps the previous window");
            }
            previousEnd = time;
            var metrics = Json.field(w, path, "vertices");
            var values = new HashMap<JobVertexID, double[]>();
            for (var id : r.vertices.keySet()) {
                var vpath = path + ".vertices." + id;
                var m = metrics.get(id.toHexString());
                if (m == null || !m.isObject()) {
                    throw new InputError(vpath, "missing: every graph vertex needs metrics");
                }
                var row = new double[FIELDS.length];
                for (int f = 0; f < FIELDS.length; f++) {
                    row[f] = f < PENDING
                            ? Json.number(m, vpath, FIELDS[f])
                            : Json.optionalNumber(m, vpath, FIELDS[f]);
                    if (row[f] < 0 && f != PENDING_GROWTH) {
                        throw new InputError(vpath + "." + FIELDS[f], "must be >= 0, got " + row[f]);
                    }
                }
                values.put(id, row);
            }
            var unknown = new ArrayList<String>();
            metrics.fieldNames().forEachRemaining(unknown::add);
            for (var name : unknown) {
                if (!values.containsKey(vertexId(name, path + ".vertices." + name))) {
                    throw new InputError(path + ".vertices." + name, "not a vertex of the graph");
                }
            }
            r.windows.add(new Window(time, length, values));
        }
        var options = input.get("options");
        if (options != null && !options.isNull()) {
            if (!options.isObject()) {
                throw new InputError("options", "must be an object of Flink configuration keys");
            }
            options.fields()
                    .forEachRemaining(
                            e -> {
                                if (e.getValue().isContainerNode()) {
                                    throw new InputError("options." + e.getKey(), "must be a scalar");
                                }
                                r.options.put(e.getKey(), e.getValue().asText());
                            });
        }
        return r;
    }

    private static JobVertexID vertexId(String text, String path) {
        if (!text.matches("[0-9a-fA-F]{32}")) {
            throw new InputError(path, "a JobVertexID is 32 hex digits, got " + text);
        }
        return JobVertexID.fromHexString(text);
    }

    private static JobVertexID knownVertex(Recording r, String text, String path) {
        var id = vertexId(text, path);
        if (!r.vertices.containsKey(id)) {
            throw new InputError(path, "names no vertex of graph.vertices: " + text);
        }
        return id;
    }

    boolean isSource(JobVertexID id) {
        return vertices.get(id).inputs().isEmpty();
    }

    /** Sample times: the first window's start, then every window's end. */
    List<Instant> sampleTimes() {
        var out = new ArrayList<Instant>();
        var first = windows.get(0);
        out.add(instant(first.time() - first.windowS()));
        windows.forEach(w -> out.add(instant(w.time())));
        return out;
    }

    /** Flink's answers at sample {@code k} (0: the first window's start). */
    ReplayCollector.Answer answer(int k, Instant runningSince) {
        var times = sampleTimes();
        // Accumulated counters up to sample k.
        var in = new HashMap<JobVertexID, Double>();
        var out = new HashMap<JobVertexID, Double>();
        var sourceIn = new HashMap<JobVertexID, Double>();
        var busy = new HashMap<JobVertexID, Double>();
        for (var id : vertices.keySet()) {
            double a = 0, b = 0, c = 0, d = 0;
            for (int i = 1; i <= k; i++) {
                double dt = seconds(times.get(i - 1), times.get(i));
                double[] row = windows.get(i - 1).values().get(id);
                a += row[IN] * dt;
                b += row[OUT] * dt;
                c += sourceReadRate(row) * dt;
                d += row[BUSY] * vertices.get(id).parallelism() * dt;
            }
            in.put(id, a);
            out.put(id, b);
            sourceIn.put(id, c);
            busy.put(id, d);
        }

        var infos = new HashSet<VertexInfo>();
        var names = new HashMap<JobVertexID, Map<String, FlinkMetric>>();
        var values = new HashMap<JobVertexID, Map<FlinkMetric, AggregatedMetric>>();
        for (var spec : vertices.values()) {
            var id = spec.id();
            boolean source = isSource(id);
            var io = new IOMetrics(
                    source ? 0 : Math.round(in.get(id)), Math.round(out.get(id)), busy.get(id));
            infos.add(new VertexInfo(id, null, spec.inputs(), spec.parallelism(),
                    spec.maxParallelism(), false, io));

            // Gauges: NaN at the first window's start (nothing was measured before it).
            double[] row = k == 0 ? null : windows.get(k - 1).values().get(id);
            double nan = Double.NaN;
            var vNames = new LinkedHashMap<String, FlinkMetric>();
            var vValues = new HashMap<FlinkMetric, AggregatedMetric>();
            double p = spec.parallelism();
            put(vNames, vValues, "busyTimeMsPerSecond", FlinkMetric.BUSY_TIME_PER_SEC,
                    row == null ? gauge(nan, p)
                            : new AggregatedMetric("busyTimeMsPerSecond", nan, row[BUSY_MAX],
                                    row[BUSY], row[BUSY] * p, nan));
            put(vNames, vValues, "backPressuredTimeMsPerSecond",
                    FlinkMetric.BACKPRESSURE_TIME_PER_SEC,
                    row == null ? gauge(nan, p) : gauge(row[BACKPRESSURED], p));
            if (source) {
                var op = "Source__" + spec.name().replaceFirst("^Source: *", "")
                        .replaceAll("[^A-Za-z0-9]", "_");
                put(vNames, vValues, op + ".numRecordsIn", FlinkMetric.SOURCE_TASK_NUM_RECORDS_IN,
                        sum(sourceIn.get(id)));
                put(vNames, vValues, op + ".numRecordsOut", FlinkMetric.SOURCE_TASK_NUM_RECORDS_OUT,
                        sum(out.get(id)));
                put(vNames, vValues, op + ".numRecordsInPerSecond",
                        FlinkMetric.SOURCE_TASK_NUM_RECORDS_IN_PER_SEC,
                        sum(row == null ? nan : sourceReadRate(row)));
                put(vNames, vValues, op + ".numRecordsOutPerSecond",
                        FlinkMetric.SOURCE_TASK_NUM_RECORDS_OUT_PER_SEC,
                        sum(row == null ? nan : row[OUT]));
                double lag = lag(k, id);
                if (!Double.isNaN(lag)) {
                    put(vNames, vValues, op + ".pendingRecords", FlinkMetric.PENDING_RECORDS,
                            sum(lag));
                }
            }
            names.put(id, vNames);
            values.put(id, vValues);
        }
        return new ReplayCollector.Answer(
                times.get(k), runningSince, new JobTopology(infos), names, values);
    }

    /** Pending records at sample k: at a window's end as recorded; before the first, extrapolated. */
    private double lag(int k, JobVertexID id) {
        if (k > 0) {
            return windows.get(k - 1).values().get(id)[PENDING];
        }
        var first = windows.get(0);
        double[] row = first.values().get(id);
        if (Double.isNaN(row[PENDING])) {
            return Double.NaN;
        }
        double growth = Double.isNaN(row[PENDING_GROWTH]) ? 0 : row[PENDING_GROWTH];
        return Math.max(0, row[PENDING] - growth * first.windowS());
    }

    private static double sourceReadRate(double[] row) {
        return row[IN] > 0 ? row[IN] : row[OUT];
    }

    private static void put(Map<String, FlinkMetric> names, Map<FlinkMetric, AggregatedMetric> values,
            String name, FlinkMetric metric, AggregatedMetric value) {
        names.put(name, metric);
        values.put(metric, value);
    }

    /** A per-subtask gauge known only as an average (min and max unknown). */
    private static AggregatedMetric gauge(double avg, double parallelism) {
        return new AggregatedMetric("gauge", Double.NaN, Double.NaN, avg, avg * parallelism,
                Double.NaN);
    }

    /** A vertex-wide sum (counters, rates, pending records). */
    private static AggregatedMetric sum(double value) {
        return new AggregatedMetric("sum", Double.NaN, Double.NaN, Double.NaN, value, Double.NaN);
    }

    static Instant instant(double epochSeconds) {
        return Instant.ofEpochMilli(Math.round(epochSeconds * 1000));
    }

    private static double seconds(Instant from, Instant to) {
        return Duration.between(from, to).toMillis() / 1000.0;
    }
}
