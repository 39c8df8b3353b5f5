#!/usr/bin/env bash
# shardlight <-> Python PyTorch, both ways, with the Python torch of the
# LibTorch the build uses (peer.sh: Debian's python3-torch, or the 2.x wheel's):
# Python writes a state dict (every dtype, views, 0-d) and a Lightning .ckpt
# -> ckpt import -> load on 3 simulated ranks, values equal to Python's dumps
# -> C++ trains -> ckpt export -> Python torch.load(weights_only=True) finds
# the values it computes itself. A hostile pickle is refused without running.
set -u
ckpt="$1"; helper="$2"; make_files="$3"; check="$4"
# shellcheck source=/dev/null
source "$5"  # LIBTORCH_PYTHON, LIBTORCH_VERSION
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }
if [ -z "$LIBTORCH_PYTHON" ]; then
  echo "SKIP: the LibTorch at $LIBTORCH_PREFIX comes without Python (a libtorch zip); the interop test needs the torch it belongs to"
  exit 0
fi
py="$LIBTORCH_PYTHON"
"$py" -c 'import torch' 2>/dev/null || fail "$py cannot import torch (bash tools/setup.sh, or tools/setup.sh --torch2)"
got=$("$py" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null)
[ "${got%.*}" = "${LIBTORCH_VERSION%.*}" ] || fail "$py has torch $got but the build's LibTorch is $LIBTORCH_VERSION"

"$py" "$make_files" "$tmp" || fail "python could not write the input files"

# Plain state dict: import sharded over 3 ranks, check, train 3 steps, export.
"$ckpt" --world_size=3 --shard=emb.weight=0,f64=1 import "$tmp/plain.pt" "$tmp/plain_ckpt" || fail "import plain.pt"
"$ckpt" verify "$tmp/plain_ckpt" >/dev/null || fail "verify of the imported checkpoint"
"$helper" check_train "$tmp/plain_ckpt" "$tmp/expect_plain" "$tmp/trained" "emb.weight=1,f64=0,view.base=0" 3 0.125 \
  || fail "C++ load/train of the imported state dict"
"$ckpt" export "$tmp/trained" "$tmp/trained.pt" || fail "export"
"$py" "$check" plain "$tmp/plain.pt" "$tmp/trained.pt" 3 0.125 || fail "python check of the export"

# Lightning: weights and step into the Trainer's layout, the rest carried
# beside them; the class instances named.
out=$("$ckpt" --world_size=2 --shard=table=0 --prefix=model. --global_step --global_step_key=trainer.step \
      import "$tmp/lightning.ckpt" "$tmp/l_ckpt") || fail "import lightning.ckpt: $out"
grep -q "not carried  hyper_parameters: __main__.AttributeDict" <<<"$out" || fail "AttributeDict not reported: $out"
grep -q "not carried  loops.fit_loop.epoch_progress: __main__.Progress" <<<"$out" || fail "loop state not reported: $out"
grep -q "nesting recorded" <<<"$out" || fail "the nesting was not recorded: $out"
grep -q "global_step 40 -> trainer.step" <<<"$out" || fail "global_step: $out"
"$helper" resume "$tmp/l_ckpt" "$tmp/train" "$tmp/expect_lightning" 4 || fail "Trainer resume from the import"
"$ckpt" --lightning --prefix=model. export "$tmp/train" "$tmp/trained.ckpt" || fail "lightning export"
"$py" "$check" lightning "$tmp/lightning.ckpt" "$tmp/trained.ckpt" 4 || fail "python check of the lightning export"

# optimizer_states (--optimizer_states is still accepted): flattened under dotted keys.
out=$("$ckpt" --optimizer_states import "$tmp/lightning.ckpt" "$tmp/opt_ckpt") || fail "import with optimizer_states: $out"
"$ckpt" inspect "$tmp/opt_ckpt" | grep -q "^optimizer_states.0.state.0.momentum_buffer " || fail "optimizer state missing"

# A pickle that would run os.system: nothing runs; its weights import and the
# call is named as not carried (never built).
out=$("$ckpt" import "$tmp/evil.pt" "$tmp/evil_ckpt" 2>&1) || fail "evil.pt: $out"
grep -q "not carried  payload: posix.system" <<<"$out" || fail "evil.pt message: $out"
[ -e "$tmp/PWNED" ] && fail "the pickle ran code"
"$ckpt" inspect "$tmp/evil_ckpt" | grep -q "posix" && fail "the call reached the checkpoint"
echo "PASS"
