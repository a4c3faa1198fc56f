package dev.hybridscaler.peer;

import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.JobStatus;
import org.apache.flink.autoscaler.JobAutoScalerContext;
import org.apache.flink.autoscaler.config.AutoScalerOptions;
import org.apache.flink.autoscaler.realizer.ScalingRealizer;
import org.apache.flink.autoscaler.tuning.ConfigChanges;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.JsonNode;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.File;
import java.io.IOException;
import java.time.Clock;
import java.time.Duration;
import java.time.Instant;
import java.time.ZoneOffset;
import java.util.HashMap;
import java.util.Map;

/**
 * Conformance entry point: recorded metric windows through upstream's collector logic,
 * ScalingMetricEvaluator and ScalingExecutor, exactly as JobAutoScalerImpl runs them.
 *
 * <pre>java -cp "$(cat bench/peer/target/classpath.txt):bench/peer/target/classes" \
 *     dev.hybridscaler.peer.Evaluate input.json      (or - for stdin)</pre>
 *
 * <p>Prints {@code {"rescale", "parallelism", ...}} on stdout; see bench/peer/README.md for the
 * input and output and for how windows become upstream's metric history. JobAutoScalerImpl.scale()
 * runs once per sample, its clock at the sample's time, as upstream's control loop would; the job
 * counts as running since the first window's start minus the stabilization interval (so every
 * window is collected), and the metric window defaults to the recording's span (so the decision
 * comes at the last window). It stops at the first rescale: later windows would describe a job
 * that upstream had already rescaled.
 */
public final class Evaluate {
    static final String KEY = "replay";

    private Evaluate() {}

    public static void main(String[] args) {
        quietLogs();
        if (args.length != 1) {
            System.err.println("usage: Evaluate <input.json | ->");
            System.exit(2);
        }
        try {
            JsonNode input = "-".equals(args[0])
                    ? Json.MAPPER.readTree(System.in)
                    : Json.MAPPER.readTree(new File(args[0]));
            System.out.println(Json.MAPPER.writeValueAsString(evaluate(Recording.parse(input))));
        } catch (IOException | IllegalArgumentException e) {
            System.err.println(args[0] + ": " + e.getMessage());
            System.exit(2);
        } catch (Exception e) {
            e.printStackTrace();
            System.exit(1);
        }
    }

    /** slf4j-simple: warnings and worse on stderr unless -Dorg.slf4j.simpleLogger.defaultLogLevel. */
    static void quietLogs() {
        if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        }
        System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
    }

    static ObjectNode evaluate(Recording recording) throws Exception {
        var conf = Configuration.fromMap(recording.options);
        if (!recording.options.containsKey(AutoScalerOptions.AUTOSCALER_ENABLED.key())) {
            conf.set(AutoScalerOptions.AUTOSCALER_ENABLED, true);
        }
        var times = recording.sampleTimes();
        var first = times.get(0);
        var last = times.get(times.size() - 1);
        if (!recording.options.containsKey(AutoScalerOptions.METRICS_WINDOW.key())) {
            conf.set(AutoScalerOptions.METRICS_WINDOW, Duration.between(first, last));
        }
        var runningSince = first.minus(conf.get(AutoScalerOptions.STABILIZATION_INTERVAL));

        var realizer = new Recorder();
        var upstream = new Upstream<JobAutoScalerContext<String>>(new ReplayCollector(), realizer);
        var collector = (ReplayCollector) upstream.collector;
        var jobId = new JobID(0, 0);
        Instant decidedAt = null;
        var events = Json.MAPPER.createArrayNode();
        for (int k = 0; k < times.size(); k++) {
            upstream.setClock(Clock.fixed(times.get(k), ZoneOffset.UTC));
            collector.answerWith(recording.answer(k, runningSince));
            // A fresh configuration each pass, as upstream's loops build one per job and pass:
            // upstream temporarily excludes vertices by writing into it.
            var context = new JobAutoScalerContext<String>(KEY, jobId, JobStatus.RUNNING,
                    new Configuration(conf), new UnregisteredMetricsGroup(), () -> null);
            boolean decided = upstream.scale(context);
            for (var e : upstream.events.drain()) {
                events.addObject().put("time", times.get(k).toEpochMilli() / 1000.0)
                        .put("type", e.type()).put("reason", e.reason())
                        .put("message", e.message());
            }
            if (upstream.events.error != null) {
                throw new IllegalStateException(
                        "upstream failed at sample " + k + " (" + times.get(k) + ")",
                        upstream.events.error);
            }
            if (decided) {
                decidedAt = times.get(k);
                break;
            }
        }

        var out = Json.MAPPER.createObjectNode();
        out.put("rescale", decidedAt != null);
        var parallelism = out.putObject("parallelism");
        for (var v : recording.vertices.values()) {
            var override = realizer.overrides.get(v.id().toHexString());
            parallelism.put(v.id().toHexString(),
                    decidedAt != null && override != null ? Integer.parseInt(override) : v.parallelism());
        }
        if (decidedAt == null) {
            out.putNull("decided_at");
        } else {
            out.put("decided_at", decidedAt.toEpochMilli() / 1000.0);
        }
        out.put("metrics_window_s", conf.get(AutoScalerOptions.METRICS_WINDOW).toMillis() / 1000.0);
        out.put("samples", times.size());
        out.set("evaluated", Upstream.evaluatedJson(upstream.lastEvaluated(KEY)));
        out.set("events", events);
        return out;
    }

    /** The realizer of a replay: keeps the overrides upstream hands it. */
    static final class Recorder implements ScalingRealizer<String, JobAutoScalerContext<String>> {
        final Map<String, String> overrides = new HashMap<>();

        @Override
        public void realizeParallelismOverrides(
                JobAutoScalerContext<String> context, Map<String, String> parallelismOverrides) {
            overrides.putAll(parallelismOverrides);
        }

        @Override
        public void realizeConfigOverrides(
                JobAutoScalerContext<String> context, ConfigChanges configChanges) {}
    }
}
