#!/usr/bin/env bash
# Installs what the project needs, idempotently; slow artefacts are cached under
# ~/.cache/flink-hybrid-scaler (Go-built binaries) and ~/.m2 (Maven).
#   bootstrap.sh python  - the virtualenv in .venv with the project and dev tools
#   bootstrap.sh all     - that, plus apt packages and the e2e binaries
set -euo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"

python_env() {
  local stamp=.venv/.installed-$(sha1sum pyproject.toml | cut -c1-12)
  if [ ! -f "$stamp" ]; then
    echo "bootstrap: installing Python dependencies into .venv" >&2
    python3 -m venv .venv
    .venv/bin/pip install --quiet --upgrade pip >&2
    .venv/bin/pip install --quiet -e '.[dev]' >&2
    rm -f .venv/.installed-*; touch "$stamp"
  fi
}

apt_packages() {
  local missing=()
  command -v etcd >/dev/null || missing+=(etcd-server)
  command -v prometheus >/dev/null || missing+=(prometheus)
  command -v mvn >/dev/null || missing+=(maven)
  command -v java >/dev/null || missing+=(openjdk-17-jdk-headless)
  command -v go >/dev/null || missing+=(golang-go)
  # flink-plugin's resize shim (src/main/native) is compiled from source by its Maven build.
  command -v gcc >/dev/null || missing+=(gcc libc6-dev)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "bootstrap: apt-get install ${missing[*]}" >&2
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >&2
  fi
}

case "$what" in
  python) python_env ;;
  all) python_env; apt_packages; bash e2e/scripts/build-tools.sh all >/dev/null ;;
  *) echo "usage: bootstrap.sh [python|all]" >&2; exit 2 ;;
esac
