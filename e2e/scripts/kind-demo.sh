#!/usr/bin/env bash
# `make demo KIND=1`: a kind cluster built here, the chart installed as
# docs/install.md says (two replicas, the image built by image.sh), and the
# controller in its pod converging a twin job: q11, the same FlinkDeployment and
# policy as `make demo`'s. The twin (the stand-in for Flink and its operator) and
# a Prometheus scraping it run on the host, where the pods reach them
# (e2e/kind_twin.py). What a user sees: the pods, kopf's peering, the controller's
# metrics through its Service, and `kubectl describe hsp`.
# `bash e2e/scripts/kind.sh down` removes the cluster and stops the twin.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN="${HYBRID_SCALER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flink-hybrid-scaler}/bin"
RUN_DIR="${HYBRID_SCALER_KIND_DIR:-${XDG_RUNTIME_DIR:-/tmp}/hybrid-scaler-kind}"
PY=.venv/bin/python
export PATH="$BIN:$PATH"  # kubectl: the one bootstrap built, on a machine without one
say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

say "kind cluster (node image, controller image, cluster; cached after the first run)"
KUBECONFIG="$(bash e2e/scripts/kind.sh up)"; export KUBECONFIG
kubectl get nodes -o wide
crd="$($PY -c 'from e2e.stack import flink_crd; print(flink_crd())')"
kubectl apply --server-side --force-conflicts -f "$crd" >/dev/null

say "the twin and its Prometheus on the host, where the pods reach them"
$PY -m e2e.kind_twin stop --run-dir "$RUN_DIR/twin"  # an earlier demo's
values="$($PY -m e2e.kind_twin start --kubeconfig "$KUBECONFIG" --run-dir "$RUN_DIR/twin")"
cat "$values"

say "helm install hybrid-scaler charts/hybrid-scaler (replicas=2)"
"$BIN/helm" upgrade --install hybrid-scaler charts/hybrid-scaler \
  --namespace hybrid-scaler-system --create-namespace --wait --timeout 10m \
  --set image.repository=localhost/hybrid-scaler --set replicas=2 -f "$values"
# --wait counts replicas less maxUnavailable (1 of 2): wait for both pods.
kubectl -n hybrid-scaler-system rollout status deploy/hybrid-scaler --timeout=600s
kubectl -n hybrid-scaler-system get pods -o wide

say "q11 (a twin job) and its HybridScalingPolicy (Active, short windows)"
kubectl create namespace flink-apps --dry-run=client -o yaml | kubectl apply -f - >/dev/null
$PY -c '
import json
from e2e.demo import flink_deployment, policy
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
    flink_deployment("flink-apps", "q11"), policy("flink-apps", "q11", "q11")]}))' \
  | kubectl apply -f -

say "waiting until the controller in its pod has brought q11 to its target rate"
$PY -m e2e.kind_twin wait --run-dir "$RUN_DIR/twin" --job flink-apps/q11 --timeout 600
kubectl -n flink-apps get hsp q11

say "kopf's peering: both pods, one active"
kubectl get clusterkopfpeering hybrid-scaler -o jsonpath='{.status}'; echo
say "the controller's own metrics, through its Service"
kubectl get --raw /api/v1/namespaces/hybrid-scaler-system/services/hybrid-scaler-metrics:9464/proxy/metrics \
  | grep -E '^hybridscaler_(workers|evaluations|errors)' | head -8
say "kubectl describe hsp q11 -n flink-apps"
kubectl -n flink-apps describe hsp q11
echo
echo "KUBECONFIG=$KUBECONFIG; remove the cluster and the twin with: bash e2e/scripts/kind.sh down"
