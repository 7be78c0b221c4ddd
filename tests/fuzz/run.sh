#!/bin/sh
# `make fuzz`: runs each libFuzzer harness in turn for SECONDS and prints one
# line per harness: inputs run, coverage (edges and features, libFuzzer's
# cov and ft over the whole instrumented library), corpus size and
# findings (crashes, leaks, timeouts, sanitizer reports, out-of-memory).
#   run.sh BUILD_DIR SECONDS [HARNESS...]      (default: all of them)
# Each harness grows its corpus in BUILD_DIR/fuzz-corpus/<h>/, seeded from
# tests/fuzz/corpus/<h>/; a finding is saved in BUILD_DIR/fuzz-findings/<h>/
# and the run's log in BUILD_DIR/fuzz-<h>.log. Reproduce one with
#   BUILD_DIR/fuzz_<h> FINDING
# and, once fixed, add it to tests/fuzz/regress/<h>/ (docs/reliability.md).
# Exit status 1 when anything was found.
build=$1 secs=$2
shift 2
src=$(cd "$(dirname "$0")/../.." && pwd)
harnesses=${*:-model_file safetensors checkpoint graph idx text cli onnx}
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
for h in $harnesses; do
    bin=$build/fuzz_$h corpus=$build/fuzz-corpus/$h art=$build/fuzz-findings/$h log=$build/fuzz-$h.log
    if [ ! -x "$bin" ]; then
        echo "$h: no harness $bin" >&2
        status=1
        continue
    fi
    mkdir -p "$corpus" "$art"
    cp "$src/tests/fuzz/corpus/$h/"* "$corpus/" 2>/dev/null
    dict=
    [ -f "$src/tests/fuzz/$h.dict" ] && dict=-dict=$src/tests/fuzz/$h.dict
    before=$(ls "$art" | wc -l)
    # -timeout: one input past 10 s is a finding; -rss_limit_mb (also the malloc limit): 2 GiB
    "$bin" "$corpus" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$art/" $dict >"$log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    corp=$(grep -o 'corp: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    found=$(($(ls "$art" | wc -l) - before))
    [ $rc -ne 0 ] && [ "$found" -eq 0 ] && found=1 # a crash of the fuzzer itself
    printf '%-12s %10s runs  cov %6s  ft %7s  corpus %6s  %d finding%s  (%s s)\n' "$h" "${runs:-?}" "${cov:-?}" \
        "${ft:-?}" "${corp:-?}" "$found" "$([ "$found" -eq 1 ] || echo s)" "$secs"
    if [ "$found" -ne 0 ]; then
        status=1
        grep -m1 -E 'ERROR: |runtime error|fuzz invariant|==ERROR|SUMMARY' "$log" | sed 's/^/    /'
        ls -t "$art" | head -3 | sed "s|^|    $art/|"
    fi
done
exit $status
