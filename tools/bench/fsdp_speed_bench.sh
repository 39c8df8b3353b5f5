#!/usr/bin/env bash
# Training speed of shardlight's per-unit FSDP against PyTorch FSDP2 on the
# same GPT (tools/train --job=lm --strategy=fsdp and tools/lm/lm_peer.py
# --fsdp: fully_shard per block + root), W processes under torchrun over
# Gloo on CPU, the same initial weights and batches, one intra-op thread per
# process on both sides. Rounds alternate which side runs first, so load on
# the machine hits both. Prints each run's tokens/s, the median of each side
# and their ratio (shardlight / FSDP2: > 1 is faster), and both sides' seconds
# per step by phase (rank 0, mean over the rounds): all-gather, compute (the
# rest of the step: forward, backward, the loss), reduce-scatter, optimizer
# (clipping + AdamW) -- from tools/train --phase_times (lightning/phase_times.h)
# and lm_peer.py --phase_times. Not a test: it prints figures.
#
# With --tp=T (T > 1): FSDP x TP on a (W/T) x T mesh instead, shardlight's
# --strategy=fsdp_tp against lm_peer.py --fsdp_tp (parallelize_module on the
# mesh's "tp" dim, then fully_shard per block + root on its "dp" dim).
#
#   bash tools/bench/fsdp_speed_bench.sh [--rounds=N] [--steps=S] [--world=W] [--tp=T] [--out=DIR]
#        [--ours_flags="..."] [--variant="..."] [--variant_bin=PATH] [-- MODEL FLAGS]
#   MODEL FLAGS (both sides; lm_lib.sh's): --dim --heads --layers --context --mlp --batch
#   default: --dim=128 --heads=8 --layers=4 --context=64 --mlp=512 --batch=16
#   --ours_flags: extra tools/train flags for shardlight's side.
#   --variant: a third side each round, shardlight with these flags added (an A/B of an
#     option in the same run, e.g. --variant=--fsdp_prefetch=false), with its ratio to both.
#   --variant_bin: the variant side runs this tools/train binary (e.g. one built from the
#     commit before a change: a before/after in the same run).
#
# Needs the torch 2.x venv (tools/setup.sh --torch2); builds //tools/train -c opt --config=torch2
# (COMPILATION_MODE=fastbuild reuses a debug build instead).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=3; steps=20; world=4; tp=1; out=/tmp/shardlight_fsdp_speed; ours_extra=""; variant=""; variant_bin=""
model=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds=*) rounds=${1#*=} ;; --steps=*) steps=${1#*=} ;; --world=*) world=${1#*=} ;; --tp=*) tp=${1#*=} ;;
    --out=*) out=${1#*=} ;; --ours_flags=*) ours_extra=${1#*=} ;; --variant=*) variant=${1#*=} ;;
    --variant_bin=*) variant_bin=$(realpath "${1#*=}") ;;
    --) shift; model=("$@"); break ;;
    *) echo "fsdp_speed_bench: unknown argument '$1' (see the comment at the top of $0)" >&2; exit 2 ;;
  esac
  shift
done
[ ${#model[@]} -gt 0 ] || model=(--dim=128 --heads=8 --layers=4 --context=64 --mlp=512 --batch=16)
for n in "$rounds" "$steps" "$world" "$tp"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "fsdp_speed_bench: --rounds, --steps, --world and --tp take positive integers" >&2; exit 2; }
done
((world % tp == 0)) || { echo "fsdp_speed_bench: --tp=$tp does not divide --world=$world" >&2; exit 2; }
# Our strategy and the peer's flag: fsdp against FSDP2, or fsdp_tp against FSDP2 x TP.
strategy=fsdp; peer_mode=--fsdp
((tp > 1)) && strategy=fsdp_tp && peer_mode=--fsdp_tp
torch_version=$(sed -n 's/^torch_version=\([0-9.]*\).*/\1/p' tools/setup_torch2.sh)
venv="${SHARDLIGHT_TORCH2_VENV:-$HOME/.cache/shardlight/torch-$torch_version}"
[ -x "$venv/bin/torchrun" ] || { echo "fsdp_speed_bench: no torch $torch_version at $venv: run bash tools/setup.sh --torch2" >&2; exit 2; }
mode=${COMPILATION_MODE:-opt}
echo "fsdp_speed_bench: building shardlight's side (-c $mode --config=torch2)" >&2
bazel build -c "$mode" --config=torch2 //tools/train //tools/ckpt >&2
bin=$(bazel info -c "$mode" --config=torch2 bazel-bin 2>/dev/null)
tmp=$(mktemp -d)
cp "$bin/tools/train/train" "$bin/tools/ckpt/ckpt" "$tmp/"  # a later build cannot change them mid-run
rm -rf "$out"; mkdir -p "$out"
# The pinned torch's Python and torchrun (@libtorch//:peer.sh, written by the repository rule).
peer_sh="$(bazel info -c "$mode" --config=torch2 output_base 2>/dev/null)/external/libtorch/peer.sh"
[ -f "$peer_sh" ] || { echo "fsdp_speed_bench: no $peer_sh" >&2; exit 2; }
# shellcheck source=tools/lm/lm_lib.sh
source tools/lm/lm_lib.sh "$peer_sh" "$out/logs"
model_flags "${model[@]}"
mesh="$((world / tp))x${tp}"
export OMP_NUM_THREADS=1

# The shared initial weights: shardlight saves step 0, ckpt exports them for the peer.
"$LIBTORCH_TORCHRUN" --nnodes=1 --rdzv_backend=c10d --rdzv_endpoint="127.0.0.1:$(free_port)" --nproc_per_node="$world" \
  --log_dir="$out/logs" --no_python "$tmp/train" --job=lm --mesh="$mesh" --strategy="$strategy" --steps=1 --save_at=0 \
  --checkpoint_dir="$out/init" --threads=1 "${ours[@]}" >"$out/init.log" 2>&1 \
  || { echo "fsdp_speed_bench: the initial run failed:" >&2; tail -5 "$out/init.log" >&2; exit 1; }
"$tmp/ckpt" export --prefix=model. "$out/init" "$out/init.pt" >/dev/null

# side ours|variant|peer ROUND: one run; appends "SIDE ROUND tokens_per_s PHASE LINE" to $out/runs.txt.
side() {
  local text tps phases extra=$ours_extra train=$tmp/train
  [ "$1" = variant ] && extra="$ours_extra $variant" && train=${variant_bin:-$tmp/train}
  if [ "$1" != peer ]; then
    # shellcheck disable=SC2086
    text=$(run_torchrun "$world" --no_python "$train" --job=lm --mesh="$mesh" --strategy="$strategy" --steps="$steps" \
      --threads=1 --phase_times "${ours[@]}" $extra 2>&1) \
      || { echo "fsdp_speed_bench: shardlight failed:" >&2; tail -5 <<<"$text" >&2; exit 1; }
    tps=$(strip <<<"$text" | sed -n 's/^train: rank 0\/.* tokens_per_s \([0-9.]*\) .*/\1/p')
    phases=$(strip <<<"$text" | sed -n 's/^train: rank 0\/[0-9]* phase_times \(.*\)$/\1/p')
  else
    text=$(run_peer "$world" tools/lm/lm_peer.py --mesh="$mesh" "$peer_mode" --weights="$out/init.pt" --steps="$steps" \
      --threads=1 --phase_times "${peer[@]}" 2>&1) \
      || { echo "fsdp_speed_bench: the PyTorch peer failed:" >&2; tail -5 <<<"$text" >&2; exit 1; }
    tps=$(strip <<<"$text" | sed -n 's/^peer: tokens_per_s \([0-9.]*\) .*/\1/p')
    phases=$(strip <<<"$text" | sed -n 's/^peer: phase_times \(.*\)$/\1/p')
  fi
  [ -n "$tps" ] && [ -n "$phases" ] || { echo "fsdp_speed_bench: no figures from $1:" >&2; tail -5 <<<"$text" >&2; exit 1; }
  echo "$1 $2 $tps $phases" >>"$out/runs.txt"
  local name=fsdp2
  [ "$1" = ours ] && name=shardlight
  [ "$1" = variant ] && name="variant${variant:+ $variant}${variant_bin:+ ($variant_bin)}"
  printf "round %d %-10s tokens/s %8.1f\n" "$2" "$name" "$tps"
}

echo "fsdp_speed_bench: $strategy on $mesh (W=$world) Gloo CPU, 1 thread per process, $steps steps, model ${model[*]}${ours_extra:+, shardlight also $ours_extra}${variant:+, variant $variant}${variant_bin:+, variant binary $variant_bin}"
: >"$out/runs.txt"
for ((r = 1; r <= rounds; r++)); do
  sides=(ours peer)
  [ -n "$variant$variant_bin" ] && sides=(ours variant peer)
  ((r % 2)) || sides=($(printf '%s\n' "${sides[@]}" | tac))
  for s in "${sides[@]}"; do side "$s" "$r"; done
done
/usr/bin/python3 - "$out/runs.txt" "$variant${variant_bin:+ $variant_bin}" <<'PY'
import statistics, sys
runs = {"ours": [], "peer": [], "variant": []}
for line in open(sys.argv[1]):
    f = line.split()
    runs[f[0]].append((float(f[2]), dict(zip(f[3::2], map(float, f[4::2])))))
med = {k: statistics.median(t for t, _ in v) for k, v in runs.items() if v}
rounds = lambda a, b: ", ".join(f"{x[0] / y[0]:.2f}" for x, y in zip(runs[a], runs[b]))
print(f"tokens/s median: shardlight {med['ours']:.1f}, FSDP2 {med['peer']:.1f}; ratio {med['ours'] / med['peer']:.2f}x"
      f" (per round: {rounds('ours', 'peer')})")
sides = ["ours", "peer"]
if runs["variant"]:
    sides.insert(1, "variant")
    print(f"variant ({sys.argv[2]}): tokens/s median {med['variant']:.1f}; {med['variant'] / med['peer']:.2f}x FSDP2,"
          f" {med['variant'] / med['ours']:.2f}x shardlight (per round vs shardlight: {rounds('variant', 'ours')})")
names = {"ours": "shardlight", "variant": "variant", "peer": "FSDP2"}
print("seconds per step, rank 0, mean over the rounds:")
print("| phase | " + " | ".join(names[s] for s in sides) + " | shardlight / FSDP2 |")
print("|---" * (len(sides) + 2) + "|")
for key, name in (("all_gather_s", "all-gather"), ("compute_s", "compute"), ("reduce_scatter_s", "reduce-scatter"),
                  ("optimizer_s", "optimizer"), ("step_s", "step")):
    m = {s: statistics.mean(p[key] for _, p in runs[s]) for s in sides}
    ratio = m["ours"] / m["peer"] if m["peer"] else float("nan")
    print(f"| {name} | " + " | ".join(f"{m[s]:.4f}" for s in sides) + f" | {ratio:.2f} |")
PY
