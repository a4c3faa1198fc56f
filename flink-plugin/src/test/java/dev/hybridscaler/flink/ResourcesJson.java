package dev.hybridscaler.flink;

import java.util.Locale;

/** Builds values of {@code hybridscaler.operator-resources} for tests and the benchmark. */
final class ResourcesJson {
    private ResourcesJson() {}

    /** One entry: {@code "uid": {"cpuCores": .., "taskHeapMb": .., "managedMemoryMb": ..}}. */
    static String entry(String uid, double cpu, int heapMb, int managedMb) {
        return String.format(Locale.ROOT,
                "\"%s\": {\"cpuCores\": %s, \"taskHeapMb\": %d, \"managedMemoryMb\": %d}",
                uid, cpu, heapMb, managedMb);
    }

    /** An entry that puts the operator in the named slot sharing group {@code group}. */
    static String entry(String uid, double cpu, int heapMb, int managedMb, String group) {
        return String.format(Locale.ROOT,
                "\"%s\": {\"cpuCores\": %s, \"taskHeapMb\": %d, \"managedMemoryMb\": %d,"
                        + " \"slotSharingGroup\": \"%s\"}",
                uid, cpu, heapMb, managedMb, group);
    }

    static String json(String... entries) {
        return "{" + String.join(", ", entries) + "}";
    }
}
