package dev.hybridscaler.flink.resize;

import org.apache.flink.configuration.ReadableConfig;
import org.apache.flink.runtime.state.StateBackendFactory;
import org.apache.flink.state.forst.ForStStateBackend;

/**
 * The resizable ForSt factory as it behaves on a Flink whose ForStStateBackend has no field
 * {@value #MISSING} (what a Flink other than 2.2.0 may look like): named in {@code
 * state.backend.type} by ForStResizeTest to see the refusal.
 */
public final class UnusableHookForStFactory implements StateBackendFactory<ForStStateBackend> {
    static final String MISSING = "memoryFactoryOfAnotherFlink";

    @Override
    public ForStStateBackend createFromConfig(ReadableConfig config, ClassLoader classLoader) {
        return new ResizableForStStateBackendFactory(MISSING).createFromConfig(config, classLoader);
    }
}
