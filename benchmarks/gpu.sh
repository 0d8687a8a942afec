#!/usr/bin/env bash
# The GPU run, in one go, sized to finish within 10 minutes on one H200:
#   1. the memory-floor benchmark at 256M elements per dtype (copy, donated
#      a*b, the in-place op with the GPU lowering, the portable kernel, the
#      naive formula), the MLP step, and the optimised HLO per dtype;
#   2. the bench rows: the op in a user's jit (16M), each derivative
#      route against the formula (16M; on a GPU the derivative families are
#      evaluated in float64, as on a CPU), and eager calls;
#   3. the accuracy search on the GPU itself: values of every dtype and the
#      derivatives of float32 and float64 (fewer points than the docs' CPU
#      run), against float64 NumPy and mpmath;
#   4. the test suite's backward, HIGHEST, platform, GPU-kernel, donation
#      and special-value files on the GPU.
# Each step has its own time limit, so that a slow one leaves the others
# their time; a step cut short leaves its rows out of the tables.
# It writes OUT/gpu.md (the docs' table: copy it to docs/tables/gpu.md) and
# OUT/gpu-results.tgz (everything: unpack it into
# benchmarks/results/<gpu>-<date>/, then `python benchmarks/gpu_bench.py
# --render benchmarks/results/<gpu>-<date>/gpu_bench.json --tables
# docs/tables` writes docs/tables/gpu.md from it). Run from the repository root; the package is
# pure Python, no install:
#   bash benchmarks/gpu.sh [OUT_DIR]
# GPU_SH_QUICK=1 runs every step at toy sizes, on any machine (a check of
# the script itself, not a measurement: 2.5 minutes on 2 CPU cores, as
# docs/tables/timings.md records).
set -uo pipefail
usage="usage: bash benchmarks/gpu.sh [OUT_DIR]  (GPU_SH_QUICK=1: toy sizes, any machine)"
case "${1:-}" in
-h | --help)
    echo "$usage"
    exit 0
    ;;
-*)
    echo "$usage" >&2
    echo "gpu.sh: error: unknown option '$1' (the one argument is the output folder)" >&2
    exit 2
    ;;
esac
if [ $# -gt 1 ]; then
    echo "$usage" >&2
    echo "gpu.sh: error: one argument at most (the output folder), got $#" >&2
    exit 2
fi
if [ "${GPU_SH_QUICK:-0}" != 1 ] && ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "gpu.sh: error: no GPU here (no nvidia-smi); GPU_SH_QUICK=1 runs the script at toy sizes on any machine" >&2
    exit 2
fi
out="${1:-${OUT:-gpu-results}}"
res="$out/results"
mkdir -p "$res"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
started=$SECONDS
if [ "${GPU_SH_QUICK:-0}" = 1 ]; then
    size=$((1 << 16)) floor_args="--iters 2 --rounds 2 --step-rounds 2"
    bench_sizes=64K derivatives=64K repeats=2 bench_dtypes=f32
    accuracy_args="--quick -n 2000 --n64 100 --nd 8 --dtypes f32,f64"
    tests="tests/test_platforms.py -k lowered_as"
else
    # Sized from the 2026-12-04 run (jax 0.11.2, H200): the bench rows at
    # 16M and 256M took over 225 s, the accuracy search at 200,000 points
    # per cell 155 s, and 110 s ran a third of the 14 test files listed then.
    # The steps' limits add up to 570 s.
    size=$((256 << 20)) floor_args="" bench_sizes=16M derivatives=16M
    repeats=5 bench_dtypes=f32,bf16,f16
    accuracy_args="-n 100000 --n64 1000 --nd 300"
    tests="tests/test_backward.py tests/test_highest.py tests/test_platforms.py
        tests/test_gpu_kernel.py tests/test_donation.py tests/test_specials.py"
fi
step() { echo "== $(( (SECONDS - started) / 60 )) min: $*"; }

step "machine"
(nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv \
    || echo "no nvidia-smi") | tee "$res/gpu.txt"
python3 -c "import jax; print('jax', jax.__version__, jax.devices())" \
    | tee -a "$res/gpu.txt"

step "memory floor, MLP step, HLO"
# shellcheck disable=SC2086
timeout 80 python3 benchmarks/gpu_bench.py --size "$size" $floor_args \
    --json "$res/gpu_bench.json" --hlo "$res" 2>&1 | tee "$res/gpu_bench.txt"

# Three runs of the bench, each with its own limit and folder, so that one
# cut short loses its own rows alone (the bench writes its tables at the end).
step "bench rows: the op in a user's jit"
timeout 90 python3 -m tools.bench --sizes "$bench_sizes" \
    --dtypes "$bench_dtypes" --repeats "$repeats" --no-torch --user-jit \
    --tables "$res/bench" 2>&1 | tee "$res/bench.txt"
step "bench rows: derivative routes"
timeout 100 python3 -m tools.bench --sizes none \
    --dtypes "$bench_dtypes" --repeats "$repeats" --no-torch \
    --derivatives "$derivatives" --tables "$res/derivatives" 2>&1 \
    | tee "$res/bench-derivatives.txt"
step "bench rows: eager calls"
timeout 60 python3 -m tools.bench --sizes none --repeats "$repeats" \
    --no-torch --eager --tables "$res/eager" 2>&1 | tee "$res/bench-eager.txt"

step "accuracy on the GPU"
# shellcheck disable=SC2086
timeout 120 python3 -m tools.accuracy $accuracy_args \
    --tables "$res/accuracy" 2>&1 | tee "$res/accuracy-values.txt" | tail -n 60

step "tests"
# shellcheck disable=SC2086
timeout 120 python3 -m pytest -q -p no:cacheprovider $tests 2>&1 \
    | tail -n 40 | tee "$res/tests.txt"

step "tables"
python3 benchmarks/gpu_bench.py --render "$res/gpu_bench.json" --tables "$out" \
    && cp "$out/gpu.md" "$res/gpu.md"
tar czf "$out/gpu-results.tgz" -C "$res" .
step "done"
