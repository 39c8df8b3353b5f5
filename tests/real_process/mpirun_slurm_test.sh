#!/usr/bin/env bash
# The same job under the other launchers' environments, as real processes:
#  - Slurm: four processes given the variables srun sets for a 2-node,
#    2-tasks-per-node step (there is no Slurm here; the variables are srun's),
#    then three, resuming; the master port comes from SLURM_JOB_ID;
#  - Open MPI: mpirun -np 4, then -np 3 resuming (when openmpi-bin is installed).
# Both end bit-identical to the simulator's 4 -> 3 run.
source "$(dirname "$0")/common.sh" "$@"

want=$(sim_digest 4 8 31)
note "simulator 4 -> 3 ranks, 8 steps: digest $want"

# Starts $1 processes with the variables srun sets ($2 tasks per node).
slurm_job() {
  local n=$1 per=$2 job=$((1000000 + RANDOM)) pids=() r rc=0
  shift 2
  for ((r = 0; r < n; r++)); do
    SLURM_JOB_ID=$job slurm_task_env $r $n $per "$@" >"$work/slurm.$r" 2>&1 &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do wait "${pids[$r]}" || rc=1; done
  cat "$work"/slurm.*
  rm -f "$work"/slurm.*
  return $rc
}
slurm_task_env() {
  local rank=$1 n=$2 per=$3
  shift 3
  env -u MASTER_ADDR -u MASTER_PORT SLURM_PROCID=$rank SLURM_NTASKS=$n SLURM_LOCALID=$((rank % per)) \
    SLURM_NODEID=$((rank / per)) SLURM_NTASKS_PER_NODE=$per SLURM_JOB_NODELIST="localhost,localhost" \
    "$train_bin" "$@"
}

ckpt="$work/slurm-ckpt"
out=$(slurm_job 4 2 --steps=4 --seed=31 --checkpoint_dir="$ckpt") || fail "Slurm-style job of 4 failed: $out"
grep -q "train: slurm rank 3/4 (local 1/2, node 1), store localhost:1" <<<"$out" || fail "placement: $out"
out=$(slurm_job 3 3 --steps=8 --seed=31 --checkpoint_dir="$ckpt") || fail "Slurm-style job of 3 failed: $out"
got=$(digest_of "$out")
note "Slurm-style 4 -> 3 processes: digest $got"
[ "$got" = "$want" ] || fail "Slurm-style run ended at '$got', the simulator at '$want'"

if command -v mpirun >/dev/null; then
  mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
  ckpt="$work/mpi-ckpt"
  out=$("${mpi[@]}" -np 4 "$train_bin" --steps=4 --seed=31 --checkpoint_dir="$ckpt" 2>&1) || fail "mpirun -np 4: $out"
  grep -q "train: mpi rank 0/4" <<<"$out" || fail "not detected as mpi: $out"
  out=$("${mpi[@]}" -np 3 "$train_bin" --steps=8 --seed=31 --checkpoint_dir="$ckpt" 2>&1) || fail "mpirun -np 3: $out"
  got=$(digest_of "$out")
  note "mpirun 4 -> 3 processes: digest $got"
  [ "$got" = "$want" ] || fail "mpirun run ended at '$got', the simulator at '$want'"
else
  note "SKIP mpirun part: openmpi-bin is not installed"
fi
echo "PASS"
