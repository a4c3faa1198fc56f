package dev.hybridscaler.flink.resize;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Locale;

/**
 * The native shim (src/main/native/resize_shim.c, built from source by the Maven build): calls
 * the RocksDB C API inside the RocksDB JNI library that Flink already loaded. Handles are
 * RocksJava {@code getNativeHandle()} values; callers must hold {@link ResizeAgent}'s lock so the
 * object cannot be closed during a call.
 */
final class NativeResize {
    /** Where the build puts the shim inside the jar, per CPU architecture. */
    static final String RESOURCE = "/native/linux-%s/libhybridscaler_resize.so";

    private NativeResize() {}

    /**
     * Binds the C API of the loaded JNI library whose file name starts with {@code library}
     * ({@code librocksdbjni} or {@code libforstjni}): null on success, else why not. Binds once
     * per JVM; a later call for another library is refused.
     */
    static native String bind(String library);

    /** The path of the bound JNI library, null before {@link #bind(String)} succeeded. */
    static native String library();

    /** Whether the bound library exports write-buffer-manager resizing (not 6.20.3). */
    static native boolean canResizeWriteBuffers();

    /**
     * Null when the handle has the layout the C API assumes (its object has the vtable of an
     * LRUCache the C API creates itself), else why not; reads memory without faulting.
     */
    static native String verifyCacheHandle(long cacheHandle);

    static native long cacheCapacity(long cacheHandle);

    static native boolean setCacheCapacity(long cacheHandle, long bytes);

    /** -1 where the library cannot read it. */
    static native long writeBufferSize(long writeBufferManagerHandle);

    static native boolean setWriteBufferSize(long writeBufferManagerHandle, long bytes);

    /**
     * Loads the shim from this jar into the JVM, once. Null on success, else why not. Loading is
     * refused from a job's classloader: a native library can belong to one classloader only, so a
     * copy in the job jar would fail again after the job restarts, and a registry per job could
     * not see the other slots of the TaskManager.
     */
    static synchronized String load() {
        if (!attempted) {
            attempted = true;
            loadFailure = loadOnce();
        }
        return loadFailure;
    }

    /** Once per JVM: a second copy would have its own, unbound, function pointers. */
    private static boolean attempted;
    private static String loadFailure;

    private static String loadOnce() {
        ClassLoader own = NativeResize.class.getClassLoader();
        if (!isSystemOrAncestor(own)) {
            return "dev.hybridscaler.flink.resize was loaded by " + own
                    + ", not by the TaskManager's system classloader: put the plugin jar into Flink's"
                    + " lib/ and add dev.hybridscaler.flink.resize. to"
                    + " classloader.parent-first-patterns.additional";
        }
        String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
        if (!os.contains("linux")) {
            return "the resize shim is built for Linux only, not " + os;
        }
        String resource = String.format(RESOURCE, System.getProperty("os.arch"));
        try (InputStream in = NativeResize.class.getResourceAsStream(resource)) {
            if (in == null) {
                return "this jar has no " + resource + " (built on another architecture?)";
            }
            Path file = Files.createTempFile("hybridscaler-resize-", ".so");
            file.toFile().deleteOnExit();
            Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
            System.load(file.toString());
            return null;
        } catch (IOException | UnsatisfiedLinkError | SecurityException e) {
            return "cannot load " + resource + ": " + e;
        }
    }

    private static boolean isSystemOrAncestor(ClassLoader own) {
        for (ClassLoader c = ClassLoader.getSystemClassLoader(); c != null; c = c.getParent()) {
            if (c == own) {
                return true;
            }
        }
        return own == null;
    }
}
