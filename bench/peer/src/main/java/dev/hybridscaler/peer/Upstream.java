package dev.hybridscaler.peer;

import org.apache.flink.autoscaler.JobAutoScalerContext;
import org.apache.flink.autoscaler.JobAutoScalerImpl;
import org.apache.flink.autoscaler.PeerClocks;
import org.apache.flink.autoscaler.ScalingExecutor;
import org.apache.flink.autoscaler.ScalingMetricCollector;
import org.apache.flink.autoscaler.ScalingMetricEvaluator;
import org.apache.flink.autoscaler.event.AutoScalerEventHandler;
import org.apache.flink.autoscaler.metrics.EvaluatedMetrics;
import org.apache.flink.autoscaler.metrics.ScalingMetric;
import org.apache.flink.autoscaler.realizer.ScalingRealizer;
import org.apache.flink.autoscaler.state.InMemoryAutoScalerStateStore;
import org.apache.flink.shaded.jackson2.com.fasterxml.jackson.databind.node.ObjectNode;

import javax.annotation.Nullable;

import java.time.Clock;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * Upstream's autoscaler, assembled as the operator and the standalone autoscaler assemble it:
 * JobAutoScalerImpl over a metrics collector, ScalingMetricEvaluator, ScalingExecutor, an event
 * handler, a realizer and a state store. Ours are only the state store's bookkeeping (in memory,
 * upstream's InMemoryAutoScalerStateStore), the event handler (keeps what upstream reports), and
 * whatever collector and realizer the caller passes.
 */
final class Upstream<C extends JobAutoScalerContext<String>> {

    /** One event upstream reported (ScalingReport, AutoscalerError, Scaling, ...). */
    record Event(String type, String reason, String message) {}

    /** Upstream's in-memory store, noting when the executor stores a scaling decision. */
    static final class Store<C extends JobAutoScalerContext<String>>
            extends InMemoryAutoScalerStateStore<String, C> {
        volatile boolean decided;

        @Override
        public void storeParallelismOverrides(C jobContext, Map<String, String> overrides) {
            decided = true;
            super.storeParallelismOverrides(jobContext, overrides);
        }
    }

    /** Keeps upstream's events; an exception it caught is kept for the caller to raise. */
    static final class Events<C extends JobAutoScalerContext<String>>
            implements AutoScalerEventHandler<String, C> {
        final List<Event> events = new ArrayList<>();
        Throwable error;

        @Override
        public synchronized void handleEvent(C context, Type type, String reason, String message,
                @Nullable String messageKey, @Nullable Duration interval) {
            events.add(new Event(type.name(), reason, message));
        }

        @Override
        public synchronized void handleException(C context, String reason, Throwable e) {
            if (error == null) {
                error = e;
            }
            AutoScalerEventHandler.super.handleException(context, reason, e);
        }

        synchronized List<Event> drain() {
            var out = List.copyOf(events);
            events.clear();
            return out;
        }
    }

    final Store<C> store = new Store<>();
    final Events<C> events = new Events<>();
    final ScalingMetricCollector<String, C> collector;
    final ScalingExecutor<String, C> executor = new ScalingExecutor<>(events, store);
    final JobAutoScalerImpl<String, C> autoscaler;

    Upstream(ScalingMetricCollector<String, C> collector, ScalingRealizer<String, C> realizer) {
        this.collector = collector;
        this.autoscaler = new JobAutoScalerImpl<>(
                collector, new ScalingMetricEvaluator(), executor, events, realizer, store);
    }

    void setClock(Clock clock) {
        PeerClocks.set(clock, autoscaler, collector, executor);
    }

    /** One pass of upstream's loop; true when it decided to rescale. */
    boolean scale(C context) throws Exception {
        store.decided = false;
        autoscaler.scale(context);
        return store.decided;
    }

    @Nullable
    EvaluatedMetrics lastEvaluated(String key) {
        return PeerClocks.lastEvaluated(autoscaler, key);
    }

    /** Evaluated metrics per vertex as {metric: {current, average}} (null for NaN/inf). */
    static ObjectNode evaluatedJson(@Nullable EvaluatedMetrics evaluated) {
        var out = Json.MAPPER.createObjectNode();
        if (evaluated == null) {
            return out;
        }
        evaluated.getVertexMetrics().forEach((vertex, metrics) -> {
            var v = out.putObject(vertex.toHexString());
            metrics.forEach((metric, value) -> {
                var m = v.putObject(metricName(metric));
                Json.putNumber(m, "current", value.getCurrent());
                Json.putNumber(m, "average", value.getAverage());
            });
        });
        return out;
    }

    static String metricName(ScalingMetric metric) {
        return metric.name().toLowerCase(Locale.ROOT);
    }
}
