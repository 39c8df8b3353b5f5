#!/usr/bin/env bash
# kill -9 of one worker of a real Open MPI job (mpirun -np 4), of rank 2 and
# of rank 0 (which hosts the store): mpirun then sends SIGTERM to the others,
# in whatever order; every surviving rank must still exit naming the lost
# rank, well within the collective timeout, and the last checkpoint verifies.
# mpirun sends SIGKILL odls_base_sigkill_timeout seconds after its SIGTERM
# (1 by default: under load, before a rank has learnt which peer died -- this
# test failed so 5 times in 5 loaded runs): the job raises it to the rank's
# own grace, and with the default rank 0 warns, naming the setting.
# The torchrun counterpart is torchrun_kill_test.sh.
source "$(dirname "$0")/common.sh" "$@"

if ! command -v mpirun >/dev/null; then
  echo "SKIP: mpirun is not installed (Debian's openmpi-bin, which tools/setup.sh installs)"
  exit 0
fi
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)

timeout_ms=5000
out=$("${mpi[@]}" -np 2 "$train_bin" --steps=1 --seed=5 --timeout_ms=$timeout_ms 2>&1) || fail "mpirun -np 2: $out"
grep -q "^train: warning: mpirun sends SIGKILL 1 s after .* pass --mca odls_base_sigkill_timeout 7 " <<<"$out" ||
  fail "no warning about mpirun's default SIGKILL timeout: $out"
mpi+=(--mca odls_base_sigkill_timeout $(((timeout_ms + 2000 + 999) / 1000)))
for victim in ${KILL_VICTIMS:-2 0}; do
  ckpt="$work/mpi_$victim"
  "${mpi[@]}" -np 4 "$train_bin" --steps=200 --seed=5 --checkpoint_dir="$ckpt" --checkpoint_every=4 \
    --min_step_ms=100 --timeout_ms=$timeout_ms >"$work/mpi_$victim.out" 2>&1 &
  kill_and_expect_peers_name_it $! "$victim" mpirun OMPI_COMM_WORLD_RANK "$ckpt" "$work/mpi_$victim.out" $timeout_ms
done
echo "PASS"
