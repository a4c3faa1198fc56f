package dev.hybridscaler.peer;

import org.apache.flink.api.common.JobID;
import org.apache.flink.autoscaler.JobAutoScalerContext;
import org.apache.flink.autoscaler.ScalingMetricCollector;
import org.apache.flink.autoscaler.metrics.FlinkMetric;
import org.apache.flink.autoscaler.topology.JobTopology;
import org.apache.flink.client.program.rest.RestClusterClient;
import org.apache.flink.runtime.jobgraph.JobVertexID;
import org.apache.flink.runtime.rest.messages.job.JobDetailsInfo;
import org.apache.flink.runtime.rest.messages.job.metrics.AggregatedMetric;
import org.apache.flink.runtime.rest.messages.job.metrics.Metric;

import org.apache.flink.autoscaler.state.AutoScalerStateStore;

import java.time.Instant;
import java.util.Collection;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import static org.apache.flink.autoscaler.metrics.ScalingHistoryUtils.updateVertexList;
import static org.apache.flink.autoscaler.utils.AutoScalerUtils.excludeVerticesFromScaling;

/**
 * Upstream's ScalingMetricCollector with its Flink REST calls answered from a recording.
 *
 * <p>Only the calls that reach Flink are replaced (job details, the vertex metric names and their
 * aggregated values, JobManager and TaskManager metrics); what upstream does with the answers
 * (metric-name filtering, converting aggregated metrics and accumulated IO counters into scaling
 * metrics, stabilization, the metric window, trimming the history) runs unchanged. The recording
 * carries no JobManager or TaskManager metrics, which upstream treats as "not available" (no slot
 * count, no heap or GC pressure).
 */
final class ReplayCollector extends ScalingMetricCollector<String, JobAutoScalerContext<String>> {

    /** What Flink would answer at one collection. */
    record Answer(
            Instant time,
            Instant runningSince,
            JobTopology topology,
            Map<JobVertexID, Map<String, FlinkMetric>> metricNames,
            Map<JobVertexID, Map<FlinkMetric, AggregatedMetric>> values) {}

    private Answer answer;

    void answerWith(Answer answer) {
        this.answer = answer;
    }

    @Override
    public JobDetailsInfo getJobDetailsInfo(
            JobAutoScalerContext<String> context, java.time.Duration clientTimeout) {
        return null; // getJobRunningTs and getJobTopology below answer from the recording
    }

    @Override
    protected Instant getJobRunningTs(JobDetailsInfo jobDetailsInfo) {
        return answer.runningSince();
    }

    @Override
    protected JobTopology getJobTopology(
            JobAutoScalerContext<String> ctx,
            AutoScalerStateStore<String, JobAutoScalerContext<String>> stateStore,
            JobDetailsInfo jobDetailsInfo)
            throws Exception {
        // Upstream's steps after parsing the plan, less the Kafka/Pulsar partition count
        // (a REST query; recordings carry no partition metrics).
        var topology = answer.topology();
        updateVertexList(
                stateStore, ctx, answer.time(), Set.copyOf(topology.getVerticesInTopologicalOrder()));
        excludeVerticesFromScaling(ctx.getConfiguration(), topology.getFinishedVertices());
        return topology;
    }

    @Override
    protected Collection<String> queryAggregatedMetricNames(
            RestClusterClient<?> restClient, JobID jobID, JobVertexID jobVertexID) {
        return answer.metricNames().getOrDefault(jobVertexID, Map.of()).keySet();
    }

    @Override
    protected Map<JobVertexID, Map<FlinkMetric, AggregatedMetric>> queryAllAggregatedMetrics(
            JobAutoScalerContext<String> ctx,
            Map<JobVertexID, Map<String, FlinkMetric>> filteredVertexMetricNames) {
        var out = new HashMap<JobVertexID, Map<FlinkMetric, AggregatedMetric>>();
        filteredVertexMetricNames.forEach(
                (vertex, names) -> {
                    var recorded = answer.values().get(vertex);
                    var values = new HashMap<FlinkMetric, AggregatedMetric>();
                    names.values().forEach(m -> values.put(m, recorded.get(m)));
                    out.put(vertex, values);
                });
        return out;
    }

    @Override
    protected Map<FlinkMetric, Metric> queryJmMetrics(JobAutoScalerContext<String> ctx) {
        return Map.of();
    }

    @Override
    protected Map<FlinkMetric, AggregatedMetric> queryTmMetrics(JobAutoScalerContext<String> ctx) {
        return Map.of();
    }
}
