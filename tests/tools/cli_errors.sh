#!/bin/sh
# The weft CLI on bad input: each case must exit with the documented status
# (2: bad usage, 1: anything else that fails) and exactly one line on stderr
# naming the problem, and never crash (exit code >= 128). Then what eval
# prints for a checkpoint, and a resume with another optimiser's checkpoint,
# on a tiny synthetic Fashion-MNIST (no data set needed).
# Usage: cli_errors.sh PATH/TO/weft SOURCE_DIR
weft=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0

# expect CODE PATTERN -- command...: exit status CODE, one stderr line matching PATTERN
expect() {
    code=$1 pat=$2
    shift 3
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    lines=$(wc -l <"$tmp/err")
    if [ "$rc" -eq "$code" ] && [ "$lines" -eq 1 ] && grep -q -- "$pat" "$tmp/err"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL: $* -> exit $rc, $lines stderr line(s):" >&2
        cat "$tmp/err" >&2
    fi
}

printf '[net]\ndataset = fmnist\nbogus = 1\n[flatten]\n[linear]\nout = 10\n' >"$tmp/bad.cfg"
printf 'not a checkpoint' >"$tmp/bad.safetensors"
cfg=$src/models/fmnist-mlp.cfg
expect 1 "bad.cfg:3" -- "$weft" train "$tmp/bad.cfg"
expect 1 "cannot open" -- "$weft" train "$tmp/missing.cfg"
# bad usage, every subcommand: 2
expect 2 "unknown option '--nope'" -- "$weft" train "$cfg" --nope
expect 2 "unknown option '--bogus'" -- "$weft" train "$cfg" --bogus
expect 2 "unknown option '-x'" -- "$weft" train "$cfg" -x
expect 2 "unknown option '--bogus'" -- "$weft" train "$tmp/missing.cfg" --bogus # usage first, before the file
expect 2 "'--batch' needs a value" -- "$weft" train "$cfg" --batch
expect 2 "needs a value" -- "$weft" train "$cfg" --steps
expect 2 "batch" -- "$weft" train "$cfg" --batch -3
expect 2 "expected a non-negative integer" -- "$weft" train "$cfg" --ckpt-every many
expect 2 "--threads" -- "$weft" train "$cfg" --threads 0
expect 2 "--dist: expected ddp, ps or none" -- "$weft" train "$cfg" --dist xyz
expect 2 "unknown device 'tpu'" -- "$weft" train "$cfg" --device tpu --steps 1
expect 2 "'--resume' is not one of weft eval's" -- "$weft" eval "$cfg" --ckpt x --resume
expect 2 "'--prompt' is not one of weft train's" -- "$weft" train "$cfg" --prompt hi
expect 2 "unknown option '--nope'" -- "$weft" eval "$cfg" --nope
expect 2 "--ckpt" -- "$weft" eval "$cfg"
expect 2 "'--ckpt' needs a value" -- "$weft" sample "$cfg" --ckpt
expect 2 "--temperature: expected a number" -- "$weft" sample "$src/models/kjv-gpt.cfg" --ckpt x --temperature hot
expect 2 "--dot FILE" -- "$weft" graph "$cfg"
expect 2 "unknown option '--nope'" -- "$weft" graph "$cfg" --nope
expect 2 "'--dot' needs a value" -- "$weft" graph "$cfg" --dot
expect 2 "unknown option '--frobnicate'" -- "$weft" info --frobnicate
expect 2 "at most one file" -- "$weft" info a b
expect 2 "takes no arguments" -- "$weft" version --bogus
expect 2 "takes no arguments" -- "$weft" ops x
expect 2 "unknown option '--bogus'" -- "$weft" launch --bogus
expect 2 "model file is needed" -- "$weft" train
expect 2 "unknown command" -- "$weft" frobnicate
# failures that are not usage: 1
expect 1 "dataset-fashion-mnist" -- "$weft" train "$cfg" --data-dir "$tmp/none" --steps 1
expect 1 "bad.safetensors" -- "$weft" eval "$cfg" --ckpt "$tmp/bad.safetensors"
expect 1 "not a language model" -- "$weft" sample "$cfg" --ckpt "$tmp/bad.safetensors"
expect 1 "bad.safetensors" -- "$weft" info "$tmp/bad.safetensors"
# a device that is not there (no GPU here; cuda:15 on a GPU machine) fails before any data is read
expect 1 "device cuda:15" -- "$weft" train "$cfg" --device cuda:15 --steps 1
expect 1 "bad.cfg:3" -- "$weft" graph "$tmp/bad.cfg" --dot "$tmp/x.dot"
expect 1 "cannot open" -- "$weft" graph "$cfg" --dot "$tmp/no/such/dir/x.dot"
expect 1 "graph_save" -- "$weft" graph "$cfg" --save "$tmp/no/such/dir/x.wgraph"
expect 2 "--onnx FILE is needed" -- "$weft" export "$cfg"
expect 2 "unknown option '--dot'" -- "$weft" export "$cfg" --dot "$tmp/x.dot"
expect 2 "'--onnx' needs a value" -- "$weft" export "$cfg" --onnx
expect 2 "--batch" -- "$weft" export "$cfg" --onnx "$tmp/m.onnx" --batch 0
expect 1 "bad.cfg:3" -- "$weft" export "$tmp/bad.cfg" --onnx "$tmp/m.onnx"

# A tiny Fashion-MNIST in IDX files (64 training and 32 test images of
# constant pixels, labels 0..9 in turn): enough to train a few steps.
mkdir -p "$tmp/fm"
idx() { # idx FILE MAGIC_BYTE COUNT: an IDX header (28x28 images for magic 3)
    printf '\000\000\010\'"$2" >"$1"
    printf "\\$(printf %03o $(($3 / 65536 / 256 % 256)))\\$(printf %03o $(($3 / 65536 % 256)))" >>"$1"
    printf "\\$(printf %03o $(($3 / 256 % 256)))\\$(printf %03o $(($3 % 256)))" >>"$1"
    [ "$2" = 003 ] && printf '\000\000\000\034\000\000\000\034' >>"$1"
}
for split in train:64 t10k:32; do
    name=${split%:*} n=${split#*:}
    idx "$tmp/fm/$name-images-idx3-ubyte" 003 "$n"
    head -c $((n * 784)) /dev/zero | tr '\000' '\200' >>"$tmp/fm/$name-images-idx3-ubyte"
    idx "$tmp/fm/$name-labels-idx1-ubyte" 001 "$n"
    i=0
    while [ $i -lt "$n" ]; do printf "\\$(printf %03o $((i % 10)))"; i=$((i + 1)); done >>"$tmp/fm/$name-labels-idx1-ubyte"
done
sgd=$src/models/logreg.cfg # optimizer = sgd
sed 's/^optimizer = sgd/optimizer = adam/; s/^lr = 0.1/lr = 0.001/' "$sgd" >"$tmp/adam.cfg"
grep -q '^optimizer = adam' "$tmp/adam.cfg" || { echo "FAIL: could not make an adam model file" >&2; fail=$((fail + 1)); }
train() { "$weft" train "$@" --data-dir "$tmp/fm" --batch 8 --quiet; }

# eval prints the checkpoint's step and no training fields (no nan)
if train "$sgd" --steps 6 --ckpt-dir "$tmp/ck" >"$tmp/out" 2>"$tmp/err"; then
    "$weft" eval "$sgd" --ckpt "$tmp/ck/ckpt-000006.safetensors" --data-dir "$tmp/fm" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -eq 0 ] && grep -q '^final: test_acc=[0-9.]* test_loss=[0-9.]* steps=6 seconds=[0-9.]*$' "$tmp/out" &&
        ! grep -qi 'nan\|train_loss\|samples_per_s' "$tmp/out"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL: eval -> exit $rc: $(cat "$tmp/out" "$tmp/err")" >&2
    fi
else
    fail=$((fail + 1))
    echo "FAIL: training the tiny model: $(cat "$tmp/err")" >&2
fi

# --resume with another optimiser's checkpoint (Adam state, SGD model file) is refused, naming both
if train "$tmp/adam.cfg" --steps 4 --ckpt-dir "$tmp/ck_adam" >"$tmp/out" 2>"$tmp/err"; then
    expect 1 "written by optimiser adam, but the model file's optimiser is sgd" -- \
        "$weft" train "$sgd" --steps 8 --ckpt-dir "$tmp/ck_adam" --resume --data-dir "$tmp/fm" --batch 8 --quiet
    # the same optimiser resumes
    if train "$tmp/adam.cfg" --steps 8 --ckpt-dir "$tmp/ck_adam" --resume >"$tmp/out" 2>"$tmp/err" &&
        grep -q '^final: .* steps=8 ' "$tmp/out"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "FAIL: resume with the same optimiser: $(cat "$tmp/out" "$tmp/err")" >&2
    fi
else
    fail=$((fail + 1))
    echo "FAIL: training the tiny adam model: $(cat "$tmp/err")" >&2
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
