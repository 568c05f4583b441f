#!/usr/bin/env bash
# Install the Debian packages p4ina needs, only those that are missing.
# Idempotent and quick when everything is there (one dpkg query).
set -euo pipefail

# python3-simgrid: the network model of `make simulate` (Python bindings only; no C++ API is used)
# gcc, libc6-dev: the embedded switch's C engine compiles each program to a shared object at load
PKGS=(mininet iproute2 iputils-ping ethtool procps python3-venv python3-dev python3-simgrid gcc libc6-dev)

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
    exit 0
fi
if [[ $EUID -ne 0 ]]; then
    echo "p4ina: missing Debian packages: ${missing[*]}; run as root or install them with apt-get" >&2
    exit 1
fi
echo "p4ina: installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
