"""`hybrid-scaler` commands, run in-process with Typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from controller import crd
from controller.cli import app
from policies.decision import Action, Branch, Decision

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RECORDED = EXAMPLES / "recorded" / "q11-memory-pressure.yaml"
COUNT = "90bea66de1c231edf33913ecd54406c1"

runner = CliRunner()


def test_help_lists_the_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("crd", "validate", "explain"):
        assert command in result.output


def test_crd_prints_the_generated_crd() -> None:
    result = runner.invoke(app, ["crd"])
    assert result.exit_code == 0
    assert result.output == crd.crd_yaml()
    assert yaml.safe_load(result.output)["kind"] == "CustomResourceDefinition"


def test_validate_accepts_the_examples() -> None:
    files = sorted(str(p) for p in EXAMPLES.glob("*.yaml"))
    result = runner.invoke(app, ["validate", *files])
    assert result.exit_code == 0, result.output
    assert result.output.count(": ok: ") == len(files)


def test_validate_rejects_the_invalid_example_naming_fields() -> None:
    result = runner.invoke(app, ["validate", str(EXAMPLES / "invalid" / "invalid-policy.yaml")])
    assert result.exit_code == 1
    assert "invalid" in result.output
    assert "spec.targetRef.kind: must be FlinkDeployment" in result.output
    assert "spec.memory.maxLevel:" in result.output


def test_validate_rejects_a_task_manager_flink_cannot_start(tmp_path: Path) -> None:
    doc = yaml.safe_load((EXAMPLES / "minimal.yaml").read_text())
    doc["spec"]["taskManager"] = {"shapes": [{"cpu": 2, "memory": "4Gi", "slots": 2},
                                             {"cpu": 1, "memory": "512Mi", "slots": 1}]}
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 1
    assert "spec.taskManager.shapes[1].memory: must be at least 1Gi" in result.output
    assert "shapes[0]" not in result.output


def test_validate_reports_each_document_of_a_multi_document_file(tmp_path: Path) -> None:
    good = (EXAMPLES / "minimal.yaml").read_text()
    target = "targetRef:\n    name: q11\n"
    bad = good.replace(target, target + "  mode: Sometimes\n")
    assert bad != good
    path = tmp_path / "two.yaml"
    path.write_text(good + "---\n" + bad)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 1
    assert f"{path}: ok" in result.output
    assert "(document 2): invalid" in result.output and "spec.mode" in result.output


def test_explain_tells_why_the_counter_scales_up() -> None:
    result = runner.invoke(app, ["explain", str(RECORDED)])
    assert result.exit_code == 0, result.output
    assert "Session Window Count (q11)" in result.output
    assert "scale-up: parallelism 4 -> 4, memory level 0 -> 1" in result.output
    assert "branch memory-pressure" in result.output
    assert "strip-memory" in result.output
    assert "Recommend mode: the controller would record it and patch nothing" in result.output


def test_explain_json_is_a_decision() -> None:
    result = runner.invoke(app, ["explain", "--json", str(RECORDED)])
    assert result.exit_code == 0, result.output
    decision = Decision.model_validate(json.loads(result.output))
    count = decision.vertex(COUNT)
    assert (count.action, count.branch) == (Action.SCALE_UP, Branch.MEMORY_PRESSURE)
    assert count.cache_hit_rate is not None and count.cache_hit_rate < 0.8
    assert decision.step == 1 and decision.reconfigures


def test_the_second_recorded_step_scales_up_again_because_it_helped() -> None:
    recording = EXAMPLES / "recorded" / "q11-scale-up-helped.yaml"
    result = runner.invoke(app, ["explain", "--json", str(recording)])
    assert result.exit_code == 0, result.output
    decision = Decision.model_validate(json.loads(result.output))
    count = decision.vertex(COUNT)
    assert count.branch is Branch.SCALED_UP_HELPED
    assert (count.parallelism_after, count.memory_level_after) == (4, 2)
    assert decision.step == 2


def test_explain_continues_from_a_recorded_status(tmp_path: Path) -> None:
    """With the history of the scale-up in `status`, the same numbers read as 'no gain'."""
    first = Decision.model_validate(json.loads(
        runner.invoke(app, ["explain", "--json", str(RECORDED)]).output))
    doc = yaml.safe_load(RECORDED.read_text())
    for v in doc["graph"]["vertices"]:
        after = first.vertex(v["id"])
        v["parallelism"], v["memory_level"] = after.parallelism_after, after.memory_level_after
    history = [{
        "time": first.time, "step": first.step,
        "vertices": [{"vertexId": v.vertex_id, "parallelism": v.parallelism_after,
                      "memoryLevel": v.memory_level_after, "scaledUp": v.scaled_up,
                      "cacheHitRate": v.cache_hit_rate, "stateLatencyNs": v.state_latency_ns}
                     for v in first.vertices],
    }]
    doc["status"] = {"step": 1, "history": history, "lastReconfigurationTime": first.time}
    doc["time"] = first.time + 300
    path = tmp_path / "step2.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["explain", "--json", str(path)])
    assert result.exit_code == 0, result.output
    count = Decision.model_validate(json.loads(result.output)).vertex(COUNT)
    assert count.branch is Branch.SCALED_UP_NO_GAIN
    assert count.memory_level_after == 0


def test_explain_names_bad_fields_of_a_recording(tmp_path: Path) -> None:
    doc = yaml.safe_load(RECORDED.read_text())
    doc["policy"]["spec"]["cpu"] = {"utilizationMin": 0.9}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["explain", str(path)])
    assert result.exit_code == 1
    assert "spec.cpu" in result.output


def test_explain_names_a_hot_key_that_more_tasks_cannot_spread(tmp_path: Path) -> None:
    """The counter's busiest of 4 subtasks takes 70 % of the records and is saturated."""
    doc = yaml.safe_load(RECORDED.read_text())
    doc["observation"]["vertices"][COUNT].update(
        busy_ms_per_s=357.0, busy_ms_per_s_max=1000.0, records_in_per_s_max=28_000.0)
    path = tmp_path / "hot-key.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, ["explain", str(path)])
    assert result.exit_code == 0, result.output
    [line] = [x for x in result.output.splitlines() if x.startswith("skewed")]
    assert "more tasks cannot help" in line and "pre-aggregate" in line
    decision = Decision.model_validate(json.loads(
        runner.invoke(app, ["explain", "--json", str(path)]).output))
    [finding] = decision.skew
    assert finding.vertex_id == COUNT and finding.from_records and not finding.scale_out_helps
