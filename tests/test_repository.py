"""Facts about the repository itself: a user's clone must not depend on this machine."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Absolute paths of a developer machine, and the sibling folder the developers keep their
# notes in: a clone has neither. Copy what a test needs into the repository instead.
# (Spelled in pieces so that this file does not name them itself.)
_MACHINE_ROOTS = "|".join(f"/{d}/" for d in ("work", "farm"))
OUTSIDE = re.compile(
    rf"(?<![\w.])({_MACHINE_ROOTS}|/home/\w+/|/root/(?!\.m2|\.cache)|\.\./{'shared'}/)"
)


def tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    this = Path(__file__).resolve()
    return [ROOT / n for n in names if n and (ROOT / n).is_file() and ROOT / n != this]


def test_no_tracked_file_names_a_path_outside_the_repository() -> None:
    offenders = []
    for path in tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # images and other binaries
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not offenders, "paths outside the repository:\n" + "\n".join(offenders)


def test_the_check_catches_what_it_claims() -> None:
    shared = "shared"
    for bad in (f"/work/{shared}/x", f"see ../{shared}/ARCHITECTURE.md", "/farm" + "/bin",
                "/home/alice/x"):
        assert OUTSIDE.search(bad), bad
    for good in ("tests/golden/flink-1.20", "~/.cache/flink-hybrid-scaler", "/tmp/x",
                 "2 shared cores", "/usr/bin/prometheus"):
        assert not OUTSIDE.search(good), good
