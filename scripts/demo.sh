#!/usr/bin/env bash
# README's main command (`make demo`): brings up the local stack, deploys a
# Nexmark-q11 FlinkDeployment (served by the twin) with a HybridScalingPolicy,
# runs the controller and shows `kubectl get/describe hsp` as it converges.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh all
if [ "${1:-}" = --real ]; then
  # Real Flink (make demo FLINK=real [FLINK_VERSION=2.2]): flink-plugin and the job
  # module built for that Flink (e2e/realflink.py, build_job), then the demo.
  shift
  exec .venv/bin/python -m e2e.demo_real --build "$@"
fi
if [ "${1:-}" = --kind ]; then
  # make demo KIND=1: the controller's image in real pods on a kind cluster built
  # here (e2e/scripts/kind.sh; docs/e2e.md, "The kind tier").
  shift
  exec bash e2e/scripts/kind-demo.sh "$@"
fi
exec .venv/bin/python -m e2e.demo "$@"
