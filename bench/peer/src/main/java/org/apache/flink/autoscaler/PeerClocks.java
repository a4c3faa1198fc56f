package org.apache.flink.autoscaler;

import org.apache.flink.autoscaler.metrics.EvaluatedMetrics;

import java.lang.reflect.Field;
import java.time.Clock;

/**
 * Wiring only: hands one {@link Clock} to the three clocks flink-autoscaler 1.10.0 reads
 * (JobAutoScalerImpl, ScalingMetricCollector, and the JobVertexScaler that ScalingExecutor
 * creates for itself), as upstream's own tests do with their setClock methods. The setters are
 * package-private or protected, hence this class lives in upstream's package. ScalingExecutor
 * offers no setter for its JobVertexScaler, so that one is reached by reflection; without it the
 * delayed scale-down (scale-down.interval) would run on the wall clock while everything else runs
 * on the twin's.
 */
public final class PeerClocks {
    private PeerClocks() {}

    public static void set(
            Clock clock,
            JobAutoScalerImpl<?, ?> autoscaler,
            ScalingMetricCollector<?, ?> collector,
            ScalingExecutor<?, ?> executor) {
        autoscaler.setClock(clock);
        collector.setClock(clock);
        vertexScaler(executor).setClock(clock);
    }

    /** What the autoscaler evaluated last for a job (JobAutoScalerImpl keeps it for its metrics). */
    public static <K> EvaluatedMetrics lastEvaluated(JobAutoScalerImpl<K, ?> autoscaler, K key) {
        return autoscaler.lastEvaluatedMetrics.get(key);
    }

    private static JobVertexScaler<?, ?> vertexScaler(ScalingExecutor<?, ?> executor) {
        try {
            Field field = ScalingExecutor.class.getDeclaredField("jobVertexScaler");
            field.setAccessible(true);
            return (JobVertexScaler<?, ?>) field.get(executor);
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException(
                    "flink-autoscaler changed: ScalingExecutor.jobVertexScaler not found", e);
        }
    }
}
