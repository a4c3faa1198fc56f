#!/usr/bin/env bash
# Builds the control-plane binaries from the Go module proxy and caches them.
# kube-apiserver, kube-scheduler and kube-controller-manager come from a
# throwaway module that requires k8s.io/kubernetes and replaces every staging
# module with its published v0.x twin (the upstream go.mod points them at
# ./staging, which a dependency cannot use). kwok and helm are plain installs.
# Re-running is cheap: a binary that exists is not rebuilt.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.32.3}"
# v1.32.3: a 1.32 patch whose staging modules the Go module proxy serves
# in full (v0.32.13 of kube-scheduler, cri-client and csi-translation-lib is 403).
KWOK_VERSION="${KWOK_VERSION:-v0.7.0}"
HELM_VERSION="${HELM_VERSION:-v3.16.4}"
# The kind tier (e2e/scripts/kind.sh): CoreDNS as kubeadm v1.32 deploys it, and kind.
COREDNS_VERSION="${COREDNS_VERSION:-v1.11.3}"
# etcd as kubeadm v1.32 probes it (/readyz is new in 3.5; Debian's 3.4 answers 404).
ETCD_VERSION="${ETCD_VERSION:-v3.5.16}"
KIND_VERSION="${KIND_VERSION:-v0.33.0}"
CACHE="${HYBRID_SCALER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flink-hybrid-scaler}"
BIN="$CACHE/bin"
mkdir -p "$BIN"

export GOSUMDB=off GOFLAGS=-mod=mod GOTOOLCHAIN=local
command -v go >/dev/null || { echo "build-tools: 'go' is not on PATH; install Go >= 1.23" >&2; exit 1; }

build_k8s() {
  local cmd="$1" out="$BIN/$1-$K8S_VERSION"
  [ -x "$out" ] && return 0
  local mod="${K8S_BUILD_MODULE:-$CACHE/k8s-build-$K8S_VERSION}"
  if [ ! -f "$mod/go.mod" ]; then
    mkdir -p "$mod"
    local staging="v0.${K8S_VERSION#v1.}"
    (cd "$mod"
     printf 'module hybridscaler.dev/k8sbuild\n\ngo 1.23\n\nrequire k8s.io/kubernetes %s\n' "$K8S_VERSION" > go.mod
     go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >/dev/null
     local upstream
     upstream="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.mod"
     grep -E '=> \./staging' "$upstream" | awk '{print $1}' | while read -r m; do
       go mod edit -replace "$m=$m@$staging"
     done
     # No 'go mod tidy': it would also resolve test-only imports, some of
     # whose staging versions the proxy does not serve. -mod=mod resolves
     # exactly what each build needs.
     )
  fi
  local gv="k8s.io/component-base/version"
  echo "build-tools: building $cmd $K8S_VERSION (first time only, several minutes)" >&2
  (cd "$mod" && go build -o "$out.tmp" \
     -ldflags "-s -w -X $gv.gitVersion=$K8S_VERSION -X $gv.gitMajor=1 -X $gv.gitMinor=${K8S_VERSION#v1.} -X $gv.gitTreeState=clean" \
     "k8s.io/kubernetes/cmd/$cmd")
  mv "$out.tmp" "$out"
}

# etcd's server module carries replace directives, so `go install` refuses it; a
# throwaway module that requires it builds it (replaces of a dependency are ignored).
build_etcd() {
  local out="$BIN/etcd-$ETCD_VERSION"
  [ -x "$out" ] && return 0
  local mod="$CACHE/etcd-build-$ETCD_VERSION"
  mkdir -p "$mod"
  printf 'module hybridscaler.dev/etcdbuild\n\ngo 1.23\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" > "$mod/go.mod"
  echo "build-tools: building etcd $ETCD_VERSION" >&2
  (cd "$mod" && go build -o "$out.tmp" -ldflags "-s -w" go.etcd.io/etcd/server/v3)
  mv "$out.tmp" "$out"
}

go_install() {
  local name="$1" pkg="$2" version="$3" out="$BIN/$1-$3"
  [ -x "$out" ] && return 0
  echo "build-tools: building $name $version" >&2
  local tmp; tmp="$(mktemp -d)"
  GOBIN="$tmp" go install -ldflags "-s -w" "$pkg@$version"
  mv "$tmp/$name" "$out"; rm -rf "$tmp"
}

what="${1:-all}"
case "$what" in
  all|k8s)
    build_k8s kube-apiserver
    build_k8s kube-scheduler
    build_k8s kube-controller-manager
    # The machine's kubectl serves when there is one (any 1.31-1.33 works).
    command -v kubectl >/dev/null || build_k8s kubectl ;;&
  all|kwok) go_install kwok sigs.k8s.io/kwok/cmd/kwok "$KWOK_VERSION" ;;&
  all|helm) go_install helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION" ;;&
  # Not in `all`: only the kind tier needs a node's binaries. They run in the
  # node (Debian bookworm, like this machine) and in images built on it.
  node)
    build_k8s kubelet
    build_k8s kubeadm
    build_k8s kube-proxy
    build_k8s kubectl  # the node's own; kind runs it there
    build_etcd
    go_install coredns github.com/coredns/coredns "$COREDNS_VERSION"
    go_install kind sigs.k8s.io/kind "$KIND_VERSION" ;;&
  all|k8s|kwok|helm|node) ;;
  *) echo "usage: build-tools.sh [all|k8s|kwok|helm|node]" >&2; exit 2 ;;
esac
# Stable names, so callers need not know versions.
for b in kube-apiserver kube-scheduler kube-controller-manager kubectl kubelet kubeadm kube-proxy; do
  [ -x "$BIN/$b-$K8S_VERSION" ] && ln -sf "$b-$K8S_VERSION" "$BIN/$b"
done
[ -x "$BIN/kwok-$KWOK_VERSION" ] && ln -sf "kwok-$KWOK_VERSION" "$BIN/kwok"
[ -x "$BIN/helm-$HELM_VERSION" ] && ln -sf "helm-$HELM_VERSION" "$BIN/helm"
[ -x "$BIN/coredns-$COREDNS_VERSION" ] && ln -sf "coredns-$COREDNS_VERSION" "$BIN/coredns"
[ -x "$BIN/kind-$KIND_VERSION" ] && ln -sf "kind-$KIND_VERSION" "$BIN/kind"
echo "$BIN"
