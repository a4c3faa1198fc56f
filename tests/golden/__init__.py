"""Golden samples of real Flink responses, kept in the repository so tests never
depend on anything outside it (tests/golden/flink-1.20/README.md says how they were made)."""

from pathlib import Path

FLINK_1_20 = Path(__file__).resolve().parent / "flink-1.20"
FLINK_2_2 = Path(__file__).resolve().parent / "flink-2.2"
