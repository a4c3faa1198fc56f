package dev.hybridscaler.peer;

import org.apache.flink.api.common.JobStatus;
import org.apache.flink.autoscaler.JobAutoScalerContext;
import org.apache.flink.autoscaler.config.AutoScalerOptions;
import org.apache.flink.autoscaler.event.AutoScalerEventHandler;
import org.apache.flink.autoscaler.realizer.ScalingRealizer;
import org.apache.flink.autoscaler.tuning.ConfigChanges;
import org.apache.flink.configuration.JobManagerOptions;
import org.apache.flink.runtime.jobgraph.JobResourceRequirements;
import org.apache.flink.runtime.jobgraph.JobVertexID;
import org.apache.flink.runtime.jobgraph.JobVertexResourceRequirements;
import org.apache.flink.runtime.rest.messages.EmptyRequestBody;
import org.apache.flink.runtime.rest.messages.JobMessageParameters;
import org.apache.flink.runtime.rest.messages.job.JobResourceRequirementsBody;
import org.apache.flink.runtime.rest.messages.job.JobResourceRequirementsHeaders;
import org.apache.flink.runtime.rest.messages.job.JobResourcesRequirementsUpdateHeaders;

import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * Rescales in place through Flink's REST API (FLIP-291), as the standalone autoscaler's
 * RescaleApiScalingRealizer does (that module is not published, so this is our own code with the
 * same contract): only under the adaptive scheduler and while the job runs, read the job's
 * resource requirements, set [1, p] for every vertex upstream gives a parallelism, and PUT them if
 * anything changed. Memory (config) overrides are not supported there either.
 */
final class RescaleApiRealizer<C extends JobAutoScalerContext<String>>
        implements ScalingRealizer<String, C> {

    private final AutoScalerEventHandler<String, C> events;

    RescaleApiRealizer(AutoScalerEventHandler<String, C> events) {
        this.events = events;
    }

    @Override
    public void realizeParallelismOverrides(C context, Map<String, String> overrides)
            throws Exception {
        var conf = context.getConfiguration();
        if (conf.get(JobManagerOptions.SCHEDULER) != JobManagerOptions.SchedulerType.Adaptive) {
            events.handleEvent(context, AutoScalerEventHandler.Type.Warning, "NotAdaptive",
                    "in-place rescaling needs jobmanager.scheduler: adaptive", null, null);
            return;
        }
        if (context.getJobStatus() != JobStatus.RUNNING) {
            return;
        }
        long timeout = conf.get(AutoScalerOptions.FLINK_CLIENT_TIMEOUT).toSeconds();
        var parameters = new JobMessageParameters();
        parameters.jobPathParameter.resolve(context.getJobID());
        try (var client = context.getRestClusterClient()) {
            var current = client.sendRequest(new JobResourceRequirementsHeaders(), parameters,
                            EmptyRequestBody.getInstance())
                    .get(timeout, TimeUnit.SECONDS);
            var requirements = new HashMap<JobVertexID, JobVertexResourceRequirements>(
                    current.asJobResourceRequirements().orElseThrow().getJobVertexParallelisms());
            boolean changed = false;
            for (var entry : requirements.entrySet()) {
                var override = overrides.get(entry.getKey().toString());
                if (override == null) {
                    continue;
                }
                var wanted = new JobVertexResourceRequirements.Parallelism(
                        1, Integer.parseInt(override));
                if (!entry.getValue().getParallelism().equals(wanted)) {
                    entry.setValue(new JobVertexResourceRequirements(wanted));
                    changed = true;
                }
            }
            if (!changed) {
                return;
            }
            client.sendRequest(new JobResourcesRequirementsUpdateHeaders(), parameters,
                            new JobResourceRequirementsBody(
                                    new JobResourceRequirements(requirements)))
                    .get(timeout, TimeUnit.SECONDS);
            events.handleEvent(context, AutoScalerEventHandler.Type.Normal, "Scaling",
                    "In-place scaling triggered: " + requirements, null, null);
        }
    }

    @Override
    public void realizeConfigOverrides(C context, ConfigChanges configChanges) {}
}
