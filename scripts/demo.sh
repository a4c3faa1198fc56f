#!/usr/bin/env bash
# README's main command (`make demo`): brings up the local stack, deploys a
# Nexmark-q11 FlinkDeployment (served by the twin) with a HybridScalingPolicy,
# runs the controller and shows `kubectl get/describe hsp` as it converges.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh all
exec .venv/bin/python -m e2e.demo "$@"
