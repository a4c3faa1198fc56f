package dev.hybridscaler.flink.resize;

import org.forstdb.Cache;
import org.forstdb.WriteBufferManager;

/** ForSt's write-buffer manager for a slot, whose close takes the resize lock. */
final class ResizableForStWriteBufferManager extends WriteBufferManager {
    private final ResizeAgent agent;

    ResizableForStWriteBufferManager(long bytes, Cache cache, ResizeAgent agent) {
        super(bytes, cache);
        this.agent = agent;
    }

    @Override
    public void close() {
        agent.close(this, super::close);
    }
}
