#!/bin/sh
# Run a distributed test: tests/dist/mpirun.sh NP PROGRAM [ARGS...]
# --oversubscribe: more ranks than cores on a small machine; root (containers,
# CI) needs --allow-run-as-root. Shared memory between ranks (vader) is used
# when it works; tcp on loopback is the fallback OpenMPI picks by itself.
np=$1
shift
root=""
[ "$(id -u)" = 0 ] && root="--allow-run-as-root"
# Under ASan, OpenMPI's own allocations at exit are not ours to fix.
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$(dirname "$0")/lsan.supp:print_suppressions=0"
exec mpirun $root --oversubscribe --bind-to none -np "$np" "$@"
