#!/usr/bin/env bash
# One GPU check, sized to finish within 7 minutes on one H200:
#   1. the GPU benchmark at 256M elements per dtype (copy, donated a*b, the
#      in-place op with the GPU lowering, the portable kernel it replaced,
#      the naive formula), the MLP step, and the optimised HLO per dtype;
#   2. the derivative routes (jax.hessian, grad of grad, ... in beta, the
#      gradient penalty) at 16M float32 against the formula, in a user's
#      jit (the GPU takes the families' evaluation in float32);
#   3. the test suite's numerics, autodiff, vmap, donation, lowering,
#      transfer, GPU-kernel, debugging and composability files on the GPU.
# Run from the repository root. The package is pure Python: no install.
#   bash benchmarks/gpu.sh [OUT_DIR]
set -uo pipefail
out="${1:-${OUT:-gpu-results}}"
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee "$out/gpu.txt"
python3 -c "import jax; print('jax', jax.__version__, jax.devices())" | tee -a "$out/gpu.txt"

timeout 150 python3 benchmarks/gpu_bench.py --json "$out/gpu_bench.json" \
    --hlo "$out" 2>&1 | tee "$out/gpu_bench.txt"

timeout 90 python3 -m jax_softplus.tools.bench --sizes "" --dtypes f32 \
    --repeats 5 --no-torch --derivatives 16M --json "$out/gpu_derivatives.json" \
    2>&1 | tee "$out/gpu_derivatives.txt"

# pytest may be missing on the GPU image; the tests need only hypothesis too.
timeout 200 python3 -m pytest -q -p no:cacheprovider \
    tests/test_backward.py tests/test_forward.py tests/test_autodiff.py \
    tests/test_vmap.py tests/test_donation.py tests/test_lowering.py \
    tests/test_transfers.py tests/test_gpu_kernel.py tests/test_debugging.py \
    tests/test_composability.py \
    2>&1 | tail -n 40 | tee "$out/gpu_tests.txt"
