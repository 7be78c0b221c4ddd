# Sourced by the launch_*.sh tests (after setting weft= and src=): a temp
# directory, one thread per rank, LSan settings for OpenMPI, and the counters.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export WEFT_NUM_THREADS=1
# Under ASan, OpenMPI's own allocations at exit are not ours to fix (full stack unwinding,
# so that the suppressions see the MPI libraries in the stacks).
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$src/tests/dist/lsan.supp:print_suppressions=0:fast_unwind_on_malloc=0"
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
