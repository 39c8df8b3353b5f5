#!/usr/bin/env bash
# Cross-framework resume between shardlight's LM under --strategy=fsdp and
# PyTorch FSDP2 (lm_peer.py --fsdp, real torchrun processes), through a DCP
# directory under torch's own names -- dcp.save of {"model":
# get_model_state_dict, "optim": get_optimizer_state_dict}, as a PyTorch user
# writes it (lightning/torch_names.h):
#   from_torch: the peer trains on FROM_W ranks from shardlight's initial
#     weights and dcp.saves after step AT; shardlight resumes from a copy on
#     TO_W ranks. Its losses of steps AT+1..STEPS must equal the peer's own
#     continued run's.
#   to_torch: shardlight trains on FROM_W ranks and saves under torch's names
#     after step AT (--save_format=torch_dcp); the peer on TO_W ranks loads it
#     (get_state_dict, dcp.load, set_state_dict) and continues. Its losses must
#     equal shardlight's continued run's.
#   bad: copies of the peer's save whose optimizer state belongs to another
#     model or optimizer (make_bad_torch_dcp.py); shardlight on TO_W ranks must
#     fail, every rank naming the key.
# Both saves must hold torch's names (ckpt inspect lists them).
#
# Usage: lm_fsdp_resume.sh TRAIN_BIN CKPT_BIN PEER_SH MODE FROM_W TO_W AT STEPS [-- FLAGS]
#   FLAGS: the model flags of lm_parity.sh, --dtypes=A,B (default float32) and
#   --tol=DTYPE:X (every compared step's relative difference <= X; default 1e-6).
# Exit 0 when all hold; "SKIP: ..." and 0 when the peer's torch has no FSDP2
# (the 1.13 leg).
set -u
train_bin=$(realpath "$1"); ckpt_bin=$(realpath "$2"); peer_sh=$3; mode=$4; from_w=$5; to_w=$6; at=$7; steps=$8
shift 8
[ "${1:-}" = "--" ] && shift
model=(); dtypes=float32; declare -A tols=()
for f in "$@"; do
  case $f in
    --dtypes=*) dtypes=${f#*=}; dtypes=${dtypes//,/ } ;;
    --tol=*:*) f=${f#*=}; tols[${f%%:*}]=${f#*:} ;;
    *) model+=("$f") ;;
  esac
done
here=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
out=$(mktemp -d "${TEST_TMPDIR:-/tmp}/lm_fsdp_resume.XXXXXX")
source "$here/lm_lib.sh" "$peer_sh" "$out/logs"
peer_has_fully_shard || exit 0
case $mode in from_torch | to_torch | bad) ;; *) fail "MODE $mode is not from_torch, to_torch or bad" ;; esac
[ "$at" -ge 1 ] && [ "$steps" -gt "$at" ] && [ "$steps" -le 9 ] || fail "want 1 <= AT < STEPS <= 9"
model_flags "${model[@]}"

# shardlight's LM job on N ranks under fsdp: ours_on N FLAGS...
ours_on() {
  local n=$1
  shift
  run_torchrun "$n" --no_python "$train_bin" --job=lm --mesh="${n}x1" --strategy=fsdp --threads=1 "$@" "${ours[@]}" 2>&1
}
# The peer on N ranks under FSDP2: peer_on N FLAGS...
peer_on() {
  local n=$1
  shift
  OMP_NUM_THREADS=1 run_peer "$n" "$here/lm_peer.py" --mesh="${n}x1" --fsdp "$@" "${peer[@]}"
}
# torch's names in the DCP directory DIR that WHO saved.
expect_torch_names() {
  local listing key
  listing=$("$ckpt_bin" inspect "$1" 2>&1) || fail "ckpt inspect $1 failed: $listing"
  for key in model.tok.weight optim.state.tok.weight.exp_avg optim.state.tok.weight.exp_avg_sq \
    optim.state.tok.weight.step "optim.param_groups.0.lr = " "optim.param_groups.1.weight_decay = 0.0" \
    "optim.param_groups.0.params = ['tok.weight'"; do
    grep -qF -- "$key" <<<"$listing" || fail "$2's checkpoint in $1 has no $key: $listing"
  done
}
# compare OURS THEIRS TOL LABEL: the steps both files hold (AT+1..STEPS), each within TOL relative.
compare() {
  join "$1" "$2" | awk -v tol="$3" -v label="$4" -v want=$((steps - at)) '
    { d = ($2 - $3) / $3; if (d < 0) d = -d; if (d > worst) worst = d; if (d > tol) bad = 1; n++
      printf "  %s: step %d shardlight %.12f pytorch %.12f rel %.2e\n", label, $1, $2, $3, d }
    END { printf "%s: %d steps after the resume, largest relative difference %.2e (tolerance %s)\n", label, n, worst, tol
          if (n != want) { printf "FAIL: %s: %d steps compared, want %d\n", label, n, want; exit 1 }
          exit bad }'
}
# shardlight's initial weights as a torch.save file for the peer.
initial_weights() {
  local log
  log=$(run_torchrun 1 --no_python "$train_bin" --job=lm --mesh=1x1 --strategy=fsdp --steps=1 --save_at=0 \
    --checkpoint_dir="$out/init" "${ours[@]}" 2>&1) || fail "shardlight's initial save exited $?: $log"
  "$ckpt_bin" export --prefix=model. "$out/init" "$out/init.pt" >/dev/null || fail "ckpt export failed"
}
# The peer trains from the initial weights in DTYPE and saves after step AT in DIR; its losses in DIR.txt.
peer_saves() {
  local py
  py=$(peer_on "$from_w" --weights="$out/init.pt" --steps="$steps" --dtype="$1" --dcp_at="$at" --torch_dcp_dir="$2") \
    || fail "the PyTorch peer exited $?: $py"
  [ -f "$2/.metadata" ] || fail "the peer wrote no DCP checkpoint in $2: $py"
  losses_of peer: "$py" >"$2.txt"
  [ "$(wc -l <"$2.txt")" -eq "$steps" ] || fail "the peer printed $(wc -l <"$2.txt") losses: $py"
  expect_torch_names "$2" "the PyTorch peer"
}

status=0
if [ "$mode" = bad ]; then
  initial_weights
  peer_saves float32 "$out/torch"
  cases=$("$LIBTORCH_PYTHON" "$here/make_bad_torch_dcp.py" "$out/torch" "$out/bad") || fail "make_bad_torch_dcp.py failed"
  while read -r name expected; do
    log=$(ours_on "$to_w" --steps="$steps" --checkpoint_dir="$out/bad/$name") && fail "shardlight resumed the $name checkpoint: $log"
    named=$(strip <<<"$log" | grep "^train: rank [0-9]*: " | grep -cF -- "$expected")
    [ "$named" -eq "$to_w" ] || fail "$name: $named of $to_w ranks failed with an error holding \"$expected\": $log"
    echo "$name: every rank of $to_w failed before training: $(strip <<<"$log" | grep -m1 '^train: rank 0: ')"
  done <<<"$cases"
  [ "$(wc -l <<<"$cases")" -eq 5 ] || fail "make_bad_torch_dcp.py made $(wc -l <<<"$cases") cases, want 5"
  echo "PASS"
  exit 0
fi
[ "$mode" = from_torch ] && initial_weights
for dtype in $dtypes; do
  case $dtype in float32 | float64) ;; *) fail "--dtypes: $dtype is not float32 or float64" ;; esac
  tol=${tols[$dtype]:-1e-6}
  d=$out/$dtype
  mkdir -p "$d"
  if [ "$mode" = from_torch ]; then
    peer_saves "$dtype" "$d/torch"
    cp -r "$d/torch" "$d/resume"
    log=$(ours_on "$to_w" --steps="$steps" --log_every=1 --lm_dtype="$dtype" --checkpoint_dir="$d/resume") \
      || fail "shardlight on $to_w ranks exited $?: $log"
    strip <<<"$log" | grep -q "^lm: resumed at step $at from the PyTorch DCP checkpoint in $d/resume\$" \
      || fail "no 'resumed at step $at from the PyTorch DCP checkpoint' line: $log"
    losses_of lm: "$log" >"$d/ours.txt"
    compare "$d/ours.txt" "$d/torch.txt" "$tol" "PyTorch FSDP2 W=$from_w saved, shardlight fsdp W=$to_w resumed, $dtype" \
      || status=1
  else
    log=$(ours_on "$from_w" --steps="$steps" --log_every=1 --lm_dtype="$dtype" --save_at="$at" --save_format=torch_dcp \
      --checkpoint_dir="$d/sl") || fail "shardlight on $from_w ranks exited $?: $log"
    losses_of lm: "$log" >"$d/ours.txt"
    [ "$(wc -l <"$d/ours.txt")" -eq "$steps" ] || fail "shardlight printed $(wc -l <"$d/ours.txt") losses: $log"
    expect_torch_names "$d/sl" "shardlight"
    py=$(peer_on "$to_w" --torch_dcp_resume="$d/sl" --steps="$steps" --dtype="$dtype") || fail "the PyTorch peer exited $?: $py"
    strip <<<"$py" | grep -q "^peer: resumed at step $at from $d/sl\$" || fail "the peer did not resume at step $at: $py"
    losses_of peer: "$py" >"$d/peer.txt"
    compare "$d/ours.txt" "$d/peer.txt" "$tol" "shardlight fsdp W=$from_w saved, PyTorch FSDP2 W=$to_w resumed, $dtype" \
      || status=1
  fi
done
[ $status -eq 0 ] || { echo "FAIL: losses after the resume differ beyond tolerance" >&2; exit 1; }
echo "PASS"
