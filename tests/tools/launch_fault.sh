#!/bin/sh
# Fault tolerance: rank 1 of a 2-rank DDP job kills itself (SIGKILL) at a
# random step on the first attempt. `weft launch --max-restarts 1` must name
# the rank and the signal, restart from the latest complete checkpoint, and
# finish; the final accuracy is within 0.5 points of an uninterrupted run.
# Usage: launch_fault.sh PATH/TO/weft SOURCE_DIR
weft=$1 src=$2
. "$src/tests/tools/launch_common.sh"
cfg=$src/models/logreg.cfg
steps=80
# run "LAUNCH OPTIONS" [TRAIN OPTIONS...]
run() {
    l=$1
    shift
    "$weft" launch $l -- weft train "$cfg" --steps $steps --dist ddp "$@"
}

run "-n 2" --quiet >"$tmp/ref" 2>"$tmp/ref.err" || { bad "uninterrupted run failed"; cat "$tmp/ref.err" >&2; }

# a random step after the first checkpoint and before the last one
k=$(awk 'BEGIN { srand(); print 11 + int(rand() * 60) }')
echo "killing rank 1 at step $k"
WEFT_TEST_KILL_AT_STEP=$k WEFT_TEST_KILL_RANK=1 \
    run "-n 2 --max-restarts 1" --ckpt-dir "$tmp/ck" --ckpt-every 10 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && ok || { bad "interrupted run exited $rc"; cat "$tmp/err" >&2; }
grep -q "^weft launch: rank 1 .*died on signal 9 (Killed); restarting from the latest complete checkpoint (restart 1 of 1)" \
    "$tmp/err" && ok || { bad "no report naming rank 1 and signal 9"; cat "$tmp/err" >&2; }
[ "$(grep -c '^weft launch:' "$tmp/err")" -eq 1 ] && ok || bad "expected exactly one launcher report"
resumed=$(sed -n 's/^resumed from step \([0-9]*\) .*/\1/p' "$tmp/err")
# (the rank dies right after step k, before that step's checkpoint)
[ -n "$resumed" ] && [ "$resumed" -lt "$k" ] && [ $((k - resumed)) -le 10 ] && ok ||
    bad "resumed from step '$resumed', expected the last multiple of 10 before $k"
grep -q "^final: .*steps=$steps .*ranks=2$" "$tmp/out" && ok || bad "final line: $(cat "$tmp/out")"
a=$(sed -n 's/^final: test_acc=\([0-9.]*\).*/\1/p' "$tmp/ref")
b=$(sed -n 's/^final: test_acc=\([0-9.]*\).*/\1/p' "$tmp/out")
echo "test_acc uninterrupted $a, with a restart $b"
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= 0.005) }' && ok ||
    bad "accuracy differs by more than 0.5 points: $a vs $b"

# Out of restarts: the same kill with --max-restarts 0 ends the job with the
# rank's status, and the launcher says so.
WEFT_TEST_KILL_AT_STEP=5 WEFT_TEST_KILL_RANK=0 run "-n 2" --ckpt-dir "$tmp/ck2" --quiet >"$tmp/out2" 2>"$tmp/err2"
rc=$?
[ $rc -ne 0 ] && ok || bad "a job whose rank died exited 0"
grep -q "^weft launch: rank 0 .*died on signal 9 (Killed); no restarts left" "$tmp/err2" && ok ||
    { bad "no 'no restarts left' report"; cat "$tmp/err2" >&2; }

# No --ckpt-dir: the restart starts from scratch, and says so.
WEFT_TEST_KILL_AT_STEP=5 WEFT_TEST_KILL_RANK=1 run "-n 2 --max-restarts 1" --quiet >"$tmp/out3" 2>"$tmp/err3"
rc=$?
[ $rc -eq 0 ] && grep -q "restarting from scratch" "$tmp/err3" && grep -q "^final: .*steps=$steps .*ranks=2$" "$tmp/out3" && ok ||
    { bad "restart without checkpoints: exit $rc"; cat "$tmp/err3" >&2; }
# (same seed and data order: from scratch gives the uninterrupted result exactly)
c=$(sed -n 's/^final: test_acc=\([0-9.]*\).*/\1/p' "$tmp/out3")
[ "$c" = "$a" ] && ok || bad "from-scratch restart gave test_acc $c, uninterrupted $a"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
