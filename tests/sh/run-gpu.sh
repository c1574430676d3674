#!/bin/sh
# run-gpu.sh: how tests/run.sh counts the GPU tests (tests/gpu/*_test.c,
# built into TESTDIR/gpu), on stand-in programs: one that finds no CUDA
# device (status 77) is a skip, and the line before the summary says how
# many ("N GPU tests skipped: no CUDA device"); with MEDHA_CUDA=0 and
# none built, that they were not built; --unit runs none; --gpu (make
# test-gpu) runs them alone, shows their output, and fails on a skip.
. "$(dirname "$0")/lib.sh"
t=$tmp/tree
mkdir -p "$t/tests/sh" "$t/tests/gpu" "$t/contrib" "$t/build/gpu"
cp "$top/tests/run.sh" "$t/tests/"
cp "$top/contrib/gpu-env.sh" "$t/contrib/"
: >"$t/tests/gpu/a_test.c"
: >"$t/tests/gpu/b_test.c"
nodev='#!/bin/sh
echo "ok   self-check 1e-7"
echo "skip: no CUDA device (driver too old)"
exit 77'
printf '%s\n' "$nodev" >"$t/build/gpu/a_test"
printf '%s\n' "$nodev" >"$t/build/gpu/b_test"
chmod +x "$t/build/gpu/a_test" "$t/build/gpu/b_test"
run() {
	st=0
	sh "$t/tests/run.sh" "$@" >"$tmp/out" 2>&1 || st=$?
}

run "$t/build" "$bin"
[ "$st" = 0 ] || { cat "$tmp/out"; exit 1; }
grep -q '^skip gpu/a_test: no CUDA device (driver too old)$' "$tmp/out"
tail -n 2 "$tmp/out" | head -n 1 | grep -q '^2 GPU tests skipped: no CUDA device$'
tail -n 1 "$tmp/out" | grep -q '^0 passed, 0 failed, 2 skipped$'

run --unit "$t/build" "$bin"
! grep -q 'gpu/' "$tmp/out"

run --gpu "$t/build" "$bin"
[ "$st" = 1 ] || { cat "$tmp/out"; exit 1; }
grep -q '^FAIL gpu/a_test (status 77)' "$tmp/out"
grep -q '^    skip: no CUDA device' "$tmp/out"

# one passes, one fails: counted, the failure's output shown
printf '#!/bin/sh\necho "ok   a case 1e-3"\n' >"$t/build/gpu/a_test"
printf '#!/bin/sh\necho "FAIL a case 0.5 (tol 1e-2)"\nexit 1\n' >"$t/build/gpu/b_test"
run --gpu "$t/build" "$bin"
[ "$st" = 1 ]
grep -q '^ok   gpu/a_test' "$tmp/out"
grep -q '^    ok   a case 1e-3' "$tmp/out"
grep -q '^    FAIL a case 0.5' "$tmp/out"
tail -n 1 "$tmp/out" | grep -q '^1 passed, 1 failed, 0 skipped$'

# not built: said, and no failure (CUDA=0)
rm "$t/build/gpu/a_test" "$t/build/gpu/b_test"
MEDHA_CUDA=0
export MEDHA_CUDA
run "$t/build" "$bin"
[ "$st" = 0 ]
grep -q '^2 GPU tests not built (CUDA=0' "$tmp/out"
