#!/usr/bin/env bash
# Make sure a Docker engine answers, starting one if needed, without opening any network: dockerd with
# --bridge=none (no docker0, no private-range subnet) and --iptables=false; containers use host networking.
# Installs Debian's docker.io and debootstrap when they are missing (needs root). Usage: docker/dockerd.sh [LOGDIR]
set -euo pipefail
logdir=${1:-work/dockerd}
if docker info >/dev/null 2>&1; then
    exit 0
fi
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
    echo "installing docker.io and debootstrap (Debian packages)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap >&2
fi
mkdir -p "$logdir"
echo "starting dockerd (--bridge=none --iptables=false); log: $logdir/dockerd.log" >&2
nohup dockerd --bridge=none --iptables=false --ip6tables=false >"$logdir/dockerd.log" 2>&1 &
for _ in $(seq 60); do
    if docker info >/dev/null 2>&1; then
        exit 0
    fi
    sleep 1
done
echo "dockerd did not answer within 60 s; see $logdir/dockerd.log" >&2
exit 1
