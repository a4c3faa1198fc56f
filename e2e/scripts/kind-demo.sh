#!/usr/bin/env bash
# `make demo KIND=1`: a kind cluster built here, the chart installed as
# docs/install.md says (two replicas, the image built by image.sh), a policy next
# to a FlinkDeployment, and what a user sees: the pods, kopf's peering, the
# controller's metrics through its Service, and `kubectl describe hsp`.
# No JobManager runs behind the FlinkDeployment, so the controller's verdict is
# JobUnavailable: that is the pass stopping at collect, as it should.
# `bash e2e/scripts/kind.sh down` removes the cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN="${HYBRID_SCALER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flink-hybrid-scaler}/bin"
say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

say "kind cluster (node image, controller image, cluster; cached after the first run)"
KUBECONFIG="$(bash e2e/scripts/kind.sh up)"; export KUBECONFIG
kubectl get nodes -o wide
crd="$(.venv/bin/python -c 'from e2e.stack import flink_crd; print(flink_crd())')"
kubectl apply --server-side --force-conflicts -f "$crd" >/dev/null

say "helm install hybrid-scaler charts/hybrid-scaler (replicas=2)"
"$BIN/helm" upgrade --install hybrid-scaler charts/hybrid-scaler \
  --namespace hybrid-scaler-system --create-namespace --wait --timeout 10m \
  --set image.repository=localhost/hybrid-scaler --set replicas=2
kubectl -n hybrid-scaler-system get pods -o wide

say "a FlinkDeployment and its HybridScalingPolicy (Recommend)"
kubectl create namespace flink-apps --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl apply -f - <<'YAML'
apiVersion: flink.apache.org/v1beta1
kind: FlinkDeployment
metadata: {name: q11, namespace: flink-apps}
spec:
  image: flink:1.20
  flinkVersion: v1_20
  serviceAccount: flink
  jobManager: {resource: {cpu: 1, memory: 1024m}}
  taskManager: {resource: {cpu: 1, memory: 2048m}}
  job: {jarURI: "local:///opt/flink/job.jar", parallelism: 2, upgradeMode: savepoint}
---
apiVersion: hybridscaler.dev/v1alpha1
kind: HybridScalingPolicy
metadata: {name: q11, namespace: flink-apps}
spec:
  targetRef: {apiVersion: flink.apache.org/v1beta1, kind: FlinkDeployment, name: q11}
  mode: Recommend
YAML
for _ in $(seq 60); do
  reason="$(kubectl -n flink-apps get hsp q11 -o jsonpath='{.status.conditions[?(@.type=="Ready")].reason}' 2>/dev/null || true)"
  [ -n "$reason" ] && break
  sleep 2
done

say "kopf's peering: both pods, one active"
kubectl get clusterkopfpeering hybrid-scaler -o jsonpath='{.status}'; echo
say "the controller's own metrics, through its Service"
kubectl get --raw /api/v1/namespaces/hybrid-scaler-system/services/hybrid-scaler-metrics:9464/proxy/metrics \
  | grep -E '^hybridscaler_(workers|evaluations|errors)' | head -8
say "kubectl describe hsp q11 -n flink-apps"
kubectl -n flink-apps describe hsp q11
echo
echo "KUBECONFIG=$KUBECONFIG; remove the cluster with: bash e2e/scripts/kind.sh down"
