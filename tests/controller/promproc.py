"""A real Prometheus process (Debian's binary) on a free loopback port, for tests."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import requests
import yaml


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrometheusProcess:
    """Started on construction; `stop()` and `start()` again keep the same port and data."""

    def __init__(self, workdir: Path, scrape_configs: list[dict[str, Any]],
                 interval_s: float = 5) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("'prometheus' is missing: apt-get install prometheus")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": f"{interval_s:g}s",
                       "evaluation_interval": f"{interval_s:g}s"},
            "scrape_configs": scrape_configs,
        }))
        self.args = [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
                     f"--web.listen-address=127.0.0.1:{self.port}"]
        self.log_path = workdir / "prometheus.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.ready_at = 0.0
        self.start()

    def start(self) -> None:
        with self.log_path.open("a") as log:
            self.process = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    self.ready_at = time.time()  # its scrapes start from here
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"Prometheus did not become ready; see {self.log_path}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=20)
            self.process = None
