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
# (e.g. OpenBLAS called directly); it wins over the Python twin. Both get WEFT_NUM_THREADS / the thread count as env, and
# BENCH as their first argument so they can skip what is filtered out.
set -u
BUILD=${BUILD:-build}
PATTERN=${BENCH:-}
THREADS=${WEFT_NUM_THREADS:-$(nproc)}
export WEFT_NUM_THREADS=$THREADS OMP_NUM_THREADS=$THREADS
PY=/usr/bin/python3
have_torch=0
if [ -x "$PY" ] && "$PY" -c "import torch" 2>/dev/null; then have_torch=1; else
  echo "note: PyTorch not found for $PY (apt-get install python3-torch); peers skipped" >&2; fi
echo "# threads=$THREADS $(date -u +%Y-%m-%dT%H:%MZ) $(uname -m)"
for bin in "$BUILD"/bench_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin"); name=${name#bench_}
  weft_out=$("$bin" "$PATTERN") || { echo "bench $name: failed" >&2; continue; }
  peer_out=""
  if [ $have_torch = 1 ] && [ -f "bench/peers/$name.py" ]; then
    peer_out=$(cd bench/peers && "$PY" "$name.py" "$PATTERN" 2>/dev/null) || peer_out=""
  fi
  while read -r bname val unit hib inpeer; do
    [ -n "$bname" ] || continue
    if [ -n "$PATTERN" ] && [[ "$bname" != *$PATTERN* ]]; then continue; fi
    pv=${inpeer:-}
    [ -n "$pv" ] || pv=$(printf '%s\n' "$peer_out" | awk -v n="$bname" '$1==n {print $2; exit}')
    if [ -z "$pv" ]; then
      echo "bench $bname weft=$val peer=none unit=$unit ratio=none"
    else
      ratio=$(awk -v w="$val" -v p="$pv" -v h="$hib" 'BEGIN { if (h==1) r=w/p; else r=p/w; printf "%.2f", r }')
      echo "bench $bname weft=$val peer=$pv unit=$unit ratio=$ratio"
    fi
  done <<< "$weft_out"
done
