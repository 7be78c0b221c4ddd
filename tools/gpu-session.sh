#!/usr/bin/env bash
# What a session with a lent GPU machine runs, prepared ahead so that its few
# minutes of device time go to measuring (issues 16 and 17). Two halves:
#
# On the build machine (Debian), from the project root:
#   bash tools/gpu-session.sh prepare
#     ../shared/gpu/prepare.sh (the libraries and data as .deb files in .gpu/), plus
#     oneDNN's .deb files (libdnnl2, libdnnl-dev, ocl-icd-libopencl1) so that the
#     CPU measurements there use oneDNN as this machine's builds do.
#
# On the GPU machine (the device tool's run, with carry [".gpu"]):
#   bash .gpu/gpu-build.sh 'bash tools/gpu-session.sh run [STEP...]'
#     (where the cuDNN attention might not compile against the machine's cuDNN, first
#      `bash .gpu/gpu-build.sh true || cmake -DWEFT_CUDNN=OFF ${TMPDIR:-/tmp}/weft-gpu-build;`)
#     runs the steps in this order (all when none is named), each under its own
#     time cap, and skips a step whose cap no longer fits in SESSION_BUDGET
#     seconds (default 400, counted from the script's start, after gpu-build.sh's build, which takes about
#     3 minutes on a fresh machine since the cuDNN attention came in; the device tool
#     stops a command at 600). Logs go to $OUT (the device tool's folder that
#     comes back) or /tmp/weft-gpu-session; the bench lines of weft and of the
#     PyTorch peer are gathered in bench.txt with their ratios, and summary.txt
#     says what ran, what failed, what was skipped.
#
# A session's device time (15 minutes, the machine's start included) allows about one such call, so the
# default order puts first what the open issues need most: the CUDA tests, attention (weft's kernels and
# cuDNN's), issue 16's headline numbers (PyTorch eager and torch.compile in the same run), whether weft's bf16
# step repeats bit for bit, where a step's time goes, the learning check, then the rest as far as the budget
# goes. Each step's cap is far above what it took on an H100 (in brackets). Named-only steps: trace.
#   tests      ctest -R cuda (every CUDA-vs-CPU test; cap 150 s, took 19 s)
#   gpt2       train_gpt2_small_cuda, weft (its own attention kernels, then cuDNN's: WEFT_ATTN_CUDNN=1, then
#              each weight cast at its first use: WEFT_AUTOCAST_FILL=0, then add_layer_norm's backward as three
#              ops: WEFT_FUSED_NORM_BW=0, then the tanh GELU as its own kernel after cuBLASLt's bias epilogue:
#              WEFT_CUDA_LT_GELU=0, then GELU's backward as a pass of its own: WEFT_FUSED_GELU_BW=0), then
#              PyTorch eager with SDPA (325 s, took 31 s without the last five)
#   compile    train_gpt2_small_cuda_vs_compile: PyTorch with torch.compile (150 s)
#   learning   issue 16's learning check, 500 steps of gpt2-small-bytes: weft and its PyTorch twin
#              (bench/peers/kjv_gpt_train.py) each from its own seed 1 and seed 2 (how far two runs of one
#              framework land apart), and the twin from weft's own start: weft's drawn weights, batches and
#              evaluation windows (about 300 s of caps)
#   profile    where a gpt2-small-bytes step goes: Nsight Compute's time of every kernel of 3 training steps
#              (and one evaluation batch), summed by kernel name per step (tools/kernel_times.py; 150 s)
#   parity     tests/train/test_device_gpt.c on cuda:0: a GPT at gpt2-small-bytes' width (two blocks) trained
#              3 steps on the GPU and on the CPU from the same weights and batches, in f32 and bf16; every
#              gradient (AdamW's moments after step 1) and the losses compared tensor by tensor, so a wrong
#              kernel is named by the parameter whose gradient it spoils (about 60 s)
#   attention  causal attention forward+backward at (8,12,1024,64), bf16 and f32, the forward alone, the
#              one-pass backward, the 64-row forward blocks and the 128-row backward blocks, cuDNN's fused
#              attention (deterministic and not), and SDPA (80 s)
#   bandwidth  copy / cast / add / bias / transpose GB/s at 64 MB against cudaMemcpy (30 s)
#   graphs     the four standard workloads and gpt2-small-bytes as graph-mode steps (one CUDA
#              Graph replay each) against weft eager and PyTorch eager (bench_graph_train; 150 s)
#   graph      weft train models/gpt2-small-bytes.cfg --device cuda --graph, 30 steps (90 s)
#   standard   the four standard workloads on the GPU, weft then PyTorch eager (120 s)
#   bisect     300 steps of gpt2-small-bytes with each fused path turned off in turn (WEFT_FUSED_ATTENTION:
#              composed ops; WEFT_ATTN_MMA: the f32 attention kernels on widened copies; WEFT_NORM_HALF_OUT +
#              WEFT_FUSED_ADD_NORM, WEFT_OPTIM_MULTI, WEFT_CUDA_LT + WEFT_FUSED_LINEAR, WEFT_AUTOCAST_CACHE), in
#              f32, and the twin in bf16 and in f32 (2026-11-27, H100: every variant within 0.02 of weft's
#              default; about 350 s)
#   cpu16      the four standard workloads on the CPU at 16 threads, weft built with
#              oneDNN (a CPU-only build in /tmp) then PyTorch, after that build's tests of
#              oneDNN's bf16 matmul and convolution on the host's AVX512-BF16 / AMX (300 s)
#   trace      named only: weft and the twin from weft's start, every step's loss and the validation loss
#              every 100 steps, bf16 (500 steps) and f32 (300), and the twin's validation loss of weft's weights after 500 steps
#   repeat     three 200-step bf16 runs logging every step's loss: are two the same bits, and does
#              evaluating every 100 steps change training?
#   suite      the rest of the suite, whose device tests then run on the real cuda:0
#              (training, graph mode with CUDA Graphs, DDP and the parameter server; 240 s)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

if [ "${1:-}" = prepare ]; then
  bash ../shared/gpu/prepare.sh || exit 1
  for p in libdnnl2 libdnnl-dev ocl-icd-libopencl1; do
    ls .gpu/debs/${p}_*.deb >/dev/null 2>&1 && continue
    if ls /var/cache/apt/archives/${p}_*.deb >/dev/null 2>&1; then cp /var/cache/apt/archives/${p}_*.deb .gpu/debs/
    else (cd .gpu/debs && apt-get download "$p") || echo "gpu-session: no .deb of $p: cpu16 will run without oneDNN"
    fi
  done
  du -sh .gpu
  exit 0
fi
[ "${1:-}" = run ] || { echo "usage: gpu-session.sh prepare | run [STEP...]" >&2; exit 2; }
shift
: "${B:?run me through .gpu/gpu-build.sh, which builds weft and sets B}"
steps=${*:-tests attention gpt2 compile repeat profile learning parity bandwidth graphs graph standard bisect cpu16 suite}
out=${OUT:-/tmp/weft-gpu-session}
mkdir -p "$out"
budget=${SESSION_BUDGET:-400}
t0=$(date +%s)
py=${PYTHON:-python3} # on the GPU machine python3 has PyTorch
: > "$out/bench.txt"
summary() { echo "$*" | tee -a "$out/summary.txt"; }
summary "$(grep -h -m1 'cuDNN:' "$B.configure.log" "$B/CMakeCache.txt" 2>/dev/null | head -1)"
summary "gpu-session $(git rev-parse --short HEAD 2>/dev/null) on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(nproc) cores, $(date -u +%FT%TZ)"

# run NAME CAP CMD...: the command under `timeout CAP`, its output in NAME.log, bench lines kept.
run() {
  local name=$1 cap=$2; shift 2
  local left=$((budget - ($(date +%s) - t0)))
  if [ "$cap" -gt "$left" ]; then summary "skipped $name (cap ${cap}s, ${left}s left)"; return 0; fi
  local s=$(date +%s)
  timeout "$cap" bash -c "$*" > "$out/$name.log" 2>&1
  local rc=$?
  grep -E '^[a-z0-9_]+ [0-9.e+-]+ [^ ]+ [01]$' "$out/$name.log" | sed "s/^/$name /" >> "$out/bench.txt"
  summary "$name: exit $rc in $(( $(date +%s) - s ))s$([ $rc = 124 ] && echo ' (timed out)')"
}

# weft's drawn weights for its twin (kjv_gpt_train.py's run from weft's start): a checkpoint after one step at
# lr 1e-30, which leaves them as drawn; made once a session
init=/tmp/weft-init/ckpt-000001.safetensors
weft_init() {
  [ -f $init ] || run learning_init 60 "rm -rf /tmp/weft-init && $B/weft train models/gpt2-small-bytes.cfg --device cuda \
    --steps 1 --lr 1e-30 --eval-batches 1 --quiet --ckpt-dir /tmp/weft-init"
}
# finals LOG...: each log's last validation loss (weft's "final:" line, the twin's "val_loss"), into the summary
finals() {
  for f in "$@"; do grep -h "final:\|val_loss" "$out/$f.log" 2>/dev/null | tail -1 | sed "s/^/$f /"; done |
    tee -a "$out/summary.txt"
}

for step in $steps; do
  case $step in
  tests) run tests 150 "cd $B && ctest -R cuda -j 8 --timeout 120 --output-on-failure -V"
    grep -E "tests passed|Failed|\*\*\*Failed|Exception" "$out/tests.log" | tail -20 | tee -a "$out/summary.txt"
    # (-V keeps every test's own lines: whether cuBLASLt's GELU epilogues ran, test_cuda_linear's)
    grep -E "GELU epilogue|DGELU epilogue" "$out/tests.log" | tee -a "$out/summary.txt" ;;
  parity) run parity 120 "$B/train_test_device_gpt"
    grep -E "train loss|worst|differs|passed" "$out/parity.log" 2>/dev/null | tee -a "$out/summary.txt" ;;
  gpt2)
    run gpt2_weft 45 "WEFT_BENCH_DEVICE=cuda $B/bench_train train_gpt2_small_cuda"
    # and with cuDNN's fused attention (where the build found cuDNN; bench.txt's gpt2_weft_cudnn line)
    run gpt2_weft_cudnn 45 "WEFT_ATTN_CUDNN=1 WEFT_BENCH_DEVICE=cuda $B/bench_train train_gpt2_small_cuda"
    # and each weight cast at its first use, one launch each (before 2026-11-28's weft_autocast_cache_fill)
    run gpt2_weft_nofill 45 "WEFT_AUTOCAST_FILL=0 WEFT_BENCH_DEVICE=cuda $B/bench_train train_gpt2_small_cuda"
    # and add_layer_norm's backward as three ops (before 2026-11-28's fused one)
    run gpt2_weft_norm3 45 "WEFT_FUSED_NORM_BW=0 WEFT_BENCH_DEVICE=cuda $B/bench_train train_gpt2_small_cuda"
    # the tanh GELU after cuBLASLt's bias epilogue (an elementwise kernel) instead of in its GELU epilogue
    run gpt2_weft_noepi 45 "WEFT_CUDA_LT_GELU=0 WEFT_BENCH_DEVICE=cuda $B/bench_train train_gpt2_small_cuda"
    # GELU's backward as its own pass (linear_gelu's) instead of inside proj's backward product (matmul_dgelu)
    run gpt2_weft_gelubw 45 "WEFT_FUSED_GELU_BW=0 WEFT_BENCH_DEVICE=cuda $B/bench_train train_gpt2_small_cuda"
    run gpt2_peer 55 "cd bench/peers && WEFT_BENCH_DEVICE=cuda $py train.py 'train_gpt2_small_cuda\$'"
    # weft's runs side by side (default, cuDNN, no fill, three-op norm backward, GELU after the epilogue, GELU's
    # backward apart): tokens/s
    grep -h "^gpt2_weft[a-z0-9_]* train_gpt2_small_cuda " "$out/bench.txt" | cut -d' ' -f1,3 | sed 's/^/gpt2 /' |
      tee -a "$out/summary.txt" ;;
  profile)
    run profile 150 "ncu --csv --metrics gpu__time_duration.sum $B/weft train models/gpt2-small-bytes.cfg --device cuda \
      --steps 3 --eval-batches 1 --quiet > $out/profile.csv"
    $py tools/kernel_times.py "$out/profile.csv" 30 3 > "$out/profile.txt" 2>&1; head -16 "$out/profile.txt" | tee -a "$out/summary.txt" ;;
  attention)
    run attention_weft 40 "$B/bench_attention_cuda"
    run attention_peer 40 "cd bench/peers && $py attention_cuda.py" ;;
  bandwidth) run bandwidth 30 "$B/bench_cuda_bandwidth" ;;
  bisect)
    a="--device cuda --steps 300 --eval-batches 50 --quiet"
    # first the four that say whether the gap is bf16's or there in f32 too: weft and the twin, each both ways
    run bisect_default 40 "$B/weft train models/gpt2-small-bytes.cfg $a"
    grep -h "^final:" "$out/bisect_default.log" 2>/dev/null | sed "s/^/bisect default /" | tee -a "$out/summary.txt"
    run bisect_peer 60 "cd bench/peers && $py kjv_gpt_train.py '' 300 gpt2"
    grep -h "val_loss" "$out/bisect_peer.log" 2>/dev/null | sed "s/^/bisect peer /" | tee -a "$out/summary.txt"
    sed '/^precision/d' models/gpt2-small-bytes.cfg > "$out/gpt2-f32.cfg"
    run bisect_f32 90 "$B/weft train $out/gpt2-f32.cfg $a"
    grep -h "^final:" "$out/bisect_f32.log" 2>/dev/null | sed "s/^/bisect f32 /" | tee -a "$out/summary.txt"
    run bisect_peer_f32 90 "cd bench/peers && $py kjv_gpt_train.py '' 300 gpt2 f32"
    grep -h "val_loss" "$out/bisect_peer_f32.log" 2>/dev/null | sed "s/^/bisect peer f32 /" | tee -a "$out/summary.txt"
    # (2026-11-27 night, H100: weft 2.4211 / 2.4327 against the twin's 2.3685 / 2.3767 in bf16 / f32, every
    # variant below within 0.02 of weft's default.) How far do two seeds of one framework land apart?
    run bisect_seed2 40 "$B/weft train models/gpt2-small-bytes.cfg $a --seed 2"
    grep -h "^final:" "$out/bisect_seed2.log" 2>/dev/null | sed "s/^/bisect seed2 /" | tee -a "$out/summary.txt"
    run bisect_peer_seed2 60 "cd bench/peers && $py kjv_gpt_train.py '' 300 gpt2 bf16 2"
    grep -h "val_loss" "$out/bisect_peer_seed2.log" 2>/dev/null | sed "s/^/bisect peer seed2 /" | tee -a "$out/summary.txt"
    for v in "attention_composed:WEFT_FUSED_ATTENTION=0" "attention_f32:WEFT_ATTN_MMA=0" \
             "norms_f32:WEFT_NORM_HALF_OUT=0 WEFT_FUSED_ADD_NORM=0" "optim_single:WEFT_OPTIM_MULTI=0" \
             "linear_plain:WEFT_CUDA_LT=0 WEFT_FUSED_LINEAR=0" "no_cast_cache:WEFT_AUTOCAST_CACHE=0"; do
      run "bisect_${v%%:*}" 60 "env ${v#*:} $B/weft train models/gpt2-small-bytes.cfg $a"
      grep -h "^final:" "$out/bisect_${v%%:*}.log" 2>/dev/null | sed "s/^/bisect ${v%%:*} /" | tee -a "$out/summary.txt"
    done ;;
  graph) run graph 90 "WEFT_CUDA_GRAPHS_DEBUG=1 $B/weft train models/gpt2-small-bytes.cfg --device cuda --graph --steps 30" ;;
  standard)
    for w in train_fmnist_mlp train_fmnist_cnn train_kjv_gpt train_kjv_lstm; do
      run "${w}_cuda_weft" 20 "WEFT_BENCH_DEVICE=cuda $B/bench_train $w"
      run "${w}_cuda_peer" 25 "cd bench/peers && WEFT_BENCH_DEVICE=cuda $py train.py $w"
    done ;;
  graphs)
    run graphs_weft 90 "WEFT_BENCH_DEVICE=cuda $B/bench_graph_train"
    run graphs_peer 60 "cd bench/peers && WEFT_BENCH_DEVICE=cuda $py graph_train.py" ;;
  compile) run gpt2_peer_compile 150 "cd bench/peers && WEFT_BENCH_DEVICE=cuda $py train.py train_gpt2_small_cuda_vs_compile" ;;
  cpu16)
    # a CPU build with oneDNN from the unpacked .deb files (gpu-build.sh's build has none)
    P=${TMPDIR:-/tmp}/weft-deps/usr; L=$P/lib/x86_64-linux-gnu; C=${TMPDIR:-/tmp}/weft-cpu-build
    for f in .gpu/debs/libdnnl*.deb .gpu/debs/ocl-icd-libopencl1_*.deb; do [ -f "$f" ] && dpkg -x "$f" ${TMPDIR:-/tmp}/weft-deps; done
    dnnl=""; [ -f $L/libdnnl.so.2 ] && dnnl="-DWEFT_ONEDNN=ON -DONEDNN_INCLUDE=$P/include -DONEDNN_LIB=$L/libdnnl.so.2"
    run cpu16_build 100 "cmake -S . -B $C -DCMAKE_BUILD_TYPE=Release -DWEFT_CUDA=OFF $dnnl \
      -DOPENBLAS_LIB=$L/openblas-openmp/libopenblas.so.0 -DOPENBLAS_OMP_LIB=$L/openblas-openmp/libopenblas.so.0 \
      -DCBLAS_INCLUDE=$P/include/x86_64-linux-gnu/openblas-openmp -DCJSON_LIB=$L/libcjson.so.1 \
      -DCMAKE_C_FLAGS=-I$P/include -DZLIB_INCLUDE_DIR=$P/include && cmake --build $C -j $(nproc) --target bench_train weft_cli \
      ops_test_gemm ops_test_conv_onednn"
    # oneDNN's bf16 matmul and convolution on this host's AVX512-BF16 / AMX (issue 17), against the f32 paths
    run cpu16_bf16_tests 60 "cd $C && WEFT_NUM_THREADS=16 ./ops_test_gemm && WEFT_NUM_THREADS=16 ./ops_test_conv_onednn"
    grep -E "passed|failed|bf16" "$out/cpu16_bf16_tests.log" | tail -6 | tee -a "$out/summary.txt"
    $C/weft info 2>&1 | grep -iE "gemm|onednn|threads" | head -3 | tee -a "$out/summary.txt"
    for w in train_fmnist_mlp train_fmnist_cnn train_kjv_gpt train_kjv_lstm; do
      run "${w}_cpu16_weft" 25 "WEFT_NUM_THREADS=16 $C/bench_train $w"
      run "${w}_cpu16_peer" 30 "cd bench/peers && WEFT_NUM_THREADS=16 $py train.py $w"
    done ;;
  learning)
    # issue 16's learning check at 500 steps: weft and its twin from their own seeds' starts (seeds 1 and 2, how
    # far two runs of one framework land apart), then the twin from weft's start: weft's drawn weights (a
    # checkpoint after one step at lr 1e-30, which leaves them as drawn), weft's batches and evaluation windows
    a="--device cuda --steps 500 --eval-batches 50 --quiet"
    run learning_weft 60 "$B/weft train models/gpt2-small-bytes.cfg $a"
    weft_init
    run learning_peer_same 90 "cd bench/peers && $py kjv_gpt_train.py '' 500 gpt2 bf16 1 $init"
    run learning_peer 90 "cd bench/peers && $py kjv_gpt_train.py '' 500 gpt2"
    run learning_weft_seed2 60 "$B/weft train models/gpt2-small-bytes.cfg $a --seed 2"
    run learning_peer_seed2 90 "cd bench/peers && $py kjv_gpt_train.py '' 500 gpt2 bf16 2"
    finals learning_weft learning_peer_same learning_peer learning_weft_seed2 learning_peer_seed2 ;;
  trace)
    # weft and its twin from the same start (weft_init's checkpoint), step by step:
    # every step's training loss and the validation loss every 100 steps, in bf16 and in f32, and the twin's
    # validation loss of weft's weights after 500 steps (is the gap in weft's training or in its evaluation?)
    c=models/gpt2-small-bytes.cfg
    weft_init
    sed 's/^seed = 1$/seed = 1\nlog_every = 1\neval_every = 100\nckpt_every = 500/' $c > "$out/trace-bf16.cfg"
    sed '/^precision/d' "$out/trace-bf16.cfg" > "$out/trace-f32.cfg"
    run trace_weft 60 "rm -rf /tmp/weft-w500 && $B/weft train $out/trace-bf16.cfg --device cuda --steps 500 --quiet \
      --log-dir $out/trace_bf16 --ckpt-dir /tmp/weft-w500"
    run trace_peer 90 "cd bench/peers && TWIN_LOG=1 TWIN_EVAL_EVERY=100 $py kjv_gpt_train.py '' 500 gpt2 bf16 1 $init"
    run trace_peer_eval 60 "cd bench/peers && $py kjv_gpt_train.py '' 0 gpt2 bf16 1 /tmp/weft-w500/ckpt-000500.safetensors"
    run trace_weft_f32 120 "$B/weft train $out/trace-f32.cfg --device cuda --steps 300 --quiet --log-dir $out/trace_f32"
    run trace_peer_f32 120 "cd bench/peers && TWIN_LOG=1 TWIN_EVAL_EVERY=100 $py kjv_gpt_train.py '' 300 gpt2 f32 1 $init"
    finals trace_weft trace_peer trace_peer_eval trace_weft_f32 trace_peer_f32 ;;
  repeat)
    # is weft's bf16 step the same bits run to run on the GPU, and does evaluating every 100 steps leave training
    # alone (as it does on the CPU)? Three 200-step runs of gpt2-small-bytes logging every step's loss.
    c=models/gpt2-small-bytes.cfg
    sed 's/^seed = 1$/seed = 1\nlog_every = 1/' $c > "$out/repeat.cfg"
    sed 's/^seed = 1$/seed = 1\nlog_every = 1\neval_every = 100/' $c > "$out/repeat-eval.cfg"
    for r in a b; do run repeat_$r 40 "$B/weft train $out/repeat.cfg --device cuda --steps 200 --quiet --log-dir $out/repeat_$r"; done
    run repeat_eval 40 "$B/weft train $out/repeat-eval.cfg --device cuda --steps 200 --quiet --log-dir $out/repeat_eval"
    steps_of() { grep ',nan,nan$' "$out/repeat_$1/metrics.csv" 2>/dev/null | cut -d, -f1,3; }
    for r in b eval; do
      d=$(diff <(steps_of a) <(steps_of $r) | grep -m1 '^<' | cut -c3- | cut -d, -f1)
      [ -s "$out/repeat_$r/metrics.csv" ] || d="(no log)"
      summary "repeat $r against a: $([ -n "$d" ] && echo "first differing step $d" || echo "the same loss at every step")"
    done ;;
  suite) run suite 240 "cd $B && ctest -E cuda -j 12 --timeout 200 --output-on-failure"
    grep -E "tests passed|\*\*\*Failed|Timeout" "$out/suite.log" | tail -20 | tee -a "$out/summary.txt" ;;
  *) summary "unknown step $step" ;;
  esac
done

# weft / peer ratios: pairs of "<step>_weft name value" and "<step>_peer name value" lines
awk '{ k = $1; kind = k ~ /_weft$/ ? "weft" : k ~ /_peer/ ? "peer" : ""; if (kind == "") next
       sub(/_(weft|peer).*$/, "", k); key = k " " $2; v[key, kind] = $3; u[key] = $4; hib[key] = $5; keys[key] = 1 }
     END { for (k in keys) if ((k, "weft") in v && (k, "peer") in v && v[k, "peer"] > 0) {
             r = hib[k] ? v[k, "weft"] / v[k, "peer"] : v[k, "peer"] / v[k, "weft"]
             printf "ratio %s weft=%s peer=%s %s ratio=%.3f\n", k, v[k, "weft"], v[k, "peer"], u[k], r } }' \
  "$out/bench.txt" | sort | tee -a "$out/summary.txt"
summary "done in $(( $(date +%s) - t0 ))s; logs in $out"
