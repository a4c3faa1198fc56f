"""Render bench/results/rocksdb-fig4.json (from bench/rocksdb_fig4.sh) as the Markdown
table in docs/flink-plugin.md: records/s and cache hit ratio per workload, parallelism
and managed memory per task.

    python bench/rocksdb_fig4_table.py [path/to/rocksdb-fig4.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

DEFAULT = Path(__file__).parent / "results" / "rocksdb-fig4.json"


def table(doc: dict[str, Any]) -> str:
    rows = [
        "| workload | tasks | managed MB/task | cache MB/task | records/s | hit ratio "
        "| busyness | mean get latency µs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in doc["runs"]:
        hit = "–" if r["cacheHitRatio"] is None else f"{r['cacheHitRatio']:.2f}"
        latency = r["stateGetLatencyNsMean"]
        lat = "–" if latency is None else f"{latency / 1000:,.1f}"
        rows.append(
            f"| {r['workload']} | {r['parallelism']} | {r['managedMemoryMb']} "
            f"| {r['blockCacheBytesPerTask'] / 2**20:.1f} | {r['recordsPerSecond']:,.0f} "
            f"| {hit} | {r['busyness']:.2f} | {lat} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    print(table(json.loads(path.read_text())))
