"""The real-Flink benches' shared pieces that run without Flink: reading a TaskManager's
Prometheus text, and every bench's command line (the runs themselves need real Flink)."""

from __future__ import annotations

import importlib

import pytest
import typer
from typer.testing import CliRunner

from bench.realflink_common import of_counter, operator_total, parse

# As Flink's PrometheusReporter writes them (label sets shortened).
OP = "flink_taskmanager_job_task_operator_"
CHAIN = 'task_name="counter -> Sink: sink"'
TEXT = "\n".join([
    f"# HELP {OP}pendingRecords pendingRecords (scope: ...)",
    f"# TYPE {OP}pendingRecords gauge",
    f'{OP}pendingRecords{{operator_name="Source: keys",task_name="Source: keys",'
    'subtask_index="0",} 1200.0',
    f'{OP}pendingRecords{{operator_name="Source: keys",task_name="Source: keys",'
    'subtask_index="1",} 300.0',
    f'{OP}countMismatches{{operator_name="counter",{CHAIN},subtask_index="0",}} 0.0',
    f'{OP}numRecordsIn{{operator_name="counter",{CHAIN},subtask_index="0",}} 7.0',
    f'{OP}numRecordsIn{{operator_name="Sink: sink",{CHAIN},subtask_index="0",}} 7.0',
    f'flink_taskmanager_job_task_busyTimeMsPerSecond{{{CHAIN},subtask_index="0",}} 812.5',
    'flink_taskmanager_Status_JVM_CPU_Load{host="localhost",} NaN',
    "flink_jobmanager_numRunningJobs 1.0",
])


def test_parse_reads_every_labelled_series_and_skips_the_rest():
    samples = parse(TEXT)
    assert len(samples) == 7
    name, labels, value = samples[0]
    assert name == "flink_taskmanager_job_task_operator_pendingRecords"
    assert 'subtask_index="0"' in labels and value == 1200.0


def test_an_operator_metric_sums_over_subtasks_and_is_none_when_unreported():
    samples = parse(TEXT)
    assert operator_total(samples, "pendingRecords") == 1500.0
    assert operator_total(samples, "countMismatches") == 0.0  # reported as 0: not None
    assert operator_total(samples, "countsVerified") is None


def test_the_counter_is_its_operator_and_the_chain_it_heads():
    # The sink chained behind the counter is not the counter: its numRecordsIn, the
    # counter's output, would count each record twice.
    assert of_counter(parse(TEXT)) == [
        ("flink_taskmanager_job_task_operator_countMismatches", 0.0),
        ("flink_taskmanager_job_task_operator_numRecordsIn", 7.0),
        ("flink_taskmanager_job_task_busyTimeMsPerSecond", 812.5),
    ]


@pytest.mark.parametrize("module", ["realflink_steps", "realflink_resize", "realflink_warmup",
                                    "realflink_buffering"])
def test_every_real_flink_bench_parses_its_command_line(module: str):
    app = typer.Typer()
    app.command()(importlib.import_module(f"bench.{module}").main)
    done = CliRunner().invoke(app, ["--help"])
    assert done.exit_code == 0, done.output
    assert "--keys" in done.output and "--out" in done.output
    refused = CliRunner().invoke(app, ["--keys", "many"])
    assert refused.exit_code == 2, refused.output  # a usage error, before any JVM starts
