#!/bin/sh
# weft graph: traces a model file's training step (no data set needed), writes
# DOT with the backward nodes marked, and saves a graph file that `weft info`
# reads as safetensors. Usage: cli_graph.sh PATH/TO/weft SOURCE_DIR
weft=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $1" >&2; fi; }

"$weft" graph "$src/models/logreg.cfg" --dot "$tmp/g.dot" --save "$tmp/g.wgraph" >"$tmp/out" 2>"$tmp/err"
ok "exit 0" "[ $? -eq 0 ]"
cat "$tmp/out"
# logreg: x, labels, 2 variables; view+linear+cross_entropy forward, then the ones constant and backward
ok "summary line" "grep -Eq '^graph: 16 nodes \(7 forward, 9 backward\): 11 ops, 2 variables, 1 constants, 2 placeholders; dot .*g.dot; saved .*g.wgraph$' '$tmp/out'"
ok "no stderr" "[ ! -s '$tmp/err' ]"
ok "dot header" "head -1 '$tmp/g.dot' | grep -q '^digraph weft {'"
ok "dot ends" "tail -1 '$tmp/g.dot' | grep -q '^}$'"
ok "forward linear" "grep -q 'linear_5\\\\nlinear' '$tmp/g.dot'"
ok "parameters by name" "grep -q '1.weight\\\\nvariable' '$tmp/g.dot'"
ok "backward cluster" "grep -q 'subgraph cluster_backward' '$tmp/g.dot'"
ok "9 backward nodes" "[ \$(grep -c 'fillcolor' '$tmp/g.dot') -eq 9 ]"
ok "edge shapes" "grep -q 'label=\"(128,784) f32\"' '$tmp/g.dot'"
# the graph file is plain safetensors
"$weft" info "$tmp/g.wgraph" >"$tmp/info"
ok "info reads it" "[ $? -eq 0 ]"
ok "weights" "grep -Eq '^var/1.weight +f32 +\(10,784\)' '$tmp/info'"
ok "format" "grep -q '^meta format = weft.graph' '$tmp/info'"
ok "version" "grep -q '^meta version = 1' '$tmp/info'"
# a language model too (token ids in, next tokens out)
"$weft" graph "$src/models/kjv-gpt.cfg" --dot "$tmp/gpt.dot" >"$tmp/out" 2>"$tmp/err"
ok "gpt exit 0" "[ $? -eq 0 ]"
ok "gpt summary" "grep -Eq '^graph: [0-9]+ nodes \([0-9]+ forward, [0-9]+ backward\)' '$tmp/out'"
ok "gpt embedding" "grep -q 'embedding' '$tmp/gpt.dot'"
# --optimize: the DOT of the optimised step graph, fused groups marked
"$weft" graph "$src/models/fmnist-mlp.cfg" --dot "$tmp/mlp.dot" --optimize >"$tmp/out" 2>"$tmp/err"
ok "optimize exit 0" "[ $? -eq 0 ]"
cat "$tmp/out"
ok "optimize summary" "grep -Eq '; optimised: [0-9]+ nodes, [1-9][0-9]* fused groups of [0-9]+ ops' '$tmp/out'"
ok "fused groups in dot" "grep -q 'fused: linear+relu' '$tmp/mlp.dot'"
ok "optimised dot ends" "tail -1 '$tmp/mlp.dot' | grep -q '^}$'"
ok "no backward cluster when optimised" "! grep -q 'cluster_backward' '$tmp/mlp.dot'"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
