#!/bin/sh
# Installs what reshardd needs, builds it twice (plain, then with
# AddressSanitizer + UndefinedBehaviorSanitizer) and runs every test suite
# in both builds, then checks formatting and prints the benchmark figures.
# This is the README's test command and what .ci/run executes.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DRESHARD_WERROR=ON
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure
echo "python/pytest (build):"; cat build/clients/python/pytest-summary.txt

cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DRESHARD_SANITIZE=ON -DRESHARD_WERROR=ON
cmake --build build-asan -j"$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure
echo "python/pytest (build-asan):"; cat build-asan/clients/python/pytest-summary.txt

git ls-files '*.c' '*.h' | xargs clang-format --dry-run -Werror

# Fuzzing (docs/security.md): every libFuzzer target for 50 s, from the
# committed seeds and regressions; any finding fails the run.
./scripts/fuzz.sh 50

# Soak (docs/security.md): one minute of mixed load against a live daemon;
# resident memory, descriptors and threads must not grow past their bounds.
/usr/bin/python3 scripts/soak.py --daemon build/daemon/reshardd --duration 60

./build/bench/reshard-bench 20
./build/bench/reshard-bench-store 20

# Catalog figures (docs/catalog.md): publishes and registrations per second,
# plan latency with a cold and a warm cache, per backend. It starts its own
# daemons and redis-server on loopback and stops them.
RESHARD_E2E_DAEMON=build/daemon/reshardd RESHARD_E2E_PYGEN=build/tests/e2e/pygen \
  /usr/bin/python3 bench/bench_catalog.py
