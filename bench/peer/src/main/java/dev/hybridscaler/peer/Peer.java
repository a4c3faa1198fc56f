package dev.hybridscaler.peer;

import org.apache.flink.api.common.JobID;
import org.apache.flink.autoscaler.JobAutoScalerContext;
import org.apache.flink.autoscaler.RestApiMetricsCollector;
import org.apache.flink.autoscaler.config.AutoScalerOptions;
import org.apache.flink.autoscaler.utils.JobStatusUtils;
import org.apache.flink.client.program.rest.RestClusterClient;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.runtime.client.JobStatusMessage;
import org.apache.flink.runtime.highavailability.nonha.standalone.StandaloneClientHAServices;
import org.apache.flink.runtime.rest.messages.EmptyMessageParameters;
import org.apache.flink.runtime.rest.messages.EmptyRequestBody;
import org.apache.flink.runtime.rest.messages.JobMessageParameters;
import org.apache.flink.runtime.rest.messages.JobsOverviewHeaders;
import org.apache.flink.runtime.rest.messages.job.JobManagerJobConfigurationHeaders;

import java.net.URI;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * The real flink-autoscaler driving Flink clusters (here: the twin's per-deployment REST endpoints)
 * the way the standalone autoscaler does: every control-loop interval, list each cluster's jobs
 * (GET /jobs/overview), read each job's configuration (GET /jobs/&lt;jid&gt;/jobmanager/config)
 * over the base configuration, and run JobAutoScalerImpl with upstream's RestApiMetricsCollector,
 * ScalingMetricEvaluator and ScalingExecutor; rescale in place through the Rescale API.
 *
 * <pre>java -cp "$(cat bench/peer/target/classpath.txt):bench/peer/target/classes" \
 *     dev.hybridscaler.peer.Peer --rest http://127.0.0.1:PORT [--rest ...] \
 *     [--time-scale K --clock-anchor-ms MS] [--interval-s 10] [--duration-s S] \
 *     [-Djob.autoscaler.utilization.target=0.5 ...]</pre>
 *
 * <p>Prints one JSON object per line on stdout: upstream's events (ScalingReport, Scaling,
 * AutoscalerError, ...) with the cluster, job and the time on the twin's clock.
 */
public final class Peer {
    private Peer() {}

    /** A RestClusterClient that survives upstream's try-with-resources; closed at exit. */
    static final class SharedClient extends RestClusterClient<String> {
        SharedClient(Configuration conf, String url) throws Exception {
            super(conf, "peer", (c, e) -> new StandaloneClientHAServices(url));
        }

        @Override
        public void close() {}

        void reallyClose() {
            super.close();
        }
    }

    public static void main(String[] args) throws Exception {
        Evaluate.quietLogs();
        var urls = new ArrayList<String>();
        var base = new Configuration();
        base.set(AutoScalerOptions.AUTOSCALER_ENABLED, true);
        double scale = 1.0;
        long anchor = System.currentTimeMillis();
        long intervalMs = 10_000; // the standalone autoscaler's control-loop interval
        long durationMs = Long.MAX_VALUE;
        String warmup = null;
        boolean lockstep = false;
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (a.startsWith("-D") && a.contains("=")) {
                Options.check(a.substring(2, a.indexOf('=')), a);
                base.setString(a.substring(2, a.indexOf('=')), a.substring(a.indexOf('=') + 1));
                continue;
            }
            if (i + 1 >= args.length) {
                usage("missing value for " + a);
            }
            String v = args[++i];
            switch (a) {
                case "--rest" -> urls.add(v);
                case "--warmup" -> warmup = v;
                case "--lockstep" -> lockstep = Boolean.parseBoolean(v);
                case "--time-scale" -> scale = Double.parseDouble(v);
                case "--clock-anchor-ms" -> anchor = Long.parseLong(v);
                case "--interval-s" -> intervalMs = Math.round(Double.parseDouble(v) * 1000);
                case "--duration-s" -> durationMs = Math.round(Double.parseDouble(v) * 1000);
                default -> usage("unknown argument " + a);
            }
        }
        if (warmup != null) {
            warmUp(base, warmup);
            if (urls.isEmpty()) {
                readUrls(urls);
            }
        }
        if (urls.isEmpty()) {
            usage("give at least one --rest URL");
        }
        var clock = lockstep ? new ScaledClock(anchor, 0) : new ScaledClock(anchor, scale);
        var clients = new LinkedHashMap<String, SharedClient>();
        for (var url : urls) {
            var uri = URI.create(url);
            var conf = new Configuration();
            conf.set(RestOptions.ADDRESS, uri.getHost());
            conf.set(RestOptions.PORT, uri.getPort());
            clients.put(url, new SharedClient(conf, url));
        }
        var upstream = new Upstream<JobAutoScalerContext<String>>(
                new RestApiMetricsCollector<>(), RescaleApiRealizer::new);
        upstream.setClock(clock);

        Duration timeout = base.get(AutoScalerOptions.FLINK_CLIENT_TIMEOUT);
        if (lockstep) {
            // The bench owns time: each stdin line is the epoch ms of one control loop, run
            // with upstream's clock stopped there while the twins wait; then {"done": ms}.
            var in = new java.io.BufferedReader(new java.io.InputStreamReader(
                    System.in, java.nio.charset.StandardCharsets.UTF_8));
            for (String line = in.readLine(); line != null; line = in.readLine()) {
                if (line.isBlank()) {
                    continue;
                }
                clock.set(Long.parseLong(line.strip()));
                controlLoop(base, clients, upstream, clock, timeout);
                System.out.println("{\"done\": " + clock.millis() + "}");
                System.out.flush();
            }
            clients.values().forEach(SharedClient::reallyClose);
            System.exit(0);
        }
        long end = durationMs == Long.MAX_VALUE ? Long.MAX_VALUE : clock.millis() + durationMs;
        while (clock.millis() < end) {
            long loopStart = System.nanoTime();
            controlLoop(base, clients, upstream, clock, timeout);
            double loopMs = (System.nanoTime() - loopStart) / 1e6;
            if (loopMs * clock.scale > intervalMs) {
                // The loop took longer than its interval on the twin's clock: samples thin out.
                System.err.printf("peer: control loop took %.0f ms wall (%.1f s on the twin's clock)%n",
                        loopMs, loopMs * clock.scale / 1000);
            }
            clock.sleep(intervalMs);
        }
        clients.values().forEach(SharedClient::reallyClose);
        System.exit(0);
    }

    /** One pass over every cluster's jobs, as the standalone executor's scaling() does. */
    static void controlLoop(Configuration base, Map<String, SharedClient> clients,
            Upstream<JobAutoScalerContext<String>> upstream, ScaledClock clock,
            Duration timeout) {
        for (var entry : clients.entrySet()) {
            for (var context : contexts(base, entry.getValue(), timeout)) {
                try {
                    upstream.scale(context);
                } catch (Throwable e) {
                    upstream.events.handleException(context, "AutoscalerError", e);
                }
                for (var e : upstream.events.drain()) {
                    print(clock, entry.getKey(), context.getJobKey(), e);
                }
                upstream.events.error = null;
            }
        }
    }

    /**
     * One pass of a separate autoscaler against a throw-away deployment: loads and JITs the
     * classes (seconds on a busy machine) before the measured jobs start, so upstream's first
     * loop is not late on the twin's clock. Then prints {"ready": true}.
     */
    static void warmUp(Configuration base, String url) throws Exception {
        var uri = URI.create(url);
        var conf = new Configuration();
        conf.set(RestOptions.ADDRESS, uri.getHost());
        conf.set(RestOptions.PORT, uri.getPort());
        var client = new SharedClient(conf, url);
        var upstream = new Upstream<JobAutoScalerContext<String>>(
                new RestApiMetricsCollector<>(), RescaleApiRealizer::new);
        for (int i = 0; i < 3; i++) {
            for (var context : contexts(base, client, Duration.ofSeconds(30))) {
                upstream.scale(context);
            }
        }
        client.reallyClose();
        System.out.println("{\"ready\": true}");
        System.out.flush();
    }

    /** The clusters to drive, one REST URL a line on stdin, ended by an empty line. */
    static void readUrls(List<String> urls) throws java.io.IOException {
        var in = new java.io.BufferedReader(
                new java.io.InputStreamReader(System.in, java.nio.charset.StandardCharsets.UTF_8));
        for (String line = in.readLine(); line != null && !line.isBlank(); line = in.readLine()) {
            urls.add(line.strip());
        }
    }

    /** What the standalone FlinkClusterJobListFetcher builds: one context per job. */
    static List<JobAutoScalerContext<String>> contexts(
            Configuration base, SharedClient client, Duration timeout) {
        var out = new ArrayList<JobAutoScalerContext<String>>();
        try {
            List<JobStatusMessage> jobs = client.sendRequest(JobsOverviewHeaders.getInstance(),
                            EmptyMessageParameters.getInstance(), EmptyRequestBody.getInstance())
                    .thenApply(JobStatusUtils::toJobStatusMessage)
                    .get(timeout.toSeconds(), TimeUnit.SECONDS);
            for (var job : jobs) {
                JobID id = job.getJobId();
                var parameters = new JobMessageParameters();
                parameters.jobPathParameter.resolve(id);
                var conf = new Configuration(base);
                client.sendRequest(JobManagerJobConfigurationHeaders.getInstance(), parameters,
                                EmptyRequestBody.getInstance())
                        .get(timeout.toSeconds(), TimeUnit.SECONDS)
                        .forEach(e -> conf.setString(e.getKey(), e.getValue()));
                for (var key : conf.keySet()) {
                    Options.check(key, "job " + id + " configuration");
                }
                out.add(new JobAutoScalerContext<>(id.toHexString(), id, job.getJobState(), conf,
                        new UnregisteredMetricsGroup(), () -> client));
            }
        } catch (Exception e) {
            var line = Json.MAPPER.createObjectNode().put("type", "Error")
                    .put("reason", "JobListFetch").put("message", String.valueOf(e));
            System.out.println(line);
        }
        return out;
    }

    private static void print(ScaledClock clock, String url, String job, Upstream.Event e) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("time_ms", clock.millis());
        line.put("rest", url);
        line.put("job", job);
        line.put("type", e.type());
        line.put("reason", e.reason());
        line.put("message", e.message());
        try {
            System.out.println(Json.MAPPER.writeValueAsString(line));
            System.out.flush();
        } catch (Exception ex) {
            throw new IllegalStateException(ex);
        }
    }

    private static void usage(String why) {
        System.err.println(why + "\nusage: Peer --rest URL [--rest URL ...] [--time-scale K"
                + " --clock-anchor-ms MS] [--interval-s S] [--duration-s S] [-Dkey=value ...]");
        System.exit(2);
    }
}
