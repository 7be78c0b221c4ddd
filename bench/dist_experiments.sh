#!/usr/bin/env bash
# The distributed-training experiments of docs/distributed.md ("Experiments"):
#   1. stragglers: one of 4 parameter-server workers slowed 2x, under BSP, SSP(1), SSP(3), ASP and BSP with
#      1 backup worker (plus BSP without a straggler as the reference): throughput, final accuracy,
#      time to a target accuracy, and a PNG of test accuracy against wall time;
#   2. data parallel accuracy: 1 process with batch 128 against DDP on 2 ranks x 64 (and 4 ranks x 32),
#      same global batch and epochs.
# Prints the tables in markdown on stdout (progress on stderr); the runs stay in a temporary directory.
#
# Usage: bench/dist_experiments.sh            (from the repository root, after `make build`)
# Environment (defaults in brackets):
#   WEFT=build/weft       the weft executable
#   EPOCHS=10             straggler runs: epochs (the cosine schedule spans them)
#   EVAL_EVERY=20         straggler runs: evaluate every N steps of worker 0 (118 steps per epoch with 4 workers)
#   STRAGGLER=1           the slowed worker rank (not 0: worker 0 evaluates and reports)
#   FACTOR=2              its slow-down (--straggle RANK:FACTOR)
#   TARGET=0.85           the accuracy for "time to target"
#   REPEAT=2              straggler runs: rounds (every mode once per round); the table and the plot use each
#                         mode's run with the highest throughput, to damp other load on the machine
#   DDP_EPOCHS=10         data-parallel runs: epochs
#   DDP_SEEDS="1 2"       data-parallel runs: seeds
#   DDP_RANKS="2 4"       data-parallel rank counts (global batch 128 = ranks x 128/ranks)
#   PLOT=docs/img/stragglers.png   where the plot goes ("" for none)
#   ONLY=straggle|ddp     run one experiment only
#   WORK=DIR              keep the runs there (default: a new mktemp -d directory)
set -euo pipefail

WEFT=${WEFT:-build/weft}
MODEL=${MODEL:-models/fmnist-mlp.cfg}
EPOCHS=${EPOCHS:-10}
EVAL_EVERY=${EVAL_EVERY:-20}
STRAGGLER=${STRAGGLER:-1}
FACTOR=${FACTOR:-2}
TARGET=${TARGET:-0.85}
REPEAT=${REPEAT:-2}
DDP_EPOCHS=${DDP_EPOCHS:-10}
DDP_SEEDS=${DDP_SEEDS:-1 2}
DDP_RANKS=${DDP_RANKS:-2 4}
PLOT=${PLOT-docs/img/stragglers.png}
ONLY=${ONLY:-}
WORK=${WORK:-$(mktemp -d /tmp/weft-dist-exp.XXXXXX)}

[ -x "$WEFT" ] || { echo "dist_experiments: $WEFT not found (run make build)" >&2; exit 1; }
mkdir -p "$WORK"
echo "dist_experiments: runs in $WORK; load average $(cut -d" " -f1-3 /proc/loadavg)" >&2

# Run a command, prefixing every output line (stdout and stderr of all ranks) with the wall time.
stamped() {
    local log=$1
    shift
    "$@" 2>&1 | while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done >"$log"
    return "${PIPESTATUS[0]}"
}

# The value of KEY=... in the run's final line.
final_field() { grep -o " final: .*" "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }

# ---------------------------------------------------------------- 1. stragglers
straggle_run() { # name, round, extra arguments...
    local name=$1 round=$2
    shift 2
    local dir=$WORK/straggle-$name-$round
    mkdir -p "$dir"
    echo "dist_experiments: stragglers: $name (round $round)" >&2
    local t=$EPOCHREALTIME
    if ! stamped "$dir/log" env WEFT_NUM_THREADS=1 "$WEFT" launch -n 5 --servers 1 -- weft train "$WORK/model.cfg" \
        --dist ps --epochs "$EPOCHS" --log-dir "$dir" "$@"; then
        echo "dist_experiments: $name failed; see $dir/log" >&2
        tail -5 "$dir/log" >&2
        return 1
    fi
    echo "dist_experiments: $name took $(awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.0f", b-a}') s" >&2
    # curve.dat: seconds since worker 0's first training step (its first progress line), step, accuracy in %.
    # The evaluation lines of the log and the evaluated rows of metrics.csv are in the same order.
    local t0
    t0=$(grep -m1 -E '^[0-9.]+ epoch [0-9]+ step [0-9]+/' "$dir/log" | cut -d' ' -f1)
    grep -E '^[0-9.]+ (step [0-9]+ \(epoch [0-9]+\)|epoch [0-9]+):.*test accuracy' "$dir/log" | cut -d' ' -f1 >"$dir/times"
    awk -F, 'NR > 1 && $5 != "nan" && $5 != "" {print $1, $5}' "$dir/metrics.csv" >"$dir/evals"
    if [ "$(wc -l <"$dir/times")" != "$(wc -l <"$dir/evals")" ]; then
        echo "dist_experiments: $name: $(wc -l <"$dir/times") evaluation lines but $(wc -l <"$dir/evals") in metrics.csv" >&2
        return 1
    fi
    paste -d' ' "$dir/times" "$dir/evals" | awk -v t0="$t0" '{printf "%.3f %d %.2f\n", $1 - t0, $2, 100 * $3}' >"$dir/curve.dat"
}

straggle_row() { # name, label
    local dir=$WORK/straggle-$1
    local sps acc ttt last
    sps=$(final_field "$dir/log" samples_per_s)
    acc=$(final_field "$dir/log" test_acc)
    ttt=$(awk -v tg="$TARGET" '$3 >= 100 * tg {printf "%.1f", $1; found = 1; exit} END {if (!found) printf "not reached"}' "$dir/curve.dat")
    last=$(tail -1 "$dir/curve.dat" | awk '{printf "%.1f", $1}')
    printf '| %s | %s | %.2f %% | %s | %s |\n' "$2" "$sps" "$(awk -v a="$acc" 'BEGIN{print 100 * a}')" "$ttt" "$last"
}

if [ "$ONLY" != ddp ]; then
    # The model file with an evaluation every EVAL_EVERY steps, so that each run gives a curve.
    sed "s/^\[net\]\$/[net]\neval_every = $EVAL_EVERY/" "$MODEL" >"$WORK/model.cfg"
    s="--straggle $STRAGGLER:$FACTOR"
    names=(bsp-nostraggle asp-nostraggle bsp ssp1 ssp3 asp bsp-backup1)
    labels=("BSP, no straggler (reference)" "ASP, no straggler (reference)" "BSP" "SSP, bound 1" "SSP, bound 3" "ASP"
        "BSP + 1 backup worker")
    args=("--consistency bsp" "--consistency asp" "--consistency bsp $s" "--consistency ssp:1 $s" "--consistency ssp:3 $s"
        "--consistency asp $s" "--consistency bsp --backup 1 $s")
    declare -A best=()
    for ((round = 1; round <= REPEAT; round++)); do
        for i in "${!names[@]}"; do
            # shellcheck disable=SC2086 # the arguments are split on purpose
            straggle_run "${names[$i]}" "$round" ${args[$i]} || continue
            n=${names[$i]}
            sps=$(final_field "$WORK/straggle-$n-$round/log" samples_per_s)
            if [ -z "${best[$n]:-}" ] || [ "$sps" -gt "$(final_field "$WORK/straggle-$n-${best[$n]}/log" samples_per_s)" ]; then
                best[$n]=$round
            fi
        done
    done

    echo
    echo "Stragglers: $MODEL, parameter server with 4 workers + 1 server (weft launch -n 5 --servers 1)," \
        "worker $STRAGGLER slowed ${FACTOR}x (--straggle $STRAGGLER:$FACTOR), batch 128 per worker, $EPOCHS epochs," \
        "evaluation every $EVAL_EVERY steps of worker 0, WEFT_NUM_THREADS=1; best of $REPEAT runs by throughput."
    echo
    echo "| mode | samples/s | final test accuracy | time to $(awk -v t="$TARGET" 'BEGIN{print 100 * t}') % (s) | time to the last evaluation (s) |"
    echo "| --- | ---: | ---: | ---: | ---: |"
    plot_args=""
    for i in "${!names[@]}"; do
        n=${names[$i]}
        if [ -z "${best[$n]:-}" ]; then
            echo "| ${labels[$i]} | failed | | | |"
            continue
        fi
        straggle_row "$n-${best[$n]}" "${labels[$i]}"
        dt=$([[ $n = *nostraggle ]] && echo "dt 2" || echo "dt 1")
        plot_args+="${plot_args:+, }\"$WORK/straggle-$n-${best[$n]}/curve.dat\" using 1:3 with linespoints pt 7 ps 0.4 lw 2 $dt title \"${labels[$i]}\""
    done
    if [ -n "$PLOT" ] && [ -n "$plot_args" ]; then
        if command -v gnuplot >/dev/null; then
            gnuplot <<GP
set terminal pngcairo size 900,500 font ",10" noenhanced
set output "$PLOT"
set title "fmnist-mlp, parameter server, 4 workers, worker $STRAGGLER slowed ${FACTOR}x"
set xlabel "wall time since the first step (s)"
set ylabel "test accuracy (%)"
set yrange [75:*]
set key bottom right
set grid
plot $plot_args, $(awk -v t="$TARGET" 'BEGIN{print 100 * t}') with lines dt 3 lc rgb "gray" title "target"
GP
            echo "dist_experiments: wrote $PLOT" >&2
        else
            echo "dist_experiments: gnuplot not found (apt-get install gnuplot-nox); no plot" >&2
        fi
    fi
fi

# ---------------------------------------------------------------- 2. data parallel accuracy
ddp_run() { # name, seed, command...
    local name=$1 seed=$2
    shift 2
    local dir=$WORK/ddp-$name-seed$seed
    mkdir -p "$dir"
    echo "dist_experiments: data parallel: $name seed $seed" >&2
    if ! stamped "$dir/log" "$@" --epochs "$DDP_EPOCHS" --seed "$seed" --log-dir "$dir"; then
        echo "dist_experiments: $name seed $seed failed; see $dir/log" >&2
        tail -5 "$dir/log" >&2
        return 1
    fi
}

if [ "$ONLY" != straggle ]; then
    for seed in $DDP_SEEDS; do
        ddp_run single "$seed" env WEFT_NUM_THREADS=2 "$WEFT" train "$MODEL" --dist none || true
        for n in $DDP_RANKS; do
            ddp_run "ddp$n" "$seed" env WEFT_NUM_THREADS=1 "$WEFT" launch -n "$n" -- weft train "$MODEL" --dist ddp \
                --batch $((128 / n)) || true
        done
    done
    echo
    echo "Data parallel accuracy: $MODEL, $DDP_EPOCHS epochs, global batch 128, same learning rate and cosine schedule."
    echo
    hdr="| run | batch per rank | steps |"
    sep="| --- | ---: | ---: |"
    for seed in $DDP_SEEDS; do
        hdr+=" test acc. (seed $seed) |"
        sep+=" ---: |"
    done
    echo "$hdr mean | samples/s (seed ${DDP_SEEDS%% *}) |"
    echo "$sep ---: | ---: |"
    for cfg in single $(for n in $DDP_RANKS; do echo "ddp$n"; done); do
        if [ "$cfg" = single ]; then
            label="1 process (WEFT_NUM_THREADS=2)" b=128
        else
            label="DDP, ${cfg#ddp} ranks (WEFT_NUM_THREADS=1)" b=$((128 / ${cfg#ddp}))
        fi
        row="| $label | $b |"
        accs=() steps="" sps=""
        for seed in $DDP_SEEDS; do
            log=$WORK/ddp-$cfg-seed$seed/log
            a=$(final_field "$log" test_acc 2>/dev/null || true)
            [ -z "$steps" ] && steps=$(final_field "$log" steps 2>/dev/null || true)
            [ -z "$sps" ] && sps=$(final_field "$log" samples_per_s 2>/dev/null || true)
            accs+=("${a:-failed}")
        done
        row+=" ${steps:-?} |"
        for a in "${accs[@]}"; do
            if [ "$a" = failed ]; then row+=" failed |"; else row+=" $(awk -v a="$a" 'BEGIN{printf "%.2f %%", 100 * a}') |"; fi
        done
        mean=$(printf '%s\n' "${accs[@]}" | awk '$1 != "failed" {s += $1; n++} END {if (n) printf "%.2f %%", 100 * s / n; else printf "-"}')
        echo "$row $mean | ${sps:-?} |"
    done
fi
