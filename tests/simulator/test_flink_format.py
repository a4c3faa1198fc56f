"""Flink's text quirks, reproduced: sanitising, Java number format, latency summaries."""

from __future__ import annotations

import pytest

from policies.model import estimate_mean_from_quantiles
from simulator.flink_format import (
    escape_html4,
    flink_memory_model,
    java_double,
    latency_quantiles,
    sanitize,
)


def test_sanitize_like_flinks_reporter():
    # ARCHITECTURE.md: "Stateful Counter [v2] é" -> Stateful_Counter__v2___ (runs kept)
    assert sanitize("Stateful Counter [v2] é") == "Stateful_Counter__v2___"
    assert sanitize("1bbf45ec-3770-4270") == "1bbf45ec_3770_4270"
    assert sanitize("Sink: Writer") == "Sink:_Writer"


def test_plan_descriptions_escape_like_flinks():
    # The golden plan.json: "Stateful Counter [v2] &eacute;", "Key Map: x -&gt; x % N".
    assert escape_html4("Stateful Counter [v2] é") == "Stateful Counter [v2] &eacute;"
    assert escape_html4("Key Map: x -> x % N") == "Key Map: x -&gt; x % N"
    assert escape_html4("a 'b' & \"c\"") == "a 'b' &amp; &quot;c&quot;"


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.0, "0.0"), (1000.0, "1000.0"), (28203.4, "28203.4"), (1.11848106e8, "1.11848106E8"),
     (2.68435456e8, "2.68435456E8"), (9.98134629e8, "9.98134629E8"), (1e7, "1.0E7"),
     (0.0001, "1.0E-4")],
)
def test_numbers_print_as_javas_double_tostring(value, text):
    assert java_double(value) == text


def test_latency_quantiles_let_the_controller_recover_the_mean():
    quantiles = latency_quantiles(20_000.0)
    assert list(quantiles) == [0.5, 0.75, 0.95, 0.98, 0.99, 0.999]
    assert list(quantiles.values()) == sorted(quantiles.values())
    estimate = estimate_mean_from_quantiles(quantiles)
    assert estimate is not None and estimate == pytest.approx(20_000.0, rel=1e-9)
    assert quantiles[0.999] > 4 * quantiles[0.5]  # a tail, as real latencies have


def test_taskmanager_memory_model_gives_the_papers_158_mb_slots():
    memory = flink_memory_model(2048)
    assert memory["managedMemory"] / 4 / 2**20 == pytest.approx(158.7, abs=0.1)
    assert memory["totalProcessMemory"] == 2048 * 2**20
    parts = ("frameworkHeap", "taskHeap", "frameworkOffHeap", "taskOffHeap", "networkMemory",
             "managedMemory")
    assert sum(memory[p] for p in parts) == pytest.approx(memory["totalFlinkMemory"], abs=2)


def test_gaps_and_stale_series_drop_out_of_the_scrape():
    from simulator.flink_format import DeployedJob, Scrape, add_job_metrics
    from simulator.model import Episodes, Noise, load_model
    from simulator.twin import Twin

    model = load_model("q3")
    noise = Noise.off().model_copy(update={
        "scrape_gaps": Episodes(per_hour=40, mean_s=30),
        "stale_series": Episodes(per_hour=40, mean_s=30)})
    twin = Twin(model.model_copy(update={"noise": noise}), seed=2)
    job = DeployedJob("ns", "q3", "j" * 32, "q3", 0, 4, 1, 4.0, 2048.0, 0)
    seen = {"whole job missing": 0, "a vertex missing": 0, "complete": 0}
    for _ in range(120):
        twin.advance(10)
        scrape = Scrape()
        add_job_metrics(scrape, job, twin, 0)
        text = scrape.render()
        tasks = {vid for vid in twin.configuration if f'task_id="{vid}"' in text}
        if not text:
            seen["whole job missing"] += 1
        elif len(tasks) < len(twin.configuration):
            seen["a vertex missing"] += 1
        else:
            seen["complete"] += 1
    assert all(seen.values()), seen
