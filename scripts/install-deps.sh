#!/bin/sh
# Installs every Debian package reshardd needs to build, test and run.
# Used by the README, .ci/run and deploy/Containerfile alike.
set -eu
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends \
  build-essential cmake pkg-config clang-format \
  libssl-dev libgrpc-dev libprotobuf-c-dev protobuf-c-compiler protobuf-compiler libprotobuf-dev \
  libuv1-dev libcriterion-dev liblmdb-dev libhiredis-dev libjansson-dev grpc-proto \
  python3 python3-grpcio python3-protobuf
