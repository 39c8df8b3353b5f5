#!/usr/bin/env bash
# shardlight's LM job resumes from a PyTorch distributed checkpoint (DCP) of
# its PyTorch peer: lm_peer.py (DTensor tensor parallelism, real torchrun
# processes) trains on PEER_MESH from shardlight's initial weights, dcp.saves
# its model, AdamW state and step under the LM's keys after step AT, and
# trains on to STEPS; the LM job (torchrun processes too) resumes from a copy
# of that directory on each of OUR_MESHES and trains to STEPS. Its loss at
# step AT+1 must equal the peer's within STEP1_TOL relative, every later one
# within CURVE_TOL; it must say it resumed from the DCP checkpoint.
#
# Usage: lm_dcp_resume.sh TRAIN_BIN CKPT_BIN PEER_SH PEER_MESH AT STEPS OUR_MESH... [-- MODEL FLAGS]
#   MODEL FLAGS as lm_parity.sh's. Env: STEP1_TOL (1e-5), CURVE_TOL (1e-3).
# Exit 0 when within tolerance, 1 otherwise; "SKIP: ..." and 0 when the
# peer's torch has no DTensor (the 1.13 leg).
set -u
train_bin=$(realpath "$1"); ckpt_bin=$(realpath "$2"); peer_sh=$3; peer_mesh=$4; at=$5; steps=$6
shift 6
meshes=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do meshes+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
here=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
out=$(mktemp -d "${TEST_TMPDIR:-/tmp}/lm_dcp_resume.XXXXXX")
source "$here/lm_lib.sh" "$peer_sh" "$out/logs"
step1_tol=${STEP1_TOL:-1e-5}; curve_tol=${CURVE_TOL:-1e-3}
peer_has_dtensor || exit 0
[ ${#meshes[@]} -gt 0 ] || fail "no mesh to resume on"
[ "$at" -ge 1 ] && [ "$steps" -gt "$at" ] || fail "want 1 <= AT < STEPS, not AT $at, STEPS $steps"
model_flags "$@"

# The initial weights: shardlight's, saved before training and exported.
init=$(run_torchrun "$(mesh_size "$peer_mesh")" --no_python "$train_bin" --job=lm --mesh="$peer_mesh" --steps=1 \
  --save_at=0 --checkpoint_dir="$out/init" "${ours[@]}" 2>&1) || fail "shardlight's initial save exited $?: $init"
"$ckpt_bin" export --prefix=model. "$out/init" "$out/init.pt" >/dev/null || fail "ckpt export failed"
py=$(OMP_NUM_THREADS=1 run_peer "$(mesh_size "$peer_mesh")" "$here/lm_peer.py" --mesh="$peer_mesh" \
  --weights="$out/init.pt" --steps="$steps" --dcp_dir="$out/dcp" --dcp_at="$at" "${peer[@]}") \
  || fail "the PyTorch peer exited $?: $py"
[ -f "$out/dcp/.metadata" ] || fail "the peer wrote no DCP checkpoint in $out/dcp: $py"
losses_of peer: "$py" >"$out/peer.txt"
[ "$(wc -l <"$out/peer.txt")" -eq "$steps" ] || fail "the peer printed $(wc -l <"$out/peer.txt") losses: $py"

bad=0
for mesh in "${meshes[@]}"; do
  rm -rf "$out/$mesh"; cp -r "$out/dcp" "$out/$mesh"
  sl=$(run_torchrun "$(mesh_size "$mesh")" --no_python "$train_bin" --job=lm --mesh="$mesh" --steps="$steps" \
    --log_every=1 --checkpoint_dir="$out/$mesh" "${ours[@]}" 2>&1) || fail "shardlight on $mesh exited $?: $sl"
  strip <<<"$sl" | grep -q "^lm: resumed at step $at from the PyTorch DCP checkpoint in $out/$mesh\$" \
    || fail "on $mesh: no 'resumed at step $at from the PyTorch DCP checkpoint' line: $sl"
  losses_of lm: "$sl" >"$out/ours_$mesh.txt"
  [ "$(wc -l <"$out/ours_$mesh.txt")" -eq $((steps - at)) ] || fail "on $mesh: $(wc -l <"$out/ours_$mesh.txt") losses: $sl"
  join "$out/ours_$mesh.txt" "$out/peer.txt" | awk -v s1="$step1_tol" -v ct="$curve_tol" -v at="$at" -v m="$mesh" '{
      d = ($2 - $3) / $3; if (d < 0) d = -d
      if (d > worst) worst = d
      if ($1 == at + 1 && d > s1) bad = 1
      if (d > ct) bad = 1
      printf "  %s step %3d shardlight %.9f pytorch %.9f rel %.2e\n", m, $1, $2, $3, d
    }
    END { printf "resumed on %s from the peer'"'"'s %s DCP checkpoint of step %d: largest relative difference %.2e\n", m, "'"$peer_mesh"'", at, worst
          exit bad }' || { echo "FAIL: on $mesh the losses after the resume differ from the peer's beyond tolerance" >&2; bad=1; }
done
[ $bad -eq 0 ] || exit 1
echo "PASS"
