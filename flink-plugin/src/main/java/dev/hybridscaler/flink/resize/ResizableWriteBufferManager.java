package dev.hybridscaler.flink.resize;

import org.rocksdb.Cache;
import org.rocksdb.WriteBufferManager;

/** Flink's write-buffer manager for a slot, whose close takes the resize lock. */
final class ResizableWriteBufferManager extends WriteBufferManager {
    private final ResizeAgent agent;

    ResizableWriteBufferManager(long bytes, Cache cache, ResizeAgent agent) {
        super(bytes, cache);
        this.agent = agent;
    }

    @Override
    public void close() {
        agent.close(this, super::close);
    }
}
