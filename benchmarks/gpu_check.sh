#!/usr/bin/env bash
# One device call: build pyg_fast for sm_90 (and torch_scatter 2.1.2 as a baseline), run every test (GPU tests included), optionally under
# compute-sanitizer, run the benchmarks and print their summary.
#
#   bash benchmarks/gpu_check.sh        # from the repository root, with .device carried
#
# .device/ must hold torch_scatter-2.1.2.tar.gz, fetched on a CPU machine with
#   pip download --no-build-isolation --no-deps --no-binary :all: torch-scatter==2.1.2 -d .device
# and the datasets the benchmarks read (../shared does not travel):
#   mkdir -p .device/datasets && cp -r ../shared/datasets/{planetoid,hetero_types,entities,magnn,hgb,heterophilous,wordnet} .device/datasets/
# Without it (or if its build fails) the benchmarks run without torch_scatter.
#
# Files written to $OUT (at most 8 come back): gpu_check.log (everything below),
# build_pyg_fast.log, build_torch_scatter.log, tests.log, sanitize.log (SANITIZE=1),
# results.json, summary.md.
#
# Environment switches, for partial runs:
#   SUITES=segment_reduce,spmm   benchmark suites to run (default: all)
#   PYG_FAST_BENCH_GRAPHS=cora,sbm_1000  only these graphs, in every suite
#   QUICK=1                      benchmarks on the small graphs only
#   PYG_FAST_BENCH_BUDGET=10,40  warm-up and measurement ms per timing (default 25,100)
#   BENCH_DEVICE=cpu             benchmark another device (a dry run of this script on a CPU machine)
#   SKIP_BUILD=1                 reuse the extension already built in the tree
#   INSTALL_CHECK=1              build through README's GPU command in a fresh virtualenv instead
#                                (install_check.log), then run everything below with that venv
#   SKIP_TORCH_SCATTER=1         do not build the baselines (torch_scatter, torch_sparse); SKIP_TORCH_SPARSE=1 only torch_sparse
#   SKIP_TESTS=1 / SKIP_BENCH=1  skip the tests / the benchmarks
#   PYTEST_ARGS="-q -x"          pytest options; TESTS=tests the test paths
#   SANITIZE=1                   also run the CUDA op tests under compute-sanitizer
#                                (memcheck and racecheck; SANITIZE_TESTS picks the files,
#                                SANITIZE_K the pytest -k expression, default "cuda")
#   TORCH_SCATTER_BUILD_S=330    the limit on each baseline's build
#   DEVICE_CALL_S=600            the device call's limit: the benchmarks are interrupted (their
#                                results so far kept) 20 s before it; BENCH_TIMEOUT_S overrides
#   PYG_FAST_COMMIT, PYG_FAST_CSRC_TREE  the commit and its csrc tree, recorded in results.json
#                                (csrc_tree itself is hashed from the files that ran; csrc_dirty says
#                                whether they differ from PYG_FAST_CSRC_TREE); taken from git when
#                                not given, but the device's git metadata is stale: pass both
set -uo pipefail
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_check_out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
PY=${PYTHON:-python3}
DEVICE_CALL_S=${DEVICE_CALL_S:-600}
log() { echo "[gpu_check $(date +%T) +${SECONDS}s] $*"; }

log "machine and versions"
nvidia-smi || true
nvcc --version 2>/dev/null | tail -2
$PY -c "import sys, torch, triton, torch_geometric as pyg; print('python', sys.version.split()[0], '| torch', torch.__version__, 'cuda', torch.version.cuda, '| triton', triton.__version__, '| torch_geometric', pyg.__version__)"
if git rev-parse HEAD >/dev/null 2>&1; then
  export PYG_FAST_COMMIT=${PYG_FAST_COMMIT:-$(git rev-parse HEAD)}
  export PYG_FAST_CSRC_TREE=${PYG_FAST_CSRC_TREE:-$(git rev-parse HEAD:pyg_fast/csrc)}
  git status --short | head -20
fi
log "commit ${PYG_FAST_COMMIT:-unknown}, csrc tree of the commit ${PYG_FAST_CSRC_TREE:-unknown}"

# Headers that CUDA_HOME lacks on the device live in pip's nvidia/* packages (device_build.md).
export TORCH_CUDA_ARCH_LIST=9.0 FORCE_CUDA=1
export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(readlink -f "$(which nvcc)")")")}
NVIDIA_SITE=$($PY -c "import nvidia; print(list(nvidia.__path__)[0])" 2>/dev/null)
for h in cusparse.h cublas_v2.h cublasLt.h cusolverDn.h; do
  if [ ! -f "$CUDA_HOME/include/$h" ] && [ -n "$NVIDIA_SITE" ]; then
    d=$(dirname "$(ls "$NVIDIA_SITE"/*/include/$h 2>/dev/null | head -1)")
    [ "$d" != "." ] && export CPATH=${CPATH:+$CPATH:}$d
  fi
done

# ../shared does not travel to the device: the datasets the benchmarks read are carried in .device/.
if [ -z "${PYG_FAST_DATA:-}" ] && [ -d .device/datasets ]; then export PYG_FAST_DATA=$PWD/.device/datasets; fi

# Baselines built from their PyPI source tarballs in .device/ (pip download --no-build-isolation --no-deps
# --no-binary :all: torch-scatter==2.1.2 torch-sparse==0.6.18 -d .device): torch_scatter (CUDA
# variants, for the segment and SpMM suites) and torch_sparse (CPU variants: its CPU neighbour sampler
# is the sampler suite's baseline; it imports torch_scatter). A package built by an earlier call
# (.device/<name>_pkg.tar.gz, what this script leaves in $OUT) is unpacked instead. Their setup.py
# compiles serially (use_ninja=False) and twice (CPU and CUDA variants): more than 10 minutes each;
# with ninja and one variant, torch_scatter takes about 4 minutes on 16 cores.
TORCH_SCATTER_DIR=$PWD/.device/site
build_baseline() {  # name (torch_scatter | torch_sparse), variant switch (FORCE_ONLY_CUDA | FORCE_ONLY_CPU)
  local name=$1 only=$2 tarball src
  tarball=$(ls .device/${name/_/-}-*.tar.gz .device/${name}-*.tar.gz 2>/dev/null | head -1)
  [ -n "$tarball" ] || { log "$name: no source tarball in .device/"; return 1; }
  rm -rf /tmp/${name}_src && mkdir -p /tmp/${name}_src && tar xzf "$tarball" -C /tmp/${name}_src
  src=$(ls -d /tmp/${name}_src/*/ | head -1)
  sed -i 's/use_ninja=False/use_ninja=True/' "$src/setup.py"
  (cd "$src" && env $only=1 MAX_JOBS=16 timeout "${TORCH_SCATTER_BUILD_S:-330}" $PY setup.py build_ext --inplace) \
    >"$OUT/build_$name.log" 2>&1 || return 1
  mkdir -p "$TORCH_SCATTER_DIR" && cp -r "$src/$name" "$TORCH_SCATTER_DIR/"
  tar czf "$OUT/${name}_pkg.tar.gz" -C "$TORCH_SCATTER_DIR" "$name"
}
for spec in torch_scatter:FORCE_ONLY_CUDA torch_sparse:FORCE_ONLY_CPU; do
  name=${spec%%:*}
  [ "${SKIP_TORCH_SCATTER:-0}" = 1 ] && break
  [ "$name" = torch_sparse ] && [ "${SKIP_TORCH_SPARSE:-0}" = 1 ] && continue
  [ -d "$TORCH_SCATTER_DIR/$name" ] && continue
  if [ -f .device/${name}_pkg.tar.gz ]; then
    mkdir -p "$TORCH_SCATTER_DIR" && tar xzf .device/${name}_pkg.tar.gz -C "$TORCH_SCATTER_DIR"
    log "$name: unpacked the package built by an earlier call"
  else
    log "building $name (before pyg_fast: in the background of other builds it never ends)"
    build_baseline "$name" "${spec##*:}" && log "$name built" || { tail -20 "$OUT/build_$name.log"; log "$name build FAILED"; }
  fi
done

if [ "${INSTALL_CHECK:-0}" = 1 ]; then
  # README's GPU command in a fresh virtualenv. The device reaches no package index, so the venv
  # sees the machine's torch and PyG (a .pth naming their site-packages, which is itself a venv on
  # the device) and pip installs pyg_fast alone; the editable install builds the extension in the
  # tree, which the steps below then use.
  log "install check: fresh virtualenv, FORCE_CUDA=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 pip install --no-build-isolation -e ."
  rm -rf /tmp/pyg_fast_venv && $PY -m venv /tmp/pyg_fast_venv
  $PY -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" \
    >"$(/tmp/pyg_fast_venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/machine_packages.pth"
  install_start=$SECONDS
  if ! MAX_JOBS=16 /tmp/pyg_fast_venv/bin/pip install --no-build-isolation --no-deps --no-index -e . >"$OUT/install_check.log" 2>&1; then
    tail -40 "$OUT/install_check.log"
    log "install check FAILED; stopping"
    exit 1
  fi
  log "install check: pip install took $((SECONDS - install_start)) s"
  (cd /tmp && /tmp/pyg_fast_venv/bin/python -m pyg_fast) || { log "install check: python -m pyg_fast FAILED"; exit 1; }
  PY=/tmp/pyg_fast_venv/bin/python
  SKIP_BUILD=1
fi

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  log "building pyg_fast (sm_90)"
  if ! MAX_JOBS=12 $PY setup.py build_ext --inplace >"$OUT/build_pyg_fast.log" 2>&1; then
    tail -60 "$OUT/build_pyg_fast.log"
    log "pyg_fast build FAILED; stopping"
    exit 1
  fi
  log "pyg_fast built"
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
status=0
$PY -m pyg_fast || status=1

if [ "${SKIP_TESTS:-0}" != 1 ]; then
  log "tests"
  $PY -m pytest ${PYTEST_ARGS:--q -x} ${TESTS:-tests} 2>&1 | tee "$OUT/tests.log" | tail -40
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  log "tests done (status $status)"
fi

if [ "${SANITIZE:-0}" = 1 ]; then
  SANITIZER=$(command -v compute-sanitizer || echo "$CUDA_HOME/bin/compute-sanitizer")
  # Without the caching allocator, out-of-bounds accesses reach memory memcheck watches.
  for tool in memcheck racecheck; do
    log "compute-sanitizer --tool $tool"
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$SANITIZER" --tool $tool --error-exitcode 9 \
      $PY -m pytest -q -x -p no:cacheprovider -k "${SANITIZE_K:-cuda}" ${SANITIZE_TESTS:-tests/ops} >>"$OUT/sanitize.log" 2>&1
    rc=$?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed|failed" "$OUT/sanitize.log" | tail -4
    log "$tool exit status $rc"
    [ $rc = 0 ] || status=1
  done
fi

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  if [ -d "$TORCH_SCATTER_DIR/torch_scatter" ] && PYTHONPATH=$TORCH_SCATTER_DIR:$PYTHONPATH $PY -c "import torch_scatter" 2>/dev/null; then
    export PYTHONPATH=$PYTHONPATH:$TORCH_SCATTER_DIR
    log "torch_scatter importable: compared against (and torch_sparse, if it imports)"
  else
    log "torch_scatter not importable: benchmarks run without it"
  fi
  # Stop the benchmarks in time for the summary to come back within the 10-minute call.
  bench_limit=$((DEVICE_CALL_S - 20 - SECONDS))
  [ "$bench_limit" -lt 60 ] && bench_limit=60
  bench_limit=${BENCH_TIMEOUT_S:-$bench_limit}
  log "benchmarks (interrupted after ${bench_limit}s)"
  timeout -s INT -k 30 "$bench_limit" $PY -m benchmarks.run --device "${BENCH_DEVICE:-cuda}" --out "$OUT" ${SUITES:+--suites "$SUITES"} \
    $([ "${QUICK:-0}" = 1 ] && echo --quick) || status=1
  log "benchmarks done"
  cat "$OUT/summary.md"
fi
log "finished, status $status"
exit $status
