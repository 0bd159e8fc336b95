#!/usr/bin/env bash
# Build a Debian bookworm base image with Python 3.11 when no registry is reachable: debootstrap a minimal
# root file system from Debian's package mirror and `docker import` it. Usage: docker/make_base.sh TAG [DIR]
# libpython3.11: the Triton Python backend stub links against it.
set -euo pipefail
tag=${1:?usage: make_base.sh TAG [WORKDIR]}
work=${2:-work/images}
if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "base image $tag exists" >&2
    exit 0
fi
rootfs="$work/rootfs"
rm -rf "$rootfs"
mkdir -p "$rootfs"
echo "debootstrap bookworm (minbase + python3) into $rootfs" >&2
debootstrap --variant=minbase --include=python3,python3-venv,libpython3.11,ca-certificates,libgomp1 \
    bookworm "$rootfs" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >&2
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' - "$tag" >&2
rm -rf "$rootfs"
echo "imported $tag" >&2
