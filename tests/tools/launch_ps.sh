#!/bin/sh
# `weft train --dist ps` under `weft launch`: 3 ranks = 2 workers + 1 server.
# The final line names the consistency model; BSP with 2 workers does the same
# math as DDP with 2 ranks; checkpoints hold the servers' shards, listed in
# the manifest; a killed worker is restarted from them.
# Usage: launch_ps.sh PATH/TO/weft SOURCE_DIR
weft=$1 src=$2
. "$src/tests/tools/launch_common.sh"
cfg=$src/models/logreg.cfg
acc() { sed -n 's/^final: test_acc=\([0-9.]*\).*/\1/p' "$1"; }
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= t) }'; }

# 1. SSP(2): completes, one final line from rank 0 naming the model.
"$weft" launch -n 3 --servers 1 -- weft train "$cfg" --steps 40 --dist ps --consistency ssp:2 --quiet >"$tmp/ssp" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && ok || { bad "ssp run exited $rc"; cat "$tmp/err" >&2; }
[ "$(grep -c '^final:' "$tmp/ssp")" -eq 1 ] && grep -q '^final: .*steps=40 .*ranks=3 consistency=ssp:2$' "$tmp/ssp" && ok ||
    bad "ssp final line: $(cat "$tmp/ssp")"

# 2. BSP (implied by --servers without --dist) with 2 workers = DDP with 2 ranks.
"$weft" launch -n 3 --servers 1 -- weft train "$cfg" --steps 40 --quiet >"$tmp/bsp" 2>"$tmp/err" || cat "$tmp/err" >&2
"$weft" launch -n 2 -- weft train "$cfg" --steps 40 --dist ddp --quiet >"$tmp/ddp" 2>"$tmp/err" || cat "$tmp/err" >&2
grep -q '^final: .*ranks=3 consistency=bsp$' "$tmp/bsp" && ok || bad "bsp final line: $(cat "$tmp/bsp")"
close "$(acc "$tmp/bsp")" "$(acc "$tmp/ddp")" 0.002 && ok ||
    bad "BSP (2 workers) and DDP (2 ranks) differ: $(acc "$tmp/bsp") vs $(acc "$tmp/ddp")"

# 3. A backup worker: 3 workers, each step applies the first 2 pushes.
"$weft" launch -n 4 --servers 1 -- weft train "$cfg" --steps 20 --dist ps --backup 1 --quiet >"$tmp/bk" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && grep -q '^final: .*ranks=4 consistency=bsp backup=1$' "$tmp/bk" && ok ||
    { bad "backup run: exit $rc, $(cat "$tmp/bk")"; cat "$tmp/err" >&2; }

# 4. Fault tolerance: worker 1 dies at step 25; the job restarts from step 20
#    (rank 0's part + the server's shard) and ends as the uninterrupted run.
"$weft" launch -n 3 --servers 1 -- weft train "$cfg" --steps 40 --dist ps --quiet >"$tmp/ref" 2>"$tmp/err" || cat "$tmp/err" >&2
WEFT_TEST_KILL_AT_STEP=25 WEFT_TEST_KILL_RANK=1 "$weft" launch -n 3 --servers 1 --max-restarts 1 -- \
    weft train "$cfg" --steps 40 --dist ps --ckpt-dir "$tmp/ck" --ckpt-every 10 >"$tmp/ft" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && ok || { bad "ps fault run exited $rc"; cat "$tmp/err" >&2; }
grep -q '^weft launch: rank 1 .*died on signal 9 (Killed); restarting' "$tmp/err" && ok || bad "no restart report"
grep -q '^resumed from step 20 ' "$tmp/err" && ok || bad "did not resume from step 20: $(grep -i resum "$tmp/err")"
grep -q '"ps-shard-0-40.safetensors"' "$tmp/ck/ckpt-000040.manifest.json" && [ -f "$tmp/ck/ps-shard-0-40.safetensors" ] && ok ||
    bad "the manifest does not list the server's shard: $(cat "$tmp/ck/ckpt-000040.manifest.json")"
[ ! -f "$tmp/ck/ps-shard-0-10.safetensors" ] && ok || bad "old shards are not removed (keep 3): $(ls "$tmp/ck")"
close "$(acc "$tmp/ft")" "$(acc "$tmp/ref")" 0.005 && ok || bad "accuracy after a restart $(acc "$tmp/ft") vs $(acc "$tmp/ref")"

# 5. Bad combinations fail on every rank with one clear message.
"$weft" launch -n 3 --servers 1 -- weft train "$cfg" --steps 5 --dist ps --consistency asp --backup 1 >/dev/null 2>"$tmp/err"
[ $? -ne 0 ] && grep -q 'backup workers need --consistency bsp' "$tmp/err" && ok || bad "--backup with asp: $(cat "$tmp/err")"

# 6. --device cuda. Where a one-process run has no GPU, every rank fails saying only that the
#    device is missing (not "not supported" or "CPU only"); where it has one, the ps run works there.
if "$weft" train "$cfg" --steps 1 --device cuda --quiet >/dev/null 2>&1; then
    "$weft" launch -n 3 --servers 1 -- weft train "$cfg" --steps 20 --dist ps --device cuda --quiet >"$tmp/outd" 2>"$tmp/errd"
    rc=$?
    [ $rc -eq 0 ] && grep -q '^final: .*steps=20 .*ranks=3' "$tmp/outd" && ok ||
        { bad "ps on cuda: exit $rc, out: $(cat "$tmp/outd")"; cat "$tmp/errd" >&2; }
else
    "$weft" launch -n 3 --servers 1 -- weft train "$cfg" --steps 20 --dist ps --device cuda --quiet >"$tmp/outd" 2>"$tmp/errd"
    rc=$?
    [ $rc -ne 0 ] && [ "$(grep -c 'rank [0-9]*): --device cuda: device cuda:0 is not available' "$tmp/errd")" -ge 1 ] &&
        ! grep -qi 'not supported\|cpu only\|use the cpu' "$tmp/errd" && ok ||
        bad "ps --device cuda without a GPU: exit $rc, $(grep 'weft train' "$tmp/errd")"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
