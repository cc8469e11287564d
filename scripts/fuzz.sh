#!/bin/sh
# Runs the libFuzzer targets of tests/fuzz (docs/security.md "Fuzzing").
#   scripts/fuzz.sh [SECONDS [TARGET...]]
# SECONDS per target (default 600: a campaign); CI (scripts/test.sh) runs
# 50 s each, five targets, within its five-minute budget. Builds build-fuzz
# with clang (-DRESHARD_FUZZ=ON). The committed corpus (seeds and
# regressions) is read, never written; what the fuzzer learns goes to
# build-fuzz/fuzz-work/TARGET. A crash stops with the input saved under
# build-fuzz/fuzz-artifacts/TARGET/: fix the bug, then commit that input as
# tests/fuzz/corpus/TARGET/crash-<sha1> so ctest replays it forever.
set -eu
cd "$(dirname "$0")/.."
seconds=${1:-600}
[ $# -gt 0 ] && shift
targets=${*:-"rpc plan_oracle catalog_record config reshardctl_json"}
jobs=$(nproc 2>/dev/null || echo 2)

CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DRESHARD_FUZZ=ON >/dev/null
cmake --build build-fuzz -j"$jobs" --target fuzz

status=0
for target in $targets; do
  work=build-fuzz/fuzz-work/$target
  artifacts=build-fuzz/fuzz-artifacts/$target/
  mkdir -p "$work" "$artifacts"
  echo "fuzz: $target for ${seconds}s"
  if ! ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      "build-fuzz/tests/fuzz/fuzz_$target" -max_total_time="$seconds" \
      -timeout=20 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
      -artifact_prefix="$artifacts" "$work" "tests/fuzz/corpus/$target" \
      >"build-fuzz/fuzz-$target.log" 2>&1; then
    echo "fuzz: $target FOUND A CRASH (input in $artifacts):" >&2
    grep -A30 "ERROR\|==ERROR\|runtime error\|deadly signal\|abort" \
      "build-fuzz/fuzz-$target.log" | head -60 >&2
    status=1
  else
    grep -E "stat::number_of_executed_units|cov:" \
      "build-fuzz/fuzz-$target.log" | tail -2
  fi
done
exit $status
