package dev.hybridscaler.flink.resize;

import org.forstdb.LRUCache;

/**
 * The LRU cache ForSt would create for a slot (the arguments of Flink 2.2.0's
 * {@code ForStMemoryControllerUtils.createCache}), whose close takes the resize lock, so no resize
 * can run on a freed handle.
 */
final class ResizableForStCache extends LRUCache {
    private final ResizeAgent agent;

    ResizableForStCache(long capacity, double highPriorityPoolRatio, ResizeAgent agent) {
        super(capacity, -1, false, highPriorityPoolRatio);
        this.agent = agent;
    }

    @Override
    public void close() {
        agent.close(this, super::close);
    }
}
