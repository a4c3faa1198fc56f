package dev.hybridscaler.flink.resize;

import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.configuration.IllegalConfigurationException;
import org.apache.flink.configuration.ReadableConfig;
import org.apache.flink.runtime.state.StateBackend;
import org.apache.flink.runtime.state.StateBackendFactory;

import org.rocksdb.Cache;

import java.io.Serializable;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;

/**
 * Flink's embedded RocksDB state backend, configured exactly as {@code state.backend.type:
 * rocksdb} would configure it, except that every slot's block cache and write-buffer manager are
 * created by (and registered with) the TaskManager's {@link ResizeAgent}. Enable it from the
 * configuration alone:
 *
 * <pre>
 * state.backend.type: dev.hybridscaler.flink.resize.ResizableRocksDBStateBackendFactory
 * classloader.parent-first-patterns.additional: dev.hybridscaler.flink.resize.
 * hybridscaler.resize.token-file: /etc/hybridscaler/resize-token
 * </pre>
 *
 * <p>The hook is Flink's public {@code EmbeddedRocksDBStateBackend#setRocksDBMemoryFactory}
 * (1.20 and 2.x). Its package differs between the two lines, so it is reached by reflection and
 * the one jar serves both.
 */
public final class ResizableRocksDBStateBackendFactory implements StateBackendFactory<StateBackend> {

    /** Address the control endpoint binds; the pod IP or 0.0.0.0 for the controller to reach it. */
    public static final ConfigOption<String> BIND_ADDRESS =
            ConfigOptions.key("hybridscaler.resize.bind-address").stringType().defaultValue("127.0.0.1")
                    .withDescription("Address of the TaskManager's resize endpoint.");

    public static final ConfigOption<Integer> PORT =
            ConfigOptions.key("hybridscaler.resize.port").intType().defaultValue(9260)
                    .withDescription("Port of the TaskManager's resize endpoint.");

    /** Without a token the endpoint is not started: nobody may resize without one. */
    public static final ConfigOption<String> TOKEN_FILE =
            ConfigOptions.key("hybridscaler.resize.token-file").stringType().noDefaultValue()
                    .withDescription("File holding the shared secret (e.g. a mounted Secret) a caller"
                            + " must send as 'Authorization: Bearer <token>'.");

    private static final String[] BACKENDS = {
        "org.apache.flink.state.rocksdb.EmbeddedRocksDBStateBackend", // Flink 2.x
        "org.apache.flink.contrib.streaming.state.EmbeddedRocksDBStateBackend", // Flink 1.x
    };

    @Override
    public StateBackend createFromConfig(ReadableConfig config, ClassLoader classLoader)
            throws IllegalConfigurationException {
        ControlServer.configure(config);
        Class<?> backendClass = backendClass();
        try {
            Object backend = backendClass.getConstructor().newInstance();
            backend = backendClass.getMethod("configure", ReadableConfig.class, ClassLoader.class)
                    .invoke(backend, config, classLoader);
            Method setter = null;
            for (Method m : backendClass.getMethods()) {
                if (m.getName().equals("setRocksDBMemoryFactory") && m.getParameterCount() == 1) {
                    setter = m;
                }
            }
            if (setter == null) {
                throw new IllegalConfigurationException(backendClass.getName()
                        + " has no setRocksDBMemoryFactory: this Flink cannot resize in place");
            }
            Class<?> factoryType = setter.getParameterTypes()[0];
            setter.invoke(backend, Proxy.newProxyInstance(factoryType.getClassLoader(),
                    new Class<?>[] {factoryType}, new MemoryFactory()));
            return (StateBackend) backend;
        } catch (ReflectiveOperationException e) {
            Throwable cause = e instanceof InvocationTargetException ? e.getCause() : e;
            if (cause instanceof IllegalConfigurationException) {
                throw (IllegalConfigurationException) cause;
            }
            throw new IllegalConfigurationException("cannot create the RocksDB state backend", cause);
        }
    }

    private static Class<?> backendClass() {
        for (String name : BACKENDS) {
            try {
                return Class.forName(name, true, ResizableRocksDBStateBackendFactory.class.getClassLoader());
            } catch (ClassNotFoundException next) {
                // try the other Flink line's name
            }
        }
        throw new IllegalConfigurationException("Flink's RocksDB state backend is not on the classpath");
    }

    /**
     * Flink's {@code RocksDBMemoryFactory}: the same objects as its default, registered with the
     * agent. Called once per slot, on the task thread that first needs the slot's RocksDB memory.
     */
    static final class MemoryFactory implements InvocationHandler, Serializable {
        private static final long serialVersionUID = 1L;

        @Override
        public Object invoke(Object proxy, Method method, Object[] args) {
            ResizeAgent agent = ResizeAgent.get();
            switch (method.getName()) {
                case "createCache": {
                    long capacity = (Long) args[0];
                    ResizableCache cache = new ResizableCache(capacity, (Double) args[1], agent);
                    agent.register(cache, cache.getNativeHandle(), capacity, ResizeAgent.ROCKSDB);
                    ControlServer.startOnce(agent);
                    return cache;
                }
                case "createWriteBufferManager": {
                    long bytes = (Long) args[0];
                    Cache cache = (Cache) args[1];
                    ResizableWriteBufferManager wbm = new ResizableWriteBufferManager(bytes, cache, agent);
                    agent.attach(wbm, wbm.getNativeHandle(), bytes, cache);
                    return wbm;
                }
                case "hashCode":
                    return System.identityHashCode(proxy);
                case "equals":
                    return proxy == args[0];
                case "toString":
                    return "ResizableRocksDBMemoryFactory";
                default:
                    throw new UnsupportedOperationException(method.toString());
            }
        }
    }
}
