package dev.hybridscaler.flink.resize;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.state.forst.ForStMemoryControllerUtils.ForStMemoryFactory;
import org.apache.flink.state.forst.ForStStateBackend;
import org.apache.flink.state.forst.ForStStateBackendFactory;

import org.junit.jupiter.api.Test;

import java.lang.reflect.Field;

/**
 * The pin on Flink 2.2.0's ForSt memory hook: the factory is written into exactly the field
 * 2.2.0 has, survives Flink's re-configuration of the backend, and anything else (no such field,
 * another type, a factory already set) is refused with a reason and writes nothing.
 */
class ForStMemoryHookTest {
    private static final ForStMemoryFactory OURS = new ResizableForStStateBackendFactory.MemoryFactory();

    private static ForStStateBackend forst() {
        return new ForStStateBackendFactory().createFromConfig(new Configuration(),
                ForStMemoryHookTest.class.getClassLoader());
    }

    private static Object field(Object backend) throws ReflectiveOperationException {
        Field f = ForStStateBackend.class.getDeclaredField(ResizableForStStateBackendFactory.FIELD);
        f.setAccessible(true);
        return f.get(backend);
    }

    @Test
    void writesTheMemoryFactoryThatFlinksReconfigurationKeeps() throws Exception {
        ForStStateBackend backend = forst();
        assertSame(ForStMemoryFactory.DEFAULT, field(backend));
        assertNull(ResizableForStStateBackendFactory.install(backend, ResizableForStStateBackendFactory.FIELD, OURS));
        assertSame(OURS, field(backend));
        // A job's configuration on top (Flink copies the backend in configure) keeps it.
        assertSame(OURS, field(backend.configure(new Configuration(), getClass().getClassLoader())));
    }

    @Test
    void aMissingFieldIsRefusedWithTheReason() throws Exception {
        ForStStateBackend backend = forst();
        assertEquals("org.apache.flink.state.forst.ForStStateBackend has no field 'memoryFactory' (Flink"
                        + " 2.2.0 keeps its ForStMemoryFactory there): not the ForSt this plugin was built for",
                ResizableForStStateBackendFactory.install(backend, "memoryFactory", OURS));
        assertSame(ForStMemoryFactory.DEFAULT, field(backend));
    }

    /** A backend whose field of that name has another type. */
    static final class AnotherBackend {
        @SuppressWarnings("unused")
        private final Object forStMemoryFactory = ForStMemoryFactory.DEFAULT;
    }

    @Test
    void aFieldOfAnotherTypeIsRefusedWithTheReason() {
        AnotherBackend other = new AnotherBackend();
        assertEquals(AnotherBackend.class.getName() + ".forStMemoryFactory is java.lang.Object, not the"
                        + " instance field of type " + ForStMemoryFactory.class.getName() + " Flink 2.2.0 has",
                ResizableForStStateBackendFactory.install(other, ResizableForStStateBackendFactory.FIELD, OURS));
    }

    @Test
    void aFactorySetBySomethingElseIsNotReplaced() throws Exception {
        ForStStateBackend backend = forst();
        assertNull(ResizableForStStateBackendFactory.install(backend, ResizableForStStateBackendFactory.FIELD, OURS));
        ForStMemoryFactory another = new ResizableForStStateBackendFactory.MemoryFactory();
        assertEquals("org.apache.flink.state.forst.ForStStateBackend.forStMemoryFactory holds "
                        + ResizableForStStateBackendFactory.MemoryFactory.class.getName()
                        + ", not ForSt's default memory factory: it is set by something else",
                ResizableForStStateBackendFactory.install(backend, ResizableForStStateBackendFactory.FIELD, another));
        assertSame(OURS, field(backend));
    }
}
