#!/usr/bin/env bash
# The GPU checks of the cost-model issue as one prepared script (predicted vs measured step time on one GPU,
# before and after `planmap profile`; bench/profile.py --platform gpu).
#
#   tools/gpu_check.sh prepare   # here, with PyPI: wheels of planmap's dependencies a GPU image lacks -> .whl/
#   tools/gpu_check.sh run       # on the GPU machine (python3 with JAX + CUDA, no network), repository root:
#                                # installs .whl/ and planmap into /tmp/site, writes $OUT/profile-gpu.md
#
# The GPU image brings JAX with its CUDA plugin, numpy, scipy, typer and rich; pydantic and ruamel.yaml travel
# as CPython 3.12 manylinux wheels. Pyomo and HiGHS are not needed: the bench builds no integer program.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=(pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.7.0 typing-inspection==0.4.2
        ruamel.yaml==0.19.1 ruamel.yaml.clib==0.2.15)
case "${1:-}" in
  prepare)
    ex=$(git rev-parse --git-path info/exclude); mkdir -p "$(dirname "$ex")"
    grep -qx '/.whl/' "$ex" 2>/dev/null || echo /.whl/ >> "$ex"
    plats=()
    for n in 28 27 17; do plats+=(--platform "manylinux_2_${n}_x86_64"); done
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      "${plats[@]}" --platform manylinux2014_x86_64 -d .whl "${WHEELS[@]}"
    ls .whl ;;
  run)
    out=${OUT:-bench/results}
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site .
    export PYTHONPATH=/tmp/site
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
    python3 -c "import jax; print(jax.__version__, jax.devices())"
    PYTHONUNBUFFERED=1 python3 bench/profile.py --platform gpu --repeats "${REPEATS:-7}" --runs "${RUNS:-3}" \
      --out "$out/profile-gpu.md" ;;
  *)
    echo "usage: tools/gpu_check.sh prepare|run" >&2; exit 2 ;;
esac
