"""The TaskManager memory split must match Flink 1.20 to the byte."""

import pytest

from packer.flink_memory import MIB, FlinkMemoryOptions, process_mib_for, task_manager_memory


def test_default_process_size_matches_flinks_log() -> None:
    # Flink's "Final TaskExecutor Memory configuration" for taskmanager.memory.process.size
    # 1728m (the flink-conf default): the odd bytes come from Java float fractions.
    memory = task_manager_memory(1728)
    assert memory.process == 1811939328
    assert memory.jvm_metaspace == 268435456
    assert memory.jvm_overhead == 201326592
    assert memory.total_flink == 1342177280
    assert memory.framework_heap == 134217728
    assert memory.framework_off_heap == 134217728
    assert memory.task_off_heap == 0
    assert memory.managed == 536870920
    assert memory.network == 134217730
    assert memory.task_heap == 402653174


def test_components_add_up_to_the_process_size() -> None:
    for process_mib in (1024, 1728, 4096, 8192, 16384, 65536):
        m = task_manager_memory(process_mib)
        parts = (m.jvm_metaspace + m.jvm_overhead + m.framework_heap + m.framework_off_heap
                 + m.task_heap + m.task_off_heap + m.managed + m.network)
        assert parts == m.process == process_mib * MIB


def test_capped_fraction_example_from_flinks_docs() -> None:
    # "Set up Flink's memory", capped fractionated components: 1000 MiB process memory,
    # overhead fraction 0.1 within [64 MiB, 128 MiB] gives 100 MiB (plus the one byte a
    # Java float 0.1 adds); with min 128 MiB it is 128 MiB.
    within = FlinkMemoryOptions(jvm_overhead_min_mib=64, jvm_overhead_max_mib=128)
    assert task_manager_memory(1000, within).jvm_overhead == 100 * MIB + 1
    raised = FlinkMemoryOptions(jvm_overhead_min_mib=128, jvm_overhead_max_mib=256)
    assert task_manager_memory(1000, raised).jvm_overhead == 128 * MIB


def test_large_task_manager_hits_the_overhead_and_network_caps() -> None:
    m = task_manager_memory(32768)
    assert m.jvm_overhead == 1024 * MIB
    assert m.network == 1024 * MIB
    assert m.total_flink == (32768 - 256 - 1024) * MIB
    assert abs(m.managed_mib - 0.4 * (32768 - 256 - 1024)) < 0.01


def test_small_task_manager_uses_the_minimums() -> None:
    m = task_manager_memory(1024)
    assert m.jvm_overhead == 192 * MIB
    assert m.network == 64 * MIB  # 0.1 × 576 MiB is below the 64 MiB minimum


def test_too_small_a_task_manager_is_refused_like_flink_does() -> None:
    with pytest.raises(ValueError, match="no task heap"):
        task_manager_memory(600)
    with pytest.raises(ValueError, match="metaspace and overhead"):
        task_manager_memory(400)


@pytest.mark.parametrize("flink_mib", [512.0, 1280.0, 1342.0, 3000.0, 6000.0, 20000.0])
def test_process_size_for_a_flink_size_is_the_inverse_of_the_split(flink_mib: float) -> None:
    """Below, within and above the overhead's [192 MiB, 1 GiB] clamp: splitting the process
    size found for a Flink size gives that Flink size back (to Flink's byte rounding)."""
    process = process_mib_for(flink_mib)
    no_cache = FlinkMemoryOptions(managed_fraction=0.0)  # so 512 MiB still leaves task heap
    assert task_manager_memory(process, no_cache).total_flink / MIB == pytest.approx(
        flink_mib, abs=1e-3)
    # 1728 MiB is Flink's default process size for its 1280 MiB of Flink memory.
    assert process_mib_for(1280) == pytest.approx(1728, abs=1e-9)


def test_fixed_memory_is_what_a_split_holds_besides_heap_managed_and_network() -> None:
    options = FlinkMemoryOptions(task_off_heap_mib=32)
    m = task_manager_memory(4096, options)
    assert (m.total_flink - m.task_heap - m.managed - m.network) / MIB == options.fixed_mib
