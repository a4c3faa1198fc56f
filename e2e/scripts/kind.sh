#!/usr/bin/env bash
# The kind tier without a registry: a kind node image built here, a cluster from
# it, and the controller's image loaded into it (docs/e2e.md, "The kind tier").
#
#   kind.sh node-image   build (or reuse) the node image; prints its name
#   kind.sh up           node image, controller image, cluster, image loaded;
#                        prints the kubeconfig's path
#   kind.sh down         delete the cluster, stop a demo's twin (the images and
#                        caches stay)
#   kind.sh clean        down, and remove the images this script made
#
# The node image: Debian bookworm from debootstrap (systemd, containerd, runc,
# iptables, Debian's CNI plugins, catatonit, etcd), the kubelet, kubeadm, kubectl
# and the control plane built from the Go module proxy (build-tools.sh), the
# files in e2e/kind/node/, and the images kubeadm runs as a tarball that the node
# imports at boot:
#   kube-apiserver, -controller-manager, -scheduler, kube-proxy  our Go builds
#   etcd      built from its Go module (v3.5: kubeadm probes /readyz, which 3.4 lacks)
#   coredns   built from its Go module
#   pause     Debian's catatonit -P
# each on the node's own root file system as the base layer (one layer, shared).
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=containers.sh
. e2e/scripts/containers.sh

K8S_VERSION="${K8S_VERSION:-v1.32.3}"
CLUSTER="${HYBRID_SCALER_KIND_CLUSTER:-hybrid-scaler}"
SUITE=bookworm
NODE_PACKAGES=systemd,systemd-sysv,dbus,containerd,runc,iptables,conntrack,ethtool,socat,iproute2,ca-certificates,catatonit,containernetworking-plugins,procps,kmod,util-linux,mount,libseccomp2,ebtables,nftables
CACHE_DIR="$FHS_CACHE/kind"
BIN="$FHS_CACHE/bin"
RUN_DIR="${HYBRID_SCALER_KIND_DIR:-${XDG_RUNTIME_DIR:-/tmp}/hybrid-scaler-kind}"
KUBECONFIG_OUT="$RUN_DIR/kubeconfig"
ROOTFS_KEY="$(printf '%s %s v1' "$SUITE" "$NODE_PACKAGES" | sha1sum | cut -c1-10)"
ROOTFS_TAR="$CACHE_DIR/rootfs-$SUITE-$ROOTFS_KEY.tar"
ROOTFS_IMAGE="localhost/hybrid-scaler-kind-rootfs:$SUITE-$ROOTFS_KEY"
# The names kubeadm $K8S_VERSION asks containerd for (`kubeadm config images list`).
REG=registry.k8s.io
PAUSE_TAG=3.10
ETCD_TAG=3.5.16-0
ETCD_VERSION="${ETCD_VERSION:-v3.5.16}"
COREDNS_TAG=v1.11.3
log() { echo "kind.sh: $*" >&2; }
kind_cmd() { KIND_EXPERIMENTAL_PROVIDER=podman "$BIN/kind" "$@"; }

node_key() {
  { echo "$ROOTFS_KEY $K8S_VERSION $PAUSE_TAG $ETCD_TAG $COREDNS_TAG"
    find e2e/kind/node -type f -print0 | sort -z | xargs -0 sha1sum
    for b in kubelet kubeadm kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy coredns "etcd-$ETCD_VERSION"; do
      stat -L -c '%n %s %Y' "$BIN/$b"
    done
  } | sha1sum | cut -c1-12
}

rootfs() {
  debootstrap_tar "$NODE_PACKAGES" "$ROOTFS_TAR"
  podman image exists "$ROOTFS_IMAGE" \
    || podman import --quiet --change 'CMD ["/bin/sh"]' "$ROOTFS_TAR" "$ROOTFS_IMAGE" >/dev/null
}

# One image: the node's root file system and, if given, one binary (a file in
# $BIN) as /usr/local/bin/NAME.
component_image() {
  local tag="$1" binary="$2" name="$3" entrypoint="$4" ctx
  ctx="$(mktemp -d)"
  {
    echo "FROM $ROOTFS_IMAGE"
    if [ -n "$binary" ]; then
      cp -L "$BIN/$binary" "$ctx/$name"
      echo "COPY $name /usr/local/bin/$name"
    fi
    [ -n "$entrypoint" ] && echo "ENTRYPOINT $entrypoint"
  } > "$ctx/Containerfile"
  podman build --quiet --layers=false --network=none --pull=never --tag "$tag" "$ctx" >/dev/null
  rm -rf "$ctx"
}

# One build at a time: `make test` starts one in the background (scripts/test.sh)
# that the kind tier's own `up` then waits for. The lock's descriptor is closed
# before anything else runs: kind's containers (their conmon) would inherit it and
# hold the lock for the cluster's life.
node_image() {
  mkdir -p "$CACHE_DIR"
  exec 9>"$CACHE_DIR/.node-image.lock"
  flock 9
  build_node_image 9>&-
  exec 9>&-
}

build_node_image() {
  bash e2e/scripts/build-tools.sh node >/dev/null
  bash e2e/scripts/build-tools.sh k8s >/dev/null
  rootfs
  local key; key="$(node_key)"
  NODE_IMAGE="localhost/hybrid-scaler-kind-node:$K8S_VERSION-$key"
  if podman image exists "$NODE_IMAGE"; then return 0; fi
  log "building the node image $NODE_IMAGE"
  local tags=() c
  for c in kube-apiserver kube-controller-manager kube-scheduler kube-proxy; do
    component_image "$REG/$c:$K8S_VERSION" "$c" "$c" ""; tags+=("$REG/$c:$K8S_VERSION")
  done
  component_image "$REG/etcd:$ETCD_TAG" "etcd-$ETCD_VERSION" etcd ""; tags+=("$REG/etcd:$ETCD_TAG")
  component_image "$REG/coredns/coredns:$COREDNS_TAG" coredns coredns '["/usr/local/bin/coredns"]'
  tags+=("$REG/coredns/coredns:$COREDNS_TAG")
  component_image "$REG/pause:$PAUSE_TAG" "" "" '["/usr/bin/catatonit", "-P"]'
  tags+=("$REG/pause:$PAUSE_TAG")
  local ctx; ctx="$(mktemp -d "$CACHE_DIR/node.XXXXXX")"
  # shellcheck disable=SC2064
  trap "rm -rf '$ctx'" RETURN
  mkdir -p "$ctx/bin" "$ctx/images"
  for c in kubelet kubeadm kubectl; do cp -L "$BIN/$c" "$ctx/bin/$c"; done
  cp -a e2e/kind/node "$ctx/files"
  podman save --quiet --format docker-archive --multi-image-archive -o "$ctx/images/images.tar" "${tags[@]}"
  cat > "$ctx/Containerfile" <<EOF
FROM $ROOTFS_IMAGE
COPY bin/ /usr/bin/
COPY files/ /
COPY images/ /kind/images/
RUN echo "$K8S_VERSION" > /kind/version \\
 && systemctl enable containerd.service kubelet.service fhs-import-images.service \\
 && systemctl mask getty.target systemd-udevd.service systemd-udev-trigger.service 2>/dev/null || true
ENV container=podman
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
EOF
  # No intermediate layers, so nothing is left to prune: a prune here could remove
  # an intermediate image of image.sh's build running at the same time.
  podman build --quiet --layers=false --network=none --pull=never --tag "$NODE_IMAGE" "$ctx" >/dev/null
  # The component images live on inside the node image's tarball only; older
  # node images go.
  podman rmi "${tags[@]}" >/dev/null
  podman images --format '{{.Repository}}:{{.Tag}}' \
    | grep -E '^localhost/hybrid-scaler-kind-node:' | grep -vxF "$NODE_IMAGE" \
    | xargs -r podman rmi >/dev/null 2>&1 || true
}

up() {
  node_image
  local image; image="$(bash e2e/scripts/image.sh)"
  mkdir -p "$RUN_DIR"
  if kind_cmd get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    if podman exec "$CLUSTER-control-plane" true 2>/dev/null; then
      log "cluster $CLUSTER exists; reusing it"
    else
      # A run killed mid-way (or a reboot) leaves the container in podman's records
      # with nothing behind it; a kind node does not survive a restart reliably.
      log "cluster $CLUSTER exists but its node does not run; recreating it"
      kind_cmd delete cluster --name "$CLUSTER" >&2
    fi
  fi
  if ! kind_cmd get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    log "creating cluster $CLUSTER from $NODE_IMAGE"
    kind_cmd create cluster --name "$CLUSTER" --image "$NODE_IMAGE" \
      --config e2e/kind/cluster.yaml --kubeconfig "$KUBECONFIG_OUT" --wait 5m >&2
  fi
  kind_cmd get kubeconfig --name "$CLUSTER" > "$KUBECONFIG_OUT"
  log "loading $image"
  local archive="$RUN_DIR/controller-image.tar"
  podman save --quiet --format docker-archive -o "$archive" "$image"
  kind_cmd load image-archive "$archive" --name "$CLUSTER" >&2
  rm -f "$archive"
  echo "$KUBECONFIG_OUT"
}

down() {
  # The twin of `make demo KIND=1` (e2e/kind_twin.py), if one runs.
  if [ -f "$RUN_DIR/twin/kind-twin.json" ] && [ -x .venv/bin/python ]; then
    .venv/bin/python -m e2e.kind_twin stop --run-dir "$RUN_DIR/twin" || true
  fi
  kind_cmd delete cluster --name "$CLUSTER" >&2 || true
  # kind leaves its podman network behind; it goes unless another cluster uses it.
  podman network rm kind >/dev/null 2>&1 || true
  rm -rf "$RUN_DIR"
}

containers_setup
case "${1:-up}" in
  node-image) node_image; echo "$NODE_IMAGE" ;;
  up) up ;;
  down) down ;;
  clean) down
         podman images --format '{{.Repository}}:{{.Tag}}' | grep -E '^localhost/hybrid-scaler-kind-' \
           | xargs -r podman rmi --force >/dev/null ;;
  *) echo "usage: kind.sh [node-image|up|down|clean]" >&2; exit 2 ;;
esac
