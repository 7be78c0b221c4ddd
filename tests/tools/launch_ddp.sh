#!/bin/sh
# `weft launch` + `weft train --dist ddp` on 2 ranks: the job runs, only rank 0
# reports (one final line, with ranks=2), checkpoints come with manifests, a
# resume ignores an incomplete (manifest-less) newer step, and errors end the
# whole job without a restart.
# Usage: launch_ddp.sh PATH/TO/weft SOURCE_DIR
weft=$1 src=$2
. "$src/tests/tools/launch_common.sh"
cfg=$src/models/logreg.cfg

# 1. Two ranks, 40 steps, checkpoints every 20: one final line with ranks=2.
"$weft" launch -n 2 -- weft train "$cfg" --steps 40 --dist ddp --ckpt-dir "$tmp/ck" --ckpt-every 20 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] && ok || { bad "ddp run exited $rc"; cat "$tmp/err" >&2; }
[ "$(grep -c '^final:' "$tmp/out")" -eq 1 ] && ok || bad "expected exactly one final line (rank 0 only), got: $(cat "$tmp/out")"
grep -q '^final: .*steps=40 .*ranks=2$' "$tmp/out" && ok || bad "final line lacks steps=40 ... ranks=2: $(cat "$tmp/out")"
# the global batch is 2 x 128: accuracy after 40 steps is well above chance
acc=$(sed -n 's/^final: test_acc=\([0-9.]*\).*/\1/p' "$tmp/out")
awk -v a="$acc" 'BEGIN { exit !(a > 0.6) }' && ok || bad "test_acc $acc <= 0.6"
for s in 000020 000040; do
    [ -f "$tmp/ck/ckpt-$s.safetensors" ] && [ -f "$tmp/ck/ckpt-$s.manifest.json" ] && ok ||
        bad "checkpoint $s or its manifest is missing: $(ls "$tmp/ck")"
done
grep -q '"parts":.*"ckpt-000040.safetensors"' "$tmp/ck/ckpt-000040.manifest.json" && ok ||
    bad "manifest does not list its part: $(cat "$tmp/ck/ckpt-000040.manifest.json")"

# 2. Resume skips a newer step without a manifest (a job killed mid-checkpoint)
#    and one whose manifest lists a missing part; it continues from step 40.
printf 'garbage' >"$tmp/ck/ckpt-000050.safetensors"
sed 's/000040/000045/g; s/"step":[^,]*/"step": 45/' "$tmp/ck/ckpt-000040.manifest.json" >"$tmp/ck/ckpt-000045.manifest.json"
"$weft" launch -n 2 -- weft train "$cfg" --steps 60 --dist ddp --ckpt-dir "$tmp/ck" --ckpt-every 20 --resume \
    >"$tmp/out2" 2>"$tmp/err2"
rc=$?
[ $rc -eq 0 ] && ok || { bad "resumed run exited $rc"; cat "$tmp/err2" >&2; }
grep -q 'resumed from step 40 ' "$tmp/err2" && ok || bad "did not resume from step 40: $(grep -i resum "$tmp/err2")"
grep -q '^final: .*steps=60 .*ranks=2$' "$tmp/out2" && ok || bad "resumed final line: $(cat "$tmp/out2")"
# the new checkpoints are complete
[ -f "$tmp/ck/ckpt-000060.manifest.json" ] && ok || bad "no manifest for step 60"

# 3. Plain mpirun works too (ddp is the default with more than one rank).
root=""
[ "$(id -u)" = 0 ] && root="--allow-run-as-root"
mpirun $root --oversubscribe --bind-to none -np 2 "$weft" train "$cfg" --steps 10 --quiet >"$tmp/out3" 2>"$tmp/err3"
rc=$?
[ $rc -eq 0 ] && grep -q '^final: .*steps=10 .*ranks=2$' "$tmp/out3" && [ "$(grep -c '^final:' "$tmp/out3")" -eq 1 ] && ok ||
    { bad "plain mpirun: exit $rc, out: $(cat "$tmp/out3")"; cat "$tmp/err3" >&2; }

# 3b. precision = f16 with clip: loss scaling under DDP (the ranks average scaled gradients, then
#     each unscales, clips and steps or skips alike); from a scale that overflows at first, it
#     backs off and learns as the f32 run does.
sed 's/^seed = 1$/seed = 1\nprecision = f16\nclip = 1\nloss_scale = 1e12/' "$cfg" >"$tmp/f16.cfg"
"$weft" launch -n 2 -- weft train "$tmp/f16.cfg" --steps 40 --dist ddp --quiet --ckpt-dir "$tmp/ckh" >"$tmp/outh" 2>"$tmp/errh"
rc=$?
acc=$(sed -n 's/^final: test_acc=\([0-9.]*\).*/\1/p' "$tmp/outh")
[ $rc -eq 0 ] && awk -v a="$acc" 'BEGIN { exit !(a > 0.6) }' && ok || { bad "f16 ddp: exit $rc, test_acc '$acc'"; cat "$tmp/errh" >&2; }
scale=$(grep -a -o '"loss_scale":"[0-9.e+]*"' "$tmp/ckh/ckpt-000040.safetensors" | cut -d'"' -f4)
awk -v s="$scale" 'BEGIN { exit !(s != "" && s < 1e12) }' && ok || bad "f16 ddp: the loss scale did not back off: '$scale'"

# 4. A NaN loss stops every rank at the same step with one message; not restarted.
printf '[net]\ndataset = fmnist\nbatch = 32\nepochs = 1\noptimizer = sgd\nlr = 900\nseed = 1\n[flatten]\n[linear]\nout = 64\n[relu]\n[linear]\nout = 10\n' >"$tmp/boom.cfg"
"$weft" launch -n 2 --max-restarts 3 -- weft train "$tmp/boom.cfg" --steps 50 --dist ddp --quiet >"$tmp/out4" 2>"$tmp/err4"
rc=$?
[ $rc -ne 0 ] && ok || bad "NaN run exited 0"
[ "$(grep -c 'the loss is NaN on rank' "$tmp/err4")" -eq 1 ] && ok || bad "expected one NaN message: $(cat "$tmp/err4")"
grep -q 'weft launch: .*not restarting' "$tmp/err4" && ok || bad "launcher did not say it is not restarting"

# 5. --device cuda. Where a one-process run has no GPU, every rank fails saying only that the
#    device is missing (not "not supported" or "CPU only"); where it has one, the ddp run works there.
if "$weft" train "$cfg" --steps 1 --device cuda --quiet >/dev/null 2>&1; then
    "$weft" launch -n 2 -- weft train "$cfg" --steps 20 --dist ddp --device cuda --quiet >"$tmp/outd" 2>"$tmp/errd"
    rc=$?
    [ $rc -eq 0 ] && grep -q '^final: .*steps=20 .*ranks=2' "$tmp/outd" && ok ||
        { bad "ddp on cuda: exit $rc, out: $(cat "$tmp/outd")"; cat "$tmp/errd" >&2; }
else
    "$weft" launch -n 2 -- weft train "$cfg" --steps 20 --dist ddp --device cuda --quiet >"$tmp/outd" 2>"$tmp/errd"
    rc=$?
    [ $rc -ne 0 ] && [ "$(grep -c 'rank [0-9]*): --device cuda: device cuda:0 is not available' "$tmp/errd")" -ge 1 ] &&
        ! grep -qi 'not supported\|cpu only\|use the cpu' "$tmp/errd" && ok ||
        bad "ddp --device cuda without a GPU: exit $rc, $(grep 'weft train' "$tmp/errd")"
fi

# 6. Launcher usage errors: exit 2 and one line.
"$weft" launch -- weft train "$cfg" 2>"$tmp/e" ; [ $? -eq 2 ] && grep -q -- '-n N' "$tmp/e" && ok || bad "launch without -n"
"$weft" launch -n 2 2>"$tmp/e" ; [ $? -eq 2 ] && grep -q 'command is needed' "$tmp/e" && ok || bad "launch without a command"
"$weft" launch -n 2 --servers 2 -- weft train "$cfg" 2>"$tmp/e" ; [ $? -eq 2 ] && grep -q 'no worker' "$tmp/e" && ok ||
    bad "servers >= ranks"
"$weft" train "$cfg" --consistency ssp:x 2>"$tmp/e" ; [ $? -eq 2 ] && grep -q 'ssp:S' "$tmp/e" && ok || bad "bad --consistency"
"$weft" train "$cfg" --straggle 1 2>"$tmp/e" ; [ $? -eq 2 ] && grep -q 'RANK:FACTOR' "$tmp/e" && ok || bad "bad --straggle"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
