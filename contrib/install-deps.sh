#!/bin/sh
# install-deps.sh: install what medha needs to build and test on a fresh
# Debian machine (run as root). The CUDA toolkit is optional: the CUDA
# parts build only where nvcc is found. iproute2 (network namespaces,
# tests/sh/hosts.sh), python3-yaml and systemd (systemd-analyze verify:
# tests/sh/deploy.sh) are for the tests.
set -e
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends \
	build-essential pkg-config ca-certificates python3 python3-venv python3-pip \
	libnng-dev libmsgpack-dev libzstd-dev zstd libjansson-dev libssl-dev \
	libcmocka-dev libpcre2-dev gnuplot-nox mandoc curl \
	iproute2 python3-yaml systemd
