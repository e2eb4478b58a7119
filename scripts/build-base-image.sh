#!/usr/bin/env bash
# Build a local Debian bookworm + python3 base image for the vllm-diag Dockerfile, without pulling
# anything from a container registry: debootstrap (minbase) + python3 + python3-venv into a rootfs,
# packed into a tarball and `docker import`ed.
#
#   DOCKER_HOST=unix:///path/docker.sock bash scripts/build-base-image.sh [IMAGE]
#
# IMAGE defaults to vllm-diag-base:bookworm. Then build with
#   docker build --build-arg BASE_IMAGE=vllm-diag-base:bookworm -t vllm-diag .
#
# Cached twice, so CI pays for debootstrap once per machine:
#   1. the image already in the daemon -> nothing to do;
#   2. the rootfs tarball in $VLLM_DIAG_CACHE (default /var/cache/vllm-diag) -> `docker import` only.
# Set VLLM_DIAG_REBUILD_BASE=1 to ignore both. Needs root, debootstrap and a Debian mirror
# (DEBIAN_MIRROR, default http://deb.debian.org/debian). Prints how long each step took.
set -euo pipefail

IMAGE="${1:-vllm-diag-base:bookworm}"
SUITE="${DEBIAN_SUITE:-bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
CACHE="${VLLM_DIAG_CACHE:-/var/cache/vllm-diag}"
TARBALL="$CACHE/base-${SUITE}-python3.tar"
DOCKER="${DOCKER:-docker}"

log() { printf 'build-base-image: %s\n' "$*" >&2; }
t0=$(date +%s)

if [ "${VLLM_DIAG_REBUILD_BASE:-0}" != "1" ] && "$DOCKER" image inspect "$IMAGE" >/dev/null 2>&1; then
  log "$IMAGE already present in the daemon (0 s)"
  exit 0
fi

if [ "${VLLM_DIAG_REBUILD_BASE:-0}" = "1" ] || [ ! -s "$TARBALL" ]; then
  command -v debootstrap >/dev/null 2>&1 || { log "debootstrap is not installed (apt-get install -y debootstrap)"; exit 1; }
  [ "$(id -u)" = 0 ] || { log "debootstrap needs root"; exit 1; }
  mkdir -p "$CACHE"
  work=$(mktemp -d "$CACHE/rootfs.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  rootfs="$work/rootfs"
  log "debootstrap $SUITE (minbase + python3 + python3-venv) from $MIRROR"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$SUITE" "$rootfs" "$MIRROR" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  t1=$(date +%s)
  log "debootstrap took $((t1 - t0)) s"
  # Slim the image: no apt lists, caches, docs or locales (python3 needs none of them).
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* \
    "$rootfs"/var/log/*.log "$rootfs"/var/log/apt/* "$rootfs"/tmp/*
  # The apt sources the image will use if someone extends it.
  printf 'deb %s %s main\n' "$MIRROR" "$SUITE" >"$rootfs/etc/apt/sources.list"
  chroot "$rootfs" python3 -c 'import ensurepip, venv' || { log "python3/python3-venv missing in the rootfs"; exit 1; }
  tar --numeric-owner -C "$rootfs" -cf "$TARBALL.tmp" .
  mv "$TARBALL.tmp" "$TARBALL"
  log "rootfs tarball $(du -h "$TARBALL" | cut -f1) at $TARBALL"
fi

t2=$(date +%s)
"$DOCKER" import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  --message "debootstrap $SUITE minbase + python3 + python3-venv (scripts/build-base-image.sh)" \
  "$TARBALL" "$IMAGE" >/dev/null
t3=$(date +%s)
log "docker import took $((t3 - t2)) s; $IMAGE ready after $((t3 - t0)) s in total"
