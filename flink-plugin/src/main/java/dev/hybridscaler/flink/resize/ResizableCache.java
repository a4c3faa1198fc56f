package dev.hybridscaler.flink.resize;

import org.rocksdb.LRUCache;

/**
 * The LRU cache Flink would create for a slot (same arguments as Flink's default memory factory),
 * whose close takes the resize lock, so no resize can run on a freed handle.
 */
final class ResizableCache extends LRUCache {
    private final ResizeAgent agent;

    ResizableCache(long capacity, double highPriorityPoolRatio, ResizeAgent agent) {
        super(capacity, -1, false, highPriorityPoolRatio);
        this.agent = agent;
    }

    @Override
    public void close() {
        agent.close(this, super::close);
    }
}
