package dev.hybridscaler.job;

import org.apache.flink.client.deployment.application.ApplicationClusterEntryPoint;
import org.apache.flink.client.program.PackagedProgram;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.GlobalConfiguration;
import org.apache.flink.runtime.entrypoint.ClusterEntrypoint;
import org.apache.flink.runtime.resourcemanager.StandaloneResourceManagerFactory;
import org.apache.flink.runtime.util.EnvironmentInformation;
import org.apache.flink.runtime.util.SignalHandler;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A JobManager in application mode, as the Flink Kubernetes Operator runs a FlinkDeployment: the
 * job's {@code main()} runs inside the JobManager, against the cluster's configuration (so
 * {@code pipeline.jobvertex-parallelism-overrides}, {@code execution.savepoint.path} and
 * {@code hybridscaler.operator-resources} reach the job exactly as there), with standalone
 * TaskManagers. Flink's own {@code StandaloneApplicationClusterEntryPoint} (module flink-container)
 * is not published on Maven Central; this is the same few lines on Flink's public classes.
 *
 * <p>Usage: {@code ApplicationLauncher <configDir> <job main class>}; the job classes are on the
 * classpath, as in a Flink image's usrlib.
 */
public final class ApplicationLauncher extends ApplicationClusterEntryPoint {
    private static final Logger LOG = LoggerFactory.getLogger(ApplicationLauncher.class);

    private ApplicationLauncher(Configuration configuration, PackagedProgram program) {
        super(configuration, program, StandaloneResourceManagerFactory.getInstance());
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: ApplicationLauncher <configDir> <job main class>");
            System.exit(2);
        }
        EnvironmentInformation.logEnvironmentInfo(LOG, "application cluster", args);
        SignalHandler.register(LOG);
        Configuration configuration = GlobalConfiguration.loadConfiguration(args[0]);
        PackagedProgram program = PackagedProgram.newBuilder()
                .setEntryPointClassName(args[1])
                .setConfiguration(configuration)
                .build();
        configureExecution(configuration, program);
        ClusterEntrypoint.runClusterEntrypoint(new ApplicationLauncher(configuration, program));
    }
}
