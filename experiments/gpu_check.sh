#!/usr/bin/env bash
# The whole-tree check on a GPU machine, in one command, one step after another:
#   1. every GPU test (pytest tests/gpu, xdist workers compile kernels in parallel);
#   2. compute-sanitizer memcheck and racecheck over each benchmark's --sanitize case;
#   3. the quick reproduce, with each experiment's time.
# Steps run in sequence on purpose: several processes compiling kernels at once
# slow each other down far past their time limits (seen on the lent H100).
#
#   experiments/gpu_check.sh OUT_DIR [tests] [sanitize] [reproduce]     (default: all three)
#
# One device call is limited to 10 minutes: name the parts that fit (on a fresh H100 machine the GPU tests
# took 79 s with 14 workers, then 244 s with 15 once the tensor-core lean tests were in (H100, 2026-11-23);
# the timing tests 155 s, 116 s of it `sparsekit bench uspmm` + `sparsekit tune` compiling; the quick
# reproduce 99 s). Each step writes OUT_DIR/<step>.log and gets its
# own time limit in seconds (environment: TESTS_S, TIMING_S, SANITIZE_S per sanitizer run,
# REPRODUCE_S; WORKERS for pytest); a summary line per step goes to stdout and
# OUT_DIR/summary.txt. The exit status is 1 if any step failed or timed out.
set -u
out=${1:?usage: experiments/gpu_check.sh OUT_DIR [tests] [sanitize] [reproduce]}
shift
parts=" ${*:-tests sanitize reproduce} "
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"   # the repository's packages, installed or not
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-ci}
# One BLAS/OpenMP thread pair per process: xdist workers and benchmark pools each starting 16 BLAS threads
# oversubscribed the H100 machine's 16 cores (tests/gpu: 325 s without this, 79 s with it).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-2} MKL_NUM_THREADS=${MKL_NUM_THREADS:-2}
failed=0

step() {   # step NAME SECONDS COMMAND...: run with a time limit, log, one summary line
    local name=$1 limit=$2
    shift 2
    local start=$SECONDS
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    local verdict=ok
    [ "$rc" -eq 124 ] && verdict="TIMED OUT after ${limit} s"
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && verdict="FAILED (exit $rc)"
    [ "$rc" -ne 0 ] && failed=1
    echo "$name: $verdict in $((SECONDS - start)) s" | tee -a "$out/summary.txt"
}

if [[ $parts == *" tests "* ]]; then
    step gpu_tests "${TESTS_S:-420}" python3 -m pytest tests/gpu -m "not timing" -v -n "${WORKERS:-14}" \
        -p no:cacheprovider -rfE -W ignore::numba.core.errors.NumbaPerformanceWarning
    # the timing tests alone on the device, after the parallel part (as sparsekit.testsuite runs them)
    step gpu_timing_tests "${TIMING_S:-300}" python3 -m pytest tests/gpu -m timing -v -p no:cacheprovider -rfE \
        -W ignore::numba.core.errors.NumbaPerformanceWarning
    grep -hE "^(FAILED|ERROR) " "$out/gpu_tests.log" "$out/gpu_timing_tests.log" | sort -u | tee -a "$out/summary.txt"
fi

if [[ $parts == *" sanitize "* ]]; then
    for case in "bench_foundation.py --sanitize" "bench_uspmm.py --sanitize" "bench_uspmm.py --sanitize wgmma" \
                "bench_sparsify24.py --sanitize" "bench_persistent_rnn.py --sanitize" "bench_teaching.py sanitize"; do
        name=${case%%.py*}
        [[ $case == *" wgmma" ]] && name+=_wgmma     # (the wgmma kernel's case: a step of its own, ~45 s a tool)
        for tool in memcheck racecheck; do
            # shellcheck disable=SC2086  # the case's arguments split on purpose
            step "${tool}_${name#bench_}" "${SANITIZE_S:-120}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
                python3 -W ignore experiments/$case
        done
    done
fi

if [[ $parts == *" reproduce "* ]]; then
    step reproduce_quick "${REPRODUCE_S:-300}" python3 -W ignore -m sparsekit.cli reproduce --quick \
        --out "$out/reproduce"
    grep -E "^\[reproduce\] [a-z_0-9]+: [0-9.]+ s$" "$out/reproduce_quick.log" | tee -a "$out/summary.txt"
fi
exit $failed
