#!/usr/bin/env bash
# Runs every benchmark binary (build/bench_*) and its PyTorch twin
# (bench/peers/<name>.py) with the same thread count, and prints one line per
# benchmark:  bench <name> weft=<v> peer=<v> unit=<u> ratio=<r>
# (ratio > 1 means weft is better). BENCH=<pattern> keeps names matching it.
#
# Protocol: a bench binary and its twin each print lines
#   <name> <value> <unit> <hib> [<peer value>]
# where hib is 1 when higher is better (GB/s, GFLOP/s) and 0 when lower is
# better (us/op, ms). A fifth field is a peer measured in the same binary
# (e.g. OpenBLAS called directly); it wins over the Python twin. Both get
# WEFT_NUM_THREADS as env and BENCH as their first argument.
#
# A benchmark whose source starts with a line `// mpirun: N` (bench/allreduce.c)
# runs under tests/dist/mpirun.sh with N ranks; its peer is measured in the same
# binary (MPI called directly) and rank 0 prints the lines.
#
# This machine is shared and noisy, so weft and its peer run alternately
# ROUNDS times (default 3) and each side keeps its best value.
#
# Thread scaling: WEFT_BENCH_THREADS="1 2 4 8 16" runs every benchmark, and its
# peer, at each of those thread counts in turn (WEFT_NUM_THREADS and
# OMP_NUM_THREADS set to it for both; the twins pass it to
# torch.set_num_threads in bench/peers/common.py) and prints one line per
# count, the lines of a benchmark together, each ending in threads=<n>.
# Counts above nproc are skipped, with a "# note" line saying so. Unset, one
# count (WEFT_NUM_THREADS, else nproc) and lines without the threads field.
set -u
BUILD=${BUILD:-build}
PATTERN=${BENCH:-}
ROUNDS=${ROUNDS:-3}
THREADS=${WEFT_NUM_THREADS:-$(nproc)}
NPROC=$(nproc)
COUNTS=()  # the thread counts to run
SKIPPED="" # those above nproc
if [ -n "${WEFT_BENCH_THREADS:-}" ]; then
  for t in $WEFT_BENCH_THREADS; do
    case $t in
      *[!0-9]* | 0*) echo "WEFT_BENCH_THREADS: '$t' is not a positive thread count" >&2; exit 2 ;;
    esac
    if [ "$t" -gt "$NPROC" ]; then SKIPPED="$SKIPPED $t"; else COUNTS+=("$t"); fi
  done
  if [ ${#COUNTS[@]} -eq 0 ]; then
    echo "WEFT_BENCH_THREADS: every count ($WEFT_BENCH_THREADS) is above nproc ($NPROC)" >&2
    exit 2
  fi
else
  COUNTS=("$THREADS")
fi
export WEFT_NUM_THREADS=${COUNTS[0]} OMP_NUM_THREADS=${COUNTS[0]}
# The peer: PyTorch 2.x from PyPI in .venv-bench (make bench-deps), else
# Debian's python3-torch (1.13, much slower on CPU) with a note. PEER_PY
# overrides both.
VENV=${VENV:-.venv-bench}
PY=${PEER_PY:-}
if [ -z "$PY" ]; then
  if [ -x "$VENV/bin/python3" ] && "$VENV/bin/python3" -c "import torch" 2>/dev/null; then PY=$(cd "$VENV/bin" && pwd)/python3
  else
    PY=/usr/bin/python3
    echo "note: no PyTorch 2.x in $VENV (make bench-deps); the peer is $PY's, which is slower" >&2
  fi
fi
have_torch=0
peer="none"
if [ -x "$PY" ] && peer=$("$PY" -c "import torch; print(torch.__version__)" 2>/dev/null); then have_torch=1; else
  peer="none"
  echo "note: PyTorch not found for $PY (make bench-deps); peers skipped" >&2; fi
# The thread count each twin really runs with: torch.get_num_threads() after
# bench/peers/common.py has set it from WEFT_NUM_THREADS.
peer_threads=""
for t in "${COUNTS[@]}"; do
  pt=$t
  if [ $have_torch = 1 ]; then
    pt=$(cd bench/peers && WEFT_NUM_THREADS=$t OMP_NUM_THREADS=$t "$PY" -c "import common, torch; print(torch.get_num_threads())" 2>/dev/null) || pt="?"
    [ "$pt" = "$t" ] || echo "note: the peer asked for $t threads runs with $pt" >&2
  fi
  peer_threads="$peer_threads,$pt"
done
list=$(IFS=,; echo "${COUNTS[*]}")
echo "# threads=$list rounds=$ROUNDS $(date -u +%Y-%m-%dT%H:%MZ) $(uname -m) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "# peer torch $peer threads=${peer_threads#,} ($PY)"
[ -x "$BUILD/weft" ] && echo "# weft $("$BUILD/weft" info 2>/dev/null | sed -n 's/^cpu kernels: //p')"
[ -z "$SKIPPED" ] || echo "# note: threads=$(echo $SKIPPED | tr ' ' ,) skipped: more than nproc=$NPROC"
scaling=${WEFT_BENCH_THREADS:+1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for bin in "$BUILD"/bench_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin"); name=${name#bench_}
  launch=()
  np=$(sed -n 's|^// mpirun: *\([0-9][0-9]*\).*|\1|p' "bench/$name.c" 2>/dev/null | head -1)
  if [ -n "$np" ]; then
    command -v mpirun >/dev/null || { echo "bench $name: skipped (no mpirun)" >&2; continue; }
    launch=(sh tests/dist/mpirun.sh "$np")
  fi
  : > "$tmp/lines"
  for t in "${COUNTS[@]}"; do
    export WEFT_NUM_THREADS=$t OMP_NUM_THREADS=$t
    : > "$tmp/w"; : > "$tmp/p"
    for ((r = 0; r < ROUNDS; r++)); do
      "${launch[@]}" "$bin" "$PATTERN" >> "$tmp/w" || { echo "bench $name: failed" >&2; break; }
      if [ $have_torch = 1 ] && [ -f "bench/peers/$name.py" ]; then
        (cd bench/peers && "$PY" "$name.py" "$PATTERN" >> "$tmp/p" 2>/dev/null) || true
      fi
    done
    # Best of the rounds for each side, then one line per benchmark (in first-seen order).
    awk -v pat="$PATTERN" -v tag="${scaling:+ threads=$t}" '
      function better(a, b, hib) { return hib == 1 ? (a > b) : (a < b) }
      FILENAME == ARGV[1] {                         # peer file (may be empty)
        if (!($1 in pv) || better($2, pv[$1], $4)) pv[$1] = $2
        next
      }
      {                                             # weft file
        if (pat != "" && index($1, pat) == 0) next
        if (!($1 in wv)) { order[++n] = $1; unit[$1] = $3; hib[$1] = $4 }
        if (!($1 in wv) || better($2, wv[$1], $4)) wv[$1] = $2
        if (NF >= 5 && (!($1 in iv) || better($5, iv[$1], $4))) iv[$1] = $5
      }
      END {
        for (i = 1; i <= n; i++) {
          k = order[i]; p = (k in iv) ? iv[k] : ((k in pv) ? pv[k] : "")
          if (p == "") { printf "bench %s weft=%s peer=none unit=%s ratio=none%s\n", k, wv[k], unit[k], tag; continue }
          r = hib[k] == 1 ? wv[k] / p : p / wv[k]
          printf "bench %s weft=%s peer=%s unit=%s ratio=%.2f%s\n", k, wv[k], p, unit[k], r, tag
        }
      }' "$tmp/p" "$tmp/w" >> "$tmp/lines"
  done
  # A benchmark's lines together, in thread-count order (a no-op for one count).
  awk '!($2 in seen) { seen[$2] = 1; order[++n] = $2 } { out[$2] = out[$2] $0 "\n" }
       END { for (i = 1; i <= n; i++) printf "%s", out[order[i]] }' "$tmp/lines"
done
