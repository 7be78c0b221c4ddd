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
# OpenMPI is built without frame pointers: only the slow unwinder reaches the
# library frames those suppressions match.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
# Keep OpenMPI's plugins loaded at exit, so the leak reports above can name
# them (a dlclose'd plugin shows up as an unknown module no suppression matches).
export OMPI_MCA_mca_base_component_disable_dlclose=1
exec mpirun $root --oversubscribe --bind-to none -np "$np" "$@"
