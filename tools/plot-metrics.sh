#!/usr/bin/env bash
# Plot a `weft train --log-dir DIR` run: DIR/metrics.csv -> a PNG with the
# training loss and the evaluation loss (and test accuracy when present).
# Usage: tools/plot-metrics.sh DIR OUT.png [TITLE]     (needs gnuplot: apt-get install gnuplot-nox)
set -euo pipefail
dir=$1 out=$2 title=${3:-$(basename "$dir")}
csv=$dir/metrics.csv
[ -f "$csv" ] || { echo "plot-metrics: $csv not found" >&2; exit 1; }
command -v gnuplot >/dev/null || { echo "plot-metrics: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
evalname=$(head -1 "$csv" | cut -d, -f4)
acc=""   # language models log no accuracy
[ "$evalname" = test_loss ] && acc=", \"$csv\" using 1:5 every ::1 axes x1y2 with linespoints pt 5 ps 0.6 title \"test accuracy\""
gnuplot <<GP
set datafile separator ","
set datafile missing "nan"
set terminal pngcairo size 900,500 font ",10" noenhanced
set output "$out"
set title "$title"
set xlabel "step"
set ylabel "loss"
set key center right
set grid
$( [ -n "$acc" ] && printf 'set y2tics\nset y2label "test accuracy"' )
plot "$csv" using 1:3 every ::1 with lines lw 1 title "train loss", \
     "$csv" using 1:4 every ::1 with linespoints pt 7 ps 0.6 lw 2 title "$evalname" $acc
GP
echo "wrote $out"
