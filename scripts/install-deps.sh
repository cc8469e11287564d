#!/bin/sh
# Installs every Debian package reshardd needs to build, test and run.
# Used by the README, .ci/run (through scripts/test.sh) and
# deploy/Containerfile alike:
#   scripts/install-deps.sh            build, test and runtime packages
#                                      (developers, CI, the image's build stage)
#   scripts/install-deps.sh --runtime  only the shared libraries reshardd and
#                                      reshardctl load (the image's final stage)
set -eu
# What the binaries load (readelf -d: NEEDED); the full install includes the
# same list, so CI proves every name, and tests/deploy/test_runtime_deps.py
# checks that it covers every library the built binaries need.
RUNTIME_PACKAGES="libc6 libssl3 libgrpc29 libuv1 libprotobuf-c1 liblmdb0 \
libhiredis0.14 libmicrohttpd12 libjansson4"
mode=all
case "${1:-}" in
  "") ;;
  --runtime) mode=runtime ;;
  *) echo "usage: $0 [--runtime]" >&2; exit 2 ;;
esac
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
if [ "$mode" = runtime ]; then
  # shellcheck disable=SC2086  # a list of package names
  $SUDO apt-get install -y --no-install-recommends $RUNTIME_PACKAGES
  exit 0
fi
# Metrics: libmicrohttpd-dev. Deploy and load tests: nghttp2-client (h2load),
# prometheus (scraped for real in CI), python3-yaml (manifest checks).
# The Python package (clients/python): python3-numpy, python3-torch (its
# tests' tensors), python3-pytest, python3-pip and python3-venv (installed
# into a virtualenv by its ctest), openssl (test certificates).
# Security (docs/security.md): openssl makes the tests' certificates; clang
# and libclang-rt-14-dev build the libFuzzer targets (scripts/fuzz.sh).
# The UCX executor (clients/ucx) and its P/D tests: libucx-dev, and
# ucx-utils (ucx_info -d names the transports UCX_TLS selects). Only the
# client executor links UCX, never reshardd, so it is not a runtime package.
# valgrind: scripts/call_instructions.py counts the daemon's instructions
# per call under callgrind (its deploy test runs it).
# shellcheck disable=SC2086
$SUDO apt-get install -y --no-install-recommends \
  libmicrohttpd-dev nghttp2-client prometheus python3-yaml \
  openssl clang libclang-rt-14-dev \
  $RUNTIME_PACKAGES \
  build-essential cmake pkg-config clang-format \
  libssl-dev libgrpc-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler libprotobuf-dev \
  libuv1-dev libcriterion-dev liblmdb-dev libhiredis-dev libjansson-dev grpc-proto \
  python3 python3-grpcio python3-protobuf redis-server \
  python3-numpy python3-torch python3-pytest python3-pip python3-venv openssl \
  libucx-dev ucx-utils valgrind
