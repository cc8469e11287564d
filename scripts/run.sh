#!/bin/sh
# Installs what reshardd needs, builds it and runs the daemon on its embedded
# defaults (listen 127.0.0.1:50051). Extra arguments go to reshardd.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j"$(nproc 2>/dev/null || echo 2)"
exec ./build/daemon/reshardd "$@"
