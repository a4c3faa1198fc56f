"""bench.pricing runs end to end (one seed, the smallest size): it once broke silently
when the pod bills were unified, since nothing ran it."""

from __future__ import annotations

import sys

import pytest

from bench import pricing


def test_the_pricing_bench_prints_its_table(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(pricing, "SIZES", (10,))
    monkeypatch.setattr(sys, "argv", ["bench.pricing", "--quick"])
    pricing.main()
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 10 |")]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[4] == "1/1"  # proven for 10 tasks
    assert float(cells[5]) > 0  # price now / before
    assert len(cells) == 8  # the planner's choice, with and without planned CPU
    assert all(float(t) > 0 for t in cells[7].split(","))
