"""The controller image, built here from ./Dockerfile by e2e/scripts/image.sh.

No registry is needed: podman builds the Dockerfile on a Debian base made by
debootstrap, with a local wheelhouse (docs/e2e.md, "The controller image"). The
image then runs the way the chart runs it: as its numeric non-root user, with a
read-only root file system, no capabilities, no network and a tmpfs on /tmp.

Where containers cannot run at all, the build fails and these tests fail with the
script's explanation of why and how to fix it; they never skip.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

# The first build runs debootstrap and fills the wheelhouse: minutes, not seconds.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.containers,
              pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parent.parent
CHART_VALUES = ROOT / "charts" / "hybrid-scaler" / "values.yaml"
# Measured 713 MB: a 159 MB Debian base and a 559 MB virtualenv (kubernetes' client
# 126 MB, pandas 84, OR-Tools 80, numpy 73). A limit, so that a build tool, a pip
# cache or the wheelhouse reaching the final stage shows.
MAX_IMAGE_MB = 900


def podman(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def image() -> str:
    done = subprocess.run(["bash", str(ROOT / "e2e" / "scripts" / "image.sh")],
                          capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, f"building the controller image failed:\n{done.stderr[-4000:]}"
    return done.stdout.strip().splitlines()[-1]


def run_as_the_chart_does(image: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`podman run` with the chart's pod and container security context."""
    values = yaml.safe_load(CHART_VALUES.read_text())
    pod, ctr = values["podSecurityContext"], values["operatorSecurityContext"]
    assert ctr["readOnlyRootFilesystem"] is True and ctr["capabilities"]["drop"] == ["ALL"]
    return podman(
        "run", "--rm", "--pull=never", "--network=none", "--read-only",
        "--cap-drop=ALL", "--security-opt=no-new-privileges",
        "--user", f"{pod['runAsUser']}:{pod['runAsGroup']}",
        "--tmpfs", "/tmp:rw,size=64m", image, *args,
    )


def test_the_image_runs_hybrid_scaler_help(image: str) -> None:
    done = run_as_the_chart_does(image, "--help")
    assert done.returncode == 0, done.stderr
    for command in ("run", "simulate"):
        assert f" {command} " in done.stdout, f"`{command}` missing from --help:\n{done.stdout}"


def test_the_image_user_size_and_entrypoint(image: str) -> None:
    [info] = json.loads(podman("image", "inspect", image).stdout)
    config = info["Config"]
    values = yaml.safe_load(CHART_VALUES.read_text())["podSecurityContext"]
    # Numeric, so that the kubelet can enforce runAsNonRoot without /etc/passwd.
    assert config["User"] == f"{values['runAsUser']}:{values['runAsGroup']}"
    assert config["Entrypoint"] == ["hybrid-scaler"] and config["Cmd"] == ["run"]
    assert {"8080/tcp", "9464/tcp"} <= set(config.get("ExposedPorts", {}))
    size_mb = info["Size"] / 2**20
    assert 50 < size_mb < MAX_IMAGE_MB, f"image is {size_mb:.0f} MB"
    # Nothing of the build reaches the final image: no pip cache, no wheelhouse.
    done = run_as_the_chart_does(image, "--help")
    assert done.returncode == 0
    probe = podman("run", "--rm", "--pull=never", "--network=none", "--read-only",
                   "--entrypoint", "/bin/sh", image, "-c",
                   "id -u; test -e /wheels && echo wheels; test -d /src && echo src;"
                   " test -w / && echo writable-root; echo done")
    assert probe.stdout.split() == [str(values["runAsUser"]), "done"], probe.stdout + probe.stderr


def test_the_solver_and_the_twin_work_in_the_image(image: str) -> None:
    # OR-Tools' native library, numpy and the packaged job models: a closed loop of
    # the controller's own pass on the twin, inside the container. Seeded, so the
    # image must compute exactly what this source tree computes.
    args = ["simulate", "--job", "q1", "--policy", "justin", "--duration", "5m", "--json"]
    done = run_as_the_chart_does(image, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    cli = "import sys; from controller.cli import app; app(sys.argv[1:])"
    here = subprocess.run([sys.executable, "-c", cli, *args],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert here.returncode == 0, here.stderr[-3000:]
    in_image, in_tree = json.loads(done.stdout), json.loads(here.stdout)
    assert in_image["policies"]["justin"]["converged"] is True
    assert in_image == in_tree
