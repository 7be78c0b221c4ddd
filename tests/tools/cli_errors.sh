#!/bin/sh
# The weft CLI on bad input: each case must exit non-zero with exactly one
# line on stderr naming the problem, and never crash (exit code >= 128).
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
expect 1 "unknown option '--nope'" -- "$weft" train "$cfg" --nope
expect 1 "needs a value" -- "$weft" train "$cfg" --steps
expect 1 "batch" -- "$weft" train "$cfg" --batch -3
expect 1 "dataset-fashion-mnist" -- "$weft" train "$cfg" --data-dir "$tmp/none" --steps 1
expect 2 "--ckpt" -- "$weft" eval "$cfg"
expect 1 "bad.safetensors" -- "$weft" eval "$cfg" --ckpt "$tmp/bad.safetensors"
expect 1 "not a language model" -- "$weft" sample "$cfg" --ckpt "$tmp/bad.safetensors"
expect 1 "bad.safetensors" -- "$weft" info "$tmp/bad.safetensors"
expect 1 "expected a non-negative integer" -- "$weft" train "$cfg" --ckpt-every many
expect 2 "--dot FILE" -- "$weft" graph "$cfg"
# a device that is not there (no GPU here; cuda:15 on a GPU machine) fails before any data is read
expect 1 "device cuda:15" -- "$weft" train "$cfg" --device cuda:15 --steps 1
expect 1 "unknown device 'tpu'" -- "$weft" train "$cfg" --device tpu --steps 1
expect 1 "bad.cfg:3" -- "$weft" graph "$tmp/bad.cfg" --dot "$tmp/x.dot"
expect 1 "unknown option '--nope'" -- "$weft" graph "$cfg" --nope
expect 1 "cannot open" -- "$weft" graph "$cfg" --dot "$tmp/no/such/dir/x.dot"
expect 1 "graph_save" -- "$weft" graph "$cfg" --save "$tmp/no/such/dir/x.wgraph"
expect 2 "unknown command" -- "$weft" frobnicate
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
