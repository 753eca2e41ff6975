#!/usr/bin/env bash
# The checks that need a CUDA device, as one command for a machine lent with a GPU: the `gpu` tests, then the ensemble
# benchmark's CUDA record (ResNet-18-GN, cnn and the papers' MNIST CNNs against Opacus one model at a time). Such a
# machine has torch but no package registry: opacus, dp-accounting and dm-tree travel as wheels in .whl/ (ignored by
# git), fetched here with `pip download --no-deps --only-binary=:all: --python-version 3.12 ... -d .whl NAME==VERSION`.
# Logs and the record go to $OUT (default gpu-checks/); the record is also written to
# benchmarks/results/ensemble_cuda_resnet.json.
# Usage: bash tools/gpu_checks.sh    # the tests get at most 240 s, the benchmark 330 s
set -u
cd "$(dirname "$0")/.."
out=${OUT:-gpu-checks}
mkdir -p "$out"
if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD:$PWD/workflow${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$out/device.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" 2>&1 | tee -a "$out/device.txt"
# the modules that hold `gpu` tests (tests/test_hygiene.py keeps the list whole): others import what such a machine
# lacks (Snakemake, jsonschema), which would stop the collection
modules=(tests/engine/test_ensemble.py tests/engine/test_layerwise.py tests/engine/test_ghost.py
  tests/attacks/test_canary_run.py tests/test_opacus_records.py)
timeout 240 python3 -m pytest -m gpu -n 0 -p no:cacheprovider -q -rs "${modules[@]}" 2>&1 | tee "$out/gpu_tests.txt"
tests=${PIPESTATUS[0]}
timeout 330 python3 benchmarks/record.py ensemble_cuda_resnet -- python3 benchmarks/ensemble.py --device cuda \
  --architectures resnet18-gn-cifar cnn cnn-small cnn-d2p2 --steps 30 --repeats 1 2>&1 | tee "$out/ensemble.txt"
benchmark=${PIPESTATUS[0]}
[ "$benchmark" -eq 0 ] && cp benchmarks/results/ensemble_cuda_resnet.json "$out/"
echo "gpu tests: exit $tests; ensemble benchmark: exit $benchmark"
[ "$tests" -eq 0 ] && [ "$benchmark" -eq 0 ]
