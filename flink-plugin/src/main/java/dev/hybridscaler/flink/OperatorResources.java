package dev.hybridscaler.flink;

import org.apache.flink.api.common.operators.SlotSharingGroup;

/**
 * What one task of an operator's slot-sharing group gets: the value of one entry of {@code
 * hybridscaler.operator-resources} (see docs/flink-contract.md).
 *
 * @param cpuCores CPU cores, &gt; 0
 * @param taskHeapMb task heap in MiB, &gt; 0 (Flink rejects a zero heap for a group)
 * @param managedMemoryMb managed memory in MiB, &ge; 0; RocksDB's block cache is (3 - r)/3 of it
 */
public record OperatorResources(double cpuCores, int taskHeapMb, int managedMemoryMb) {

    /** A slot-sharing group with exactly these resources. */
    SlotSharingGroup toSlotSharingGroup(String name) {
        return SlotSharingGroup.newBuilder(name)
                .setCpuCores(cpuCores)
                .setTaskHeapMemoryMB(taskHeapMb)
                .setManagedMemoryMB(managedMemoryMb)
                .build();
    }
}
