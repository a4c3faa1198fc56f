#!/usr/bin/env bash
# Builds the controller image from ./Dockerfile with podman, without a registry.
#
# Where a registry exists, `docker build .` takes python:3.11-slim-bookworm and
# PyPI. Here neither is reachable from a build container, so the same Dockerfile
# gets two build arguments:
# - BASE: a Debian bookworm made by `debootstrap --variant=minbase` with Debian's
#   python3 (3.11) and python3-venv, imported into podman (no registry involved);
# - PIP_OPTS: "--no-index --find-links /wheels", a wheelhouse that pip fills on
#   the host and that podman mounts read-only into the build, which runs with
#   --network=none.
# Prints the image name. Cached under ~/.cache/flink-hybrid-scaler/image: the
# base's root file system as a tarball (re-imported if podman's store lost it)
# and the wheelhouse (keyed by pyproject.toml). Re-running rebuilds only the
# layers whose sources changed.
#   image.sh            build (or reuse) and print the image name
#   image.sh base       only the base image
#   image.sh clean      remove the images this script made (the caches stay)
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=containers.sh
. e2e/scripts/containers.sh

IMAGE="${HYBRID_SCALER_IMAGE:-localhost/hybrid-scaler:$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)}"
SUITE=bookworm
# What the controller needs at run time beyond minbase: Python, venv for the
# build stage, CA certificates for HTTPS to Prometheus, libstdc++ for OR-Tools.
BASE_PACKAGES=python3,python3-venv,ca-certificates,libstdc++6
CACHE_DIR="$FHS_CACHE/image"
BASE_KEY="$(printf '%s %s %s' "$SUITE" "$BASE_PACKAGES" v1 | sha1sum | cut -c1-10)"
BASE_IMAGE="localhost/hybrid-scaler-base:$SUITE-$BASE_KEY"
BASE_TAR="$CACHE_DIR/base-$SUITE-$BASE_KEY.tar"
log() { echo "image: $*" >&2; }

base_image() {
  podman image exists "$BASE_IMAGE" && return 0
  debootstrap_tar "$BASE_PACKAGES" "$BASE_TAR"
  log "importing $BASE_IMAGE"
  podman import --quiet --change 'CMD ["/bin/bash"]' "$BASE_TAR" "$BASE_IMAGE" >/dev/null
}

wheelhouse() {
  local py="${PYTHON:-.venv/bin/python}"
  [ -x "$py" ] || py=python3
  local key; key="$(cat pyproject.toml | sha1sum | cut -c1-10)"
  local dir="$CACHE_DIR/wheels-$key"
  if [ ! -f "$dir/.complete" ]; then
    log "filling the wheelhouse $dir"
    rm -rf "$dir"; mkdir -p "$dir"
    # The project's dependencies as wheels for CPython 3.11 on glibc (the base's
    # Python), plus the build backend pip needs to build the project offline.
    "$py" -m pip wheel --quiet --wheel-dir "$dir" . >&2
    "$py" -m pip download --quiet --only-binary=:all: --dest "$dir" "setuptools>=77" wheel >&2
    rm -f "$dir"/flink_hybrid_scaler-*.whl
    touch "$dir/.complete"
    find "$CACHE_DIR" -maxdepth 1 -name 'wheels-*' ! -name "wheels-$key" -exec rm -rf {} +
  fi
  echo "$dir"
}

# What the image is made of: the Dockerfile, what it copies, the base. An image
# labelled with the same key is reused as it is.
source_key() {
  { echo "$BASE_IMAGE"
    find Dockerfile .dockerignore pyproject.toml README.md policies packer controller simulator \
      -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha1sum
  } | sha1sum | cut -c1-16
}

build_image() {
  base_image
  local key; key="$(source_key)"
  if [ "$(podman image inspect --format '{{index .Labels "dev.hybridscaler.source-key"}}' "$IMAGE" 2>/dev/null)" = "$key" ]; then
    log "$IMAGE is up to date (source key $key)"
    return 0
  fi
  local wheels; wheels="$(wheelhouse)"
  log "podman build $IMAGE (base $BASE_IMAGE, offline)"
  podman build --quiet --network=none --pull=never \
    --label "dev.hybridscaler.source-key=$key" \
    --build-arg "BASE=$BASE_IMAGE" \
    --build-arg "PIP_OPTS=--no-index --find-links /wheels" \
    --volume "$wheels:/wheels:ro" \
    --tag "$IMAGE" . >/dev/null
  # The previous build's image, now untagged, and the build stage: gone (the
  # source key above, not podman's layer cache, makes re-runs cheap).
  podman image prune --force >/dev/null
}

containers_setup
case "${1:-build}" in
  build) build_image; echo "$IMAGE" ;;
  base) base_image; echo "$BASE_IMAGE" ;;
  clean) podman rmi --force "$IMAGE" "$BASE_IMAGE" >/dev/null 2>&1 || true
         podman image prune --force >/dev/null ;;
  *) echo "usage: image.sh [build|base|clean]" >&2; exit 2 ;;
esac
