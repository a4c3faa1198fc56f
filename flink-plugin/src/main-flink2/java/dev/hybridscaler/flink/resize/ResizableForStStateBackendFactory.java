package dev.hybridscaler.flink.resize;

import org.apache.flink.configuration.IllegalConfigurationException;
import org.apache.flink.configuration.ReadableConfig;
import org.apache.flink.state.forst.ForStMemoryControllerUtils.ForStMemoryFactory;
import org.apache.flink.state.forst.ForStStateBackend;
import org.apache.flink.state.forst.ForStStateBackendFactory;
import org.apache.flink.runtime.state.StateBackendFactory;

import org.forstdb.Cache;
import org.forstdb.LRUCache;
import org.forstdb.WriteBufferManager;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.lang.reflect.Field;
import java.lang.reflect.Modifier;

/**
 * Flink 2.x's ForSt state backend, built exactly as {@code state.backend.type: forst} builds it
 * ({@link ForStStateBackendFactory}), except that every slot's block cache and write-buffer
 * manager are created by (and registered with) the TaskManager's {@link ResizeAgent}:
 *
 * <pre>
 * state.backend.type: dev.hybridscaler.flink.resize.ResizableForStStateBackendFactory
 * classloader.parent-first-patterns.additional: dev.hybridscaler.flink.resize.
 * hybridscaler.resize.token-file: /etc/hybridscaler/resize-token
 * </pre>
 *
 * <p>The hook. ForSt creates a slot's cache and write-buffer manager through its
 * {@link ForStMemoryFactory}, as RocksDB does through its {@code RocksDBMemoryFactory}, but Flink
 * 2.2.0's {@code ForStStateBackend} has no setter for it: the factory lives in the private final
 * field {@value #FIELD}, set to {@link ForStMemoryFactory#DEFAULT} by the public constructor and
 * copied by {@code configure}. No public or configuration-level hook reaches the caches: the
 * options factory ({@code state.backend.forst.options-factory}) runs before ForSt sets the slot's
 * cache into the table config, and the slot's shared resource is created inside ForSt under a
 * private id. So this factory writes that one field by reflection, pinned to what 2.2.0 has: the
 * field must exist under that name, be an instance field of type {@link ForStMemoryFactory} and
 * still hold {@link ForStMemoryFactory#DEFAULT}. If anything differs (another Flink version), the
 * job still starts, on ForSt's own caches, and resizing is <b>disabled</b> on the TaskManager
 * with the reason, so every resize request is refused with it and the controller restarts
 * instead.
 */
public final class ResizableForStStateBackendFactory implements StateBackendFactory<ForStStateBackend> {
    private static final Logger LOG = LoggerFactory.getLogger(ResizableForStStateBackendFactory.class);
    /** ForStStateBackend's memory-factory field in Flink 2.2.0 ({@code javap -p}). */
    static final String FIELD = "forStMemoryFactory";

    private final String field;

    public ResizableForStStateBackendFactory() {
        this(FIELD);
    }

    /** For tests: the field to write, to see the refusal when it is not there. */
    ResizableForStStateBackendFactory(String field) {
        this.field = field;
    }

    @Override
    public ForStStateBackend createFromConfig(ReadableConfig config, ClassLoader classLoader)
            throws IllegalConfigurationException {
        ControlServer.configure(config);
        ForStStateBackend backend = new ForStStateBackendFactory().createFromConfig(config, classLoader);
        String why = install(backend, field, new MemoryFactory());
        if (why != null) {
            // Loud, and not resizable: the job runs on ForSt's own caches, the endpoint refuses
            // every resize with this reason, and the controller restarts for memory steps.
            ResizeAgent agent = ResizeAgent.get();
            agent.disable("the ForSt memory hook is unusable: " + why);
            ControlServer.startOnce(agent);
        }
        return backend;
    }

    /**
     * Writes {@code factory} into the backend's memory-factory field. Null when done, else why
     * not (nothing was written).
     */
    static String install(Object backend, String fieldName, ForStMemoryFactory factory) {
        Class<?> type = backend.getClass();
        Field f;
        try {
            f = type.getDeclaredField(fieldName);
        } catch (NoSuchFieldException e) {
            return type.getName() + " has no field '" + fieldName
                    + "' (Flink 2.2.0 keeps its ForStMemoryFactory there): not the ForSt this plugin was built for";
        }
        if (Modifier.isStatic(f.getModifiers()) || f.getType() != ForStMemoryFactory.class) {
            return type.getName() + "." + fieldName + " is " + (Modifier.isStatic(f.getModifiers()) ? "static " : "")
                    + f.getType().getName() + ", not the instance field of type "
                    + ForStMemoryFactory.class.getName() + " Flink 2.2.0 has";
        }
        try {
            f.setAccessible(true);
            Object current = f.get(backend);
            if (current != ForStMemoryFactory.DEFAULT) {
                return type.getName() + "." + fieldName + " holds "
                        + (current == null ? "null" : current.getClass().getName())
                        + ", not ForSt's default memory factory: it is set by something else";
            }
            f.set(backend, factory);
            if (f.get(backend) != factory) {
                return "writing " + type.getName() + "." + fieldName + " had no effect";
            }
        } catch (ReflectiveOperationException | RuntimeException e) {
            return "cannot write " + type.getName() + "." + fieldName + ": " + e;
        }
        return null;
    }

    /**
     * ForSt's memory factory: the same objects as its default, registered with the agent. Called
     * once per slot, on the task thread that first needs the slot's ForSt memory.
     */
    static final class MemoryFactory implements ForStMemoryFactory {
        private static final long serialVersionUID = 1L;

        @Override
        public Cache createCache(long capacity, double highPriorityPoolRatio) {
            ResizeAgent agent = ResizeAgent.get();
            ResizableForStCache cache = new ResizableForStCache(capacity, highPriorityPoolRatio, agent);
            agent.register(cache, cache.getNativeHandle(), capacity, FORST);
            ControlServer.startOnce(agent);
            return cache;
        }

        @Override
        public WriteBufferManager createWriteBufferManager(long bytes, Cache cache) {
            ResizeAgent agent = ResizeAgent.get();
            ResizableForStWriteBufferManager wbm = new ResizableForStWriteBufferManager(bytes, cache, agent);
            agent.attach(wbm, wbm.getNativeHandle(), bytes, cache);
            return wbm;
        }

        @Override
        public String toString() {
            return "ResizableForStMemoryFactory";
        }
    }

    /** ForSt's RocksJava ({@code org.forstdb}, in libforstjni). */
    static final ResizeAgent.Flavour FORST = new ResizeAgent.Flavour() {
        @Override
        public String library() {
            return "libforstjni";
        }

        @Override
        public ResizeAgent.NativeObject newCache(long bytes) {
            LRUCache cache = new LRUCache(bytes);
            return new ResizeAgent.Scratch(cache, cache.getNativeHandle(), cache::close);
        }

        @Override
        public ResizeAgent.NativeObject newWriteBufferManager(long bytes, ResizeAgent.NativeObject cache) {
            WriteBufferManager wbm = new WriteBufferManager(bytes, (Cache) ((ResizeAgent.Scratch) cache).object());
            return new ResizeAgent.Scratch(wbm, wbm.getNativeHandle(), wbm::close);
        }

        @Override
        public String toString() {
            return "ForSt";
        }
    };
}
