package dev.hybridscaler.flink;

import org.apache.flink.api.common.operators.SlotSharingGroup;

/**
 * What one task of an operator's slot-sharing group gets: the value of one entry of {@code
 * hybridscaler.operator-resources} (see docs/flink-contract.md).
 *
 * @param cpuCores CPU cores, &gt; 0
 * @param taskHeapMb task heap in MiB, &gt; 0 (Flink rejects a zero heap for a group)
 * @param managedMemoryMb managed memory in MiB, &ge; 0; RocksDB's block cache is (3 - r)/3 of it
 * @param slotSharingGroup the named group the operator shares with every operator of the same
 *     name (the resources are then one slot of that group), or {@code null}: a group of its own
 */
public record OperatorResources(
        double cpuCores, int taskHeapMb, int managedMemoryMb, String slotSharingGroup) {

    /** An entry without {@code slotSharingGroup}: the operator's chain gets a group of its own. */
    public OperatorResources(double cpuCores, int taskHeapMb, int managedMemoryMb) {
        this(cpuCores, taskHeapMb, managedMemoryMb, null);
    }

    /** Whether one slot of {@code other} has the same CPU, heap and managed memory. */
    boolean sameSlot(OperatorResources other) {
        return Double.compare(cpuCores, other.cpuCores) == 0
                && taskHeapMb == other.taskHeapMb
                && managedMemoryMb == other.managedMemoryMb;
    }

    /** The slot's resources as the error messages show them. */
    String slot() {
        return "{cpuCores " + cpuCores + ", taskHeapMb " + taskHeapMb + ", managedMemoryMb "
                + managedMemoryMb + "}";
    }

    /** A slot-sharing group with exactly these resources. */
    SlotSharingGroup toSlotSharingGroup(String name) {
        return SlotSharingGroup.newBuilder(name)
                .setCpuCores(cpuCores)
                .setTaskHeapMemoryMB(taskHeapMb)
                .setManagedMemoryMB(managedMemoryMb)
                .build();
    }
}
