#!/usr/bin/env bash
# The one-command GPU check (`make check-gpu`): builds weft with CUDA, runs the CUDA
# tests and the whole suite, trains the standard models on --device cuda and on the
# CPU, compares each pair of `final:` lines, and prints one summary table (Markdown,
# for docs/cuda.md). Exit status: 0 when everything passed, 1 when something failed,
# 2 when there is no GPU to check.
#
#   make check-gpu                      # builds into build-gpu/
#   B=/path/to/build tools/check-gpu.sh # an existing WEFT_CUDA=ON build (e.g. .gpu/gpu-build.sh's)
#   STEPS=300 (training steps per job), JOBS=N (ctest -j), OUT=FILE (also write the table there)
#   CHECK_GPU_DEVICE=cpu runs the "cuda" column on the CPU: a dry run of this script itself
#   CHECK_GPU_TESTS=0 leaves out the two ctest runs
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
B=${B:-build-gpu}
STEPS=${STEPS:-300}
JOBS=${JOBS:-$(nproc)}
DEV=${CHECK_GPU_DEVICE:-cuda}
log=$(mktemp -d "${TMPDIR:-/tmp}/weft-check-gpu.XXXXXX")

if [ ! -x "$B/weft" ]; then
  echo "== building $B with WEFT_CUDA=ON"
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DWEFT_CUDA=ON > "$log/configure.log" 2>&1 ||
    { tail -20 "$log/configure.log"; exit 1; }
fi
cmake --build "$B" -j "$JOBS" > "$log/build.log" 2>&1 || { grep -E "error" "$log/build.log" | head -20; exit 1; }

devices=$("$B/weft" info | sed -n 's/^devices: .*cuda x\([0-9]*\).*/\1/p')
if [ "$DEV" = cpu ]; then devices=1
elif [ -z "$devices" ] || [ "$devices" -lt 1 ]; then
  echo "check-gpu: no CUDA device ($("$B/weft" train models/logreg.cfg --steps 1 --device cuda --quiet 2>&1 | tail -1))"
  exit 2
fi
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "== $devices GPU(s): ${gpu:-unknown}; log in $log"

rows=()   # Markdown table rows
fails=0
row() { rows+=("| $1 | $2 | $3 | $4 |"); [ "$4" = ok ] || [ "${4#skipped}" != "$4" ] || fails=$((fails + 1)); }

# ---- tests ----
ctest_counts() { # "passed/total (skipped N)" from a ctest log
  local l=$1 tot fail skip
  tot=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\2/p' "$l")
  fail=$(sed -n 's/.*tests passed, \([0-9]*\) tests failed out of \([0-9]*\).*/\1/p' "$l")
  skip=$(grep -c '\*\*\*Skipped' "$l")
  echo "$((${tot:-0} - ${fail:-0} - skip))/${tot:-0} passed, $skip skipped, ${fail:-?} failed"
}
if [ "${CHECK_GPU_TESTS:-1}" != 0 ]; then
echo "== ctest -R cuda"
(cd "$B" && ctest -R cuda --output-on-failure) > "$log/ctest-cuda.log" 2>&1
st=$?; c=$(ctest_counts "$log/ctest-cuda.log")
row "ctest -R cuda" "" "$c" "$([ $st = 0 ] && echo ok || echo FAIL)"
echo "== ctest (whole suite, -j $JOBS)"
(cd "$B" && ctest -j "$JOBS" --output-on-failure) > "$log/ctest-all.log" 2>&1
st=$?; c=$(ctest_counts "$log/ctest-all.log")
row "ctest (all)" "" "$c" "$([ $st = 0 ] && echo ok || echo FAIL: $(grep -E '^\s+[0-9]+ - ' "$log/ctest-all.log" | grep -v Skipped | sed 's/^ *[0-9]* - //; s/ (.*//' | tr '\n' ' '))"
fi

# ---- training: the same job on the CPU and on the GPU ----
field() { sed -n "s/.*final:.* $1=\([^ ]*\).*/\1/p" "$2" | tail -1; } # a field of the final line
summary() { # "acc 0.8512 loss 0.4201 12.3k/s" or "val 1.9012 12.3k/s"
  local f=$1 rate
  rate=$(field samples_per_s "$f")
  [ -n "$rate" ] || rate=$(field tokens_per_s "$f")
  if [ -n "$(field test_acc "$f")" ]; then echo "acc $(field test_acc "$f") loss $(field test_loss "$f"), ${rate}/s"
  else echo "val $(field val_loss "$f"), ${rate}/s"; fi
}
# close A B: the GPU run ended where the CPU run did (tolerance by metric)
close() {
  local a=$1 b=$2 tol=$3 x y
  x=$(field test_acc "$a"); y=$(field test_acc "$b")
  if [ -n "$x" ] && [ -n "$y" ]; then
    awk -v x="$x" -v y="$y" -v t="$tol" 'BEGIN { exit !((x - y < t) && (y - x < t)) }'; return; fi
  x=$(field val_loss "$a"); y=$(field val_loss "$b")
  [ -n "$x" ] && [ -n "$y" ] && awk -v x="$x" -v y="$y" -v t="$tol" 'BEGIN { exit !((x - y) / y < t && (y - x) / y < t) }'
}
# job NAME TOL CFG CPU-COMMAND-PREFIX GPU-COMMAND-PREFIX [train flags...]
job() {
  local name=$1 tol=$2 cfg=$3 cpu=$4 gpu=$5; shift 5
  echo "== $name"
  $cpu "$B/weft" train "$cfg" --steps "$STEPS" --quiet "$@" > "$log/$name.cpu" 2>&1
  local sc=$?
  $gpu "$B/weft" train "$cfg" --steps "$STEPS" --quiet --device "$DEV" "$@" > "$log/$name.cuda" 2>&1
  local sg=$?
  local verdict=ok
  if [ $sc != 0 ] || [ $sg != 0 ]; then
    verdict="FAIL: $(tail -1 "$log/$name.$([ $sg != 0 ] && echo cuda || echo cpu)")"
  elif ! close "$log/$name.cuda" "$log/$name.cpu" "$tol"; then verdict="FAIL: results differ (tolerance $tol)"; fi
  row "$name" "$(summary "$log/$name.cpu")" "$(summary "$log/$name.cuda")" "$verdict"
}
with_net() { # a copy of a model file with "key = value" lines added to [net]
  local cfg=$1 out
  out=$log/$(basename "${cfg%.cfg}")-$2.cfg; shift 2
  awk -v add="$*" '{ print } /^\[net\]/ { n = split(add, kv, ";"); for (i = 1; i <= n; i++) print kv[i] }' "$cfg" > "$out"
  echo "$out"
}
for m in logreg fmnist-mlp fmnist-cnn; do job "$m" 0.015 "models/$m.cfg" "" ""; done
for m in kjv-gpt kjv-lstm; do job "$m" 0.02 "models/$m.cfg" "" ""; done
job "fmnist-mlp --graph" 0.015 models/fmnist-mlp.cfg "" "" --graph
job "kjv-gpt --graph" 0.02 models/kjv-gpt.cfg "" "" --graph
job "kjv-gpt clip=1" 0.02 "$(with_net models/kjv-gpt.cfg clip 'clip = 1.0')" "" ""
job "fmnist-cnn bf16" 0.02 "$(with_net models/fmnist-cnn.cfg bf16 'precision = bf16')" "" ""
job "fmnist-cnn f16" 0.02 "$(with_net models/fmnist-cnn.cfg f16 'precision = f16')" "" ""
job "kjv-gpt bf16" 0.02 "$(with_net models/kjv-gpt.cfg bf16 'precision = bf16')" "" "" # attention in bf16 too
# Distributed: the parameter server's workers share GPUs as they must. DDP gives each
# rank GPU (local rank mod GPUs): over NCCL with a GPU per rank, else the ranks share
# one GPU and the buckets are staged through the host over MPI.
if command -v mpirun > /dev/null; then
  L="$B/weft launch -n 3 --servers 1 --"
  job "fmnist-mlp --dist ps (2 workers)" 0.015 models/fmnist-mlp.cfg "$L" "$L" --dist ps --batch 64
  L="$B/weft launch -n 2 --"
  if [ "$devices" -ge 2 ]; then how="NCCL"; else how="one GPU, staged through the host"; fi
  job "fmnist-mlp --dist ddp (2 ranks, $how)" 0.015 models/fmnist-mlp.cfg "$L" "$L" --dist ddp --batch 64
fi

{
  echo "### check-gpu, $(date -u +%Y-%m-%d), $(git rev-parse --short HEAD 2>/dev/null), ${gpu:-GPU}, $STEPS steps per job"
  echo
  echo "| job | cpu | cuda | verdict |"
  echo "|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee "$log/summary.md"
[ -n "${OUT:-}" ] && cp "$log/summary.md" "$OUT"
[ $fails = 0 ] && echo "check-gpu: all passed" || echo "check-gpu: $fails failed (logs in $log)"
[ $fails = 0 ]
