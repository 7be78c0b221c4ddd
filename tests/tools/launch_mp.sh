#!/bin/sh
# Model parallelism from the command line (weft train --tp/--pp/--zero under
# weft launch): a small byte GPT trained 6 steps gives the single process's
# final losses (printed to 4 decimals) under tensor, pipeline (every
# schedule) and 3D layouts, also in f16 with loss scaling; ZeRO 1 and 2
# give the data-parallel run's; a checkpoint written by one layout resumes
# on others (and on one process, and the other way) as if uninterrupted; a
# killed rank restarts from it;
# bad layouts fail before any data is read, naming the setting.
# Usage: launch_mp.sh PATH/TO/weft SOURCE_DIR
weft=$1 src=$2
. "$src/tests/tools/launch_common.sh"
cfg=$tmp/gpt.cfg
cat >"$cfg" <<'CFG'
[net]
dataset = kjv
context = 32
batch = 8
epochs = 100
steps = 6
optimizer = adamw
lr = 1e-3
weight_decay = 0.01
clip = 1.0
seed = 1
eval_every = 3

[embedding]
vocab = 256
dim = 32
position = learned

[transformer]
heads = 4
blocks = 2

[layernorm]

[linear]
out = vocab
CFG
# A text of its own (no download): verses of numbered words.
awk 'BEGIN { for (i = 0; i < 3000; i++) printf "%d:%d And the word %d was with %d, and it was good.\n", i % 50, i % 31, i * 7 % 101, i % 13 }' >"$tmp/text.txt"

# run N OUT [TRAIN OPTIONS...]: the final line into OUT (stderr into OUT.err);
# quiet unless $loud is set (a resumed run says so on stderr)
run() {
    n=$1 out=$2
    shift 2
    q=--quiet
    [ -n "$loud" ] && q=
    if [ "$n" = 1 ]; then
        "$weft" train "$cfg" --text "$tmp/text.txt" --eval-batches 2 $q "$@" >"$out" 2>"$out.err"
    else
        "$weft" launch -n "$n" -- weft train "$cfg" --text "$tmp/text.txt" --eval-batches 2 $q "$@" >"$out" 2>"$out.err"
    fi || { bad "run $n $*: exit $?"; cat "$out.err" >&2; }
}
# The final losses (the train loss averages the steps since the last log:
# a resumed run's covers fewer, so after a resume only val_loss is compared).
losses() { sed -n 's/^final: \(val_loss=[0-9.]* train_loss=[0-9.]*\).*/\1/p' "$1"; }
val() { sed -n 's/^final: \(val_loss=[0-9.]*\).*/\1/p' "$1"; }
same_val() { # same_val WHAT A B
    a=$(val "$2") b=$(val "$3")
    [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "$1: '$b', expected '$a'"
}
same() { # same WHAT A B
    a=$(losses "$2") b=$(losses "$3")
    [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "$1: '$b', expected '$a'"
}

run 1 "$tmp/ref"
echo "one process: $(losses "$tmp/ref")"
run 2 "$tmp/tp2" --tp 2
same "tp=2" "$tmp/ref" "$tmp/tp2"
grep -q "^final: .* ranks=2 tp=2 pp=1 dp=1 zero=0$" "$tmp/tp2" && ok || bad "final line: $(cat "$tmp/tp2")"
run 2 "$tmp/pp2" --pp 2
same "pp=2 (1f1b)" "$tmp/ref" "$tmp/pp2"
run 2 "$tmp/gpipe" --pp 2 --schedule gpipe --microbatches 4 --recompute
same "pp=2 gpipe, 4 micro-batches, recompute" "$tmp/ref" "$tmp/gpipe"
run 2 "$tmp/inter" --pp 2 --schedule interleaved --virtual-stages 2 --microbatches 2
same "pp=2 interleaved" "$tmp/ref" "$tmp/inter"
run 4 "$tmp/3d" --tp 2 --pp 2
same "tp=2 x pp=2" "$tmp/ref" "$tmp/3d"

# Dropout: the ranks of a replica draw the same masks, as one process does.
sed 's/^\[transformer\]/[dropout]\np = 0.2\n\n[transformer]/' "$cfg" >"$tmp/drop.cfg"
cfg0=$cfg cfg=$tmp/drop.cfg
run 1 "$tmp/dref"
run 2 "$tmp/dtp" --tp 2
same "dropout, tp=2" "$tmp/dref" "$tmp/dtp"
# Stages by hand (`stage = K` on every layer section).
awk '{ print } /^\[(embedding|transformer)\]/ { print "stage = 0" } /^\[(layernorm|linear)\]/ { print "stage = 1" }' \
    "$cfg0" >"$tmp/stages.cfg"
cfg=$tmp/stages.cfg
run 2 "$tmp/st" --pp 2
same "stage = 0 / 1 by hand, pp=2" "$tmp/ref" "$tmp/st"
cfg=$cfg0

# precision = f16 (loss scaling, clip = 1 on the unscaled gradients) from a
# scale its gradients overflow: steps 1 and 2 are skipped and the scale
# backs off to 262144. The overflow reaches some ranks' gradients only, so
# a rank that checked its own alone would step where the others skip. One
# micro-batch: the pipeline computes what one process does. tp=2 regroups
# f16 sums (within 0.002); ZeRO 1 as the plain data-parallel average.
sed 's/^seed = 1$/seed = 1\nprecision = f16\nloss_scale = 1048576/' "$cfg0" >"$tmp/f16.cfg"
cfg=$tmp/f16.cfg
run 1 "$tmp/href" --ckpt-dir "$tmp/ckh"
grep -a -q '"loss_scale":"262144"' "$tmp/ckh/ckpt-000006.safetensors" && ok ||
    bad "f16: the scale did not back off twice: $(grep -a -o '"loss_scale":"[0-9]*"' "$tmp/ckh/ckpt-000006.safetensors")"
run 2 "$tmp/hpp" --pp 2 --microbatches 1
same "f16, pp=2" "$tmp/href" "$tmp/hpp"
run 2 "$tmp/htp" --tp 2
a=$(val "$tmp/href" | cut -d= -f2) b=$(val "$tmp/htp" | cut -d= -f2)
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; exit !(a != "" && b != "" && d < 0.002 && d > -0.002) }' && ok ||
    bad "f16, tp=2: val_loss $b, one process $a"
run 2 "$tmp/hdp"
run 2 "$tmp/hz1" --zero 1
same "f16, zero=1" "$tmp/hdp" "$tmp/hz1"
cfg=$cfg0

# Data parallel replicas (dp = 2): ZeRO 1 and 2 as the plain average.
run 4 "$tmp/dp" --tp 2
run 4 "$tmp/z1" --tp 2 --zero 1
same "tp=2 dp=2 zero=1" "$tmp/dp" "$tmp/z1"
run 4 "$tmp/z2" --pp 2 --zero 2
same "pp=2 dp=2 zero=2" "$tmp/dp" "$tmp/z2"

# Checkpoints across layouts: written at step 3 by one, continued by another.
run 4 "$tmp/w3d" --tp 2 --pp 2 --steps 3 --ckpt-dir "$tmp/ck3d"
[ -f "$tmp/ck3d/ckpt-000003.manifest.json" ] && [ -f "$tmp/ck3d/ckpt-000003.r3.safetensors" ] && ok ||
    bad "no manifest and per-rank parts: $(ls "$tmp/ck3d")"
# weft eval reads a model-parallel checkpoint through its manifest (every piece, whole)
"$weft" eval "$cfg" --ckpt "$tmp/ck3d/ckpt-000003.manifest.json" --text "$tmp/text.txt" --eval-batches 2 \
    >"$tmp/ev" 2>"$tmp/ev.err" && ok || bad "eval of a manifest: $(cat "$tmp/ev.err")"
same_val "eval of the tp2 x pp2 checkpoint" "$tmp/w3d" "$tmp/ev"
resume() { # resume WHAT FROM N [OPTIONS...]
    what=$1 from=$2
    shift 2
    rm -rf "$tmp/ck" && cp -r "$from" "$tmp/ck"
    n=$1
    shift
    loud=1 run "$n" "$tmp/res" --ckpt-dir "$tmp/ck" --resume "$@"
    grep -q "^resumed from step 3 " "$tmp/res.err" && ok || bad "$what: not resumed: $(cat "$tmp/res.err")"
}
resume "tp2 x pp2 -> 1 process" "$tmp/ck3d" 1
same_val "tp2 x pp2 -> 1 process" "$tmp/ref" "$tmp/res"
resume "tp2 x pp2 -> tp=2" "$tmp/ck3d" 2 --tp 2
same_val "tp2 x pp2 -> tp=2" "$tmp/ref" "$tmp/res"
resume "tp2 x pp2 -> pp=4" "$tmp/ck3d" 4 --pp 4
same_val "tp2 x pp2 -> pp=4" "$tmp/ref" "$tmp/res"
resume "tp2 x pp2 -> tp=4" "$tmp/ck3d" 4 --tp 4
same_val "tp2 x pp2 -> tp=4" "$tmp/ref" "$tmp/res"
# (two replicas read other windows after the resume: it continues, to other numbers)
resume "tp2 x pp2 -> pp=2 x dp=2" "$tmp/ck3d" 4 --pp 2
grep -q "^final: .*steps=6 .* tp=1 pp=2 dp=2 zero=0$" "$tmp/res" && ok || bad "pp=2 x dp=2 after a resume: $(cat "$tmp/res")"
run 1 "$tmp/w1" --steps 3 --ckpt-dir "$tmp/ck1"
resume "1 process -> tp2 x pp2" "$tmp/ck1" 4 --tp 2 --pp 2
same_val "1 process -> tp2 x pp2" "$tmp/ref" "$tmp/res"
run 4 "$tmp/wz" --tp 2 --zero 1 --steps 3 --ckpt-dir "$tmp/ckz"
resume "zero=1 -> zero=2 on pp=2" "$tmp/ckz" 4 --pp 2 --zero 2
same_val "zero=1 -> zero=2 on pp=2" "$tmp/dp" "$tmp/res"
resume "zero=1 -> no zero" "$tmp/ckz" 4 --tp 2
same_val "zero=1 -> no zero" "$tmp/dp" "$tmp/res"

# A rank killed after step 4 (checkpoints every 2): the launcher restarts
# the job, which resumes from step 4's checkpoint and finishes as if nothing happened.
WEFT_TEST_KILL_AT_STEP=4 WEFT_TEST_KILL_RANK=3 "$weft" launch -n 4 --max-restarts 1 -- weft train "$cfg" \
    --text "$tmp/text.txt" --eval-batches 2 --quiet --tp 2 --pp 2 --ckpt-dir "$tmp/ckk" --ckpt-every 2 \
    >"$tmp/kill" 2>"$tmp/kill.err" && ok || { bad "killed job did not finish"; cat "$tmp/kill.err" >&2; }
grep -q "^weft launch: rank 3 .*died on signal 9" "$tmp/kill.err" && ok || bad "no report of rank 3's death"
same_val "tp2 x pp2 killed at step 4 and restarted" "$tmp/ref" "$tmp/kill"

# Bad layouts: errors naming the setting, before the data is read (the text
# file does not exist, and that is not what they report).
fails() { # fails WHAT PATTERN N [OPTIONS...]
    what=$1 pat=$2 n=$3
    shift 3
    if [ "$n" = 1 ]; then "$weft" train "$cfg" --text /nonexistent/text "$@" >/dev/null 2>"$tmp/f.err"
    else "$weft" launch -n "$n" -- weft train "$cfg" --text /nonexistent/text "$@" >/dev/null 2>"$tmp/f.err"; fi
    rc=$?
    [ $rc -ne 0 ] && grep -q "$pat" "$tmp/f.err" && ! grep -q nonexistent "$tmp/f.err" && ok ||
        { bad "$what: exit $rc, $(cat "$tmp/f.err")"; }
}
fails "tp=2 alone" "tp = 2 and pp = 1 need at least 2 processes" 1 --tp 2
fails "4 ranks, tp=3" "not divisible by tp \* pp = 3 \* 1" 4 --tp 3
sed -e 's/^heads = 4/heads = 3/' -e 's/^dim = 32/dim = 36/' "$cfg" >"$tmp/gpt3.cfg"
"$weft" launch -n 2 -- weft train "$tmp/gpt3.cfg" --text /nonexistent/text --tp 2 >/dev/null 2>"$tmp/f.err"
[ $? -ne 0 ] && grep -q "tp = 2: .*heads" "$tmp/f.err" && ! grep -q nonexistent "$tmp/f.err" && ok ||
    bad "3 heads over tp=2: $(cat "$tmp/f.err")"
fails "microbatches 3" "microbatches = 3 does not divide batch = 8" 2 --pp 2 --microbatches 3
fails "too many stages" "is more than the model's 5 layers" 2 --pp 2 --schedule interleaved --virtual-stages 3 --microbatches 2
"$weft" launch -n 2 -- weft train "$tmp/stages.cfg" --text /nonexistent/text --pp 2 --schedule interleaved \
    --microbatches 2 >/dev/null 2>"$tmp/f.err"
[ $? -ne 0 ] && grep -q "places layers on stages 0..1, but pp = 2 x virtual_stages makes 4 stages" "$tmp/f.err" && ok ||
    bad "stages 0..1 with 4 chunks: $(cat "$tmp/f.err")"
"$weft" train "$cfg" --zero 3 >/dev/null 2>"$tmp/f.err"
[ $? -eq 2 ] && grep -q "zero" "$tmp/f.err" && ok || bad "--zero 3: $(cat "$tmp/f.err")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
