"""Every condition and Event reason the controller can write is in docs/controller.md's
table, which users read to know what `kubectl describe` tells them."""

from __future__ import annotations

import re
from pathlib import Path

from controller.record import Reason

DOC = Path(__file__).resolve().parents[2] / "docs" / "controller.md"


def documented() -> set[str]:
    """The reasons named in the first cell of the table after "Every reason is a member"."""
    text = DOC.read_text(encoding="utf-8")
    table = text[text.index("Every reason is a member of"):].split("\n## ", 1)[0]
    rows = (line.split("|")[1] for line in table.splitlines() if line.startswith("| `"))
    return {name for cell in rows for name in re.findall(r"`(\w+)`", cell)}


def test_every_reason_is_in_the_table_and_every_row_is_a_reason() -> None:
    assert {r.value for r in Reason} - documented() == set()
    assert documented() - {r.value for r in Reason} == set()
