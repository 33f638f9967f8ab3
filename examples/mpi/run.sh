#!/usr/bin/env bash
# Builds and runs the MPI routing simulation (examples/mpi/adp_sim.c) the way an
# ADP engine runs the library: NP ranks (default 4), each loading
# build/libadprouter.so, allgathering states and match lengths, routing
# locally and comparing digests every iteration.
#
#   examples/mpi/run.sh                 normal run (every configuration must say OK),
#                                       then the divergence run (must be DETECTED)
#   examples/mpi/run.sh --iters 1000    extra arguments go to both runs
#   NP=8 examples/mpi/run.sh            more ranks
#   MPIRUN_ARGS="--mca btl self,tcp" examples/mpi/run.sh   replace the mpirun options
#
# Prints "MPI not installed: skipped" and exits 0 when mpicc is absent
# (apt-get install openmpi-bin libopenmpi-dev). Exit status: 0 when the normal
# run passes and the divergence run is detected, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
NP=${NP:-4}

if ! command -v mpicc >/dev/null 2>&1 || ! command -v mpirun >/dev/null 2>&1; then
  echo "MPI not installed: skipped (needs mpicc and mpirun: apt-get install openmpi-bin libopenmpi-dev)"
  exit 0
fi

start=$(date +%s)
./build.sh build >/dev/null
mkdir -p "$ROOT/build/mpi"
# Linked directly against the library; the rpath finds it at run time.
mpicc -std=c11 -O2 -Wall -Wextra -Werror -I"$ROOT/include" -o "$ROOT/build/mpi/adp_sim" \
  examples/mpi/adp_sim.c -L"$ROOT/build" -ladprouter -Wl,-rpath,"$ROOT/build"

# mpirun options that work in a plain container, as root, on few cores:
# shared memory between the local ranks without CMA (needs ptrace rights that
# containers usually lack), no core binding, more ranks than cores allowed,
# and no ssh needed for a single-host run.
if [ -z "${MPIRUN_ARGS+x}" ]; then
  if mpirun --version 2>&1 | grep -q "Open MPI"; then
    MPIRUN_ARGS="--allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader"
    export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
    if ! command -v ssh >/dev/null 2>&1 && ! command -v rsh >/dev/null 2>&1; then
      export OMPI_MCA_plm_rsh_agent=${OMPI_MCA_plm_rsh_agent:-false}
    fi
  else
    MPIRUN_ARGS="" # MPICH's hydra oversubscribes and runs as root without flags
  fi
fi
# shellcheck disable=SC2086
mpi() { mpirun $MPIRUN_ARGS -np "$NP" "$ROOT/build/mpi/adp_sim" "$@"; }

echo "== normal run: $NP ranks, every policy and option =="
if ! mpi "$@"; then
  echo "FAIL: the normal run did not pass" >&2
  exit 1
fi

for kind in state config; do
  echo
  case $kind in
    state) echo "== divergence run: rank 2 routes with its local, un-gathered rank states from iteration 40 on ==" ;;
    config) echo "== divergence run: rank 2 was started with a different fair_share_multiplier ==" ;;
  esac
  set +e
  out=$(mpi --diverge=$kind "$@" 2>&1)
  rc=$?
  set -e
  # mpirun's own banner about the non-zero exit is expected here: leave it out.
  grep -v -e '^-----' -e '^Primary job' -e '^a non-zero exit' -e '^mpirun detected' \
    -e '^the job to be' -e '^ *Process name' -e '^ *Exit code' -e '^$' <<<"$out" || true
  if [ "$rc" -ne 3 ] || ! grep -q "DIVERGENCE DETECTED in all" <<<"$out"; then
    echo "FAIL: the divergence (--diverge=$kind) was not detected as expected (exit $rc, want 3)" >&2
    exit 1
  fi
  echo "divergence run (--diverge=$kind): exit $rc as expected: the digest check caught it"
done
echo
echo "PASS: normal run OK, divergence detected ($(($(date +%s) - start))s)"
