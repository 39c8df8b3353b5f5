#!/usr/bin/env bash
# tools/train's flag handling: each bad flag exits 2 with a message naming it,
# before any process group or training starts (so each case is fast).
set -u
bin="$1"
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp="${TEST_TMPDIR:-$(mktemp -d)}"

expect_exit() {
  local want="$1" needle="$2"; shift 2
  local got out
  out=$(timeout 60 "$bin" --launcher=single "$@" 2>&1); got=$?
  [ "$got" -eq "$want" ] || fail "$* exited $got, want $want: $out"
  grep -qF -- "$needle" <<<"$out" || fail "$*: message lacks '$needle': $out"
  grep -q "^train: single" <<<"$out" && fail "$*: started the job before refusing: $out"
  return 0
}
expect_exit 2 "unexpected argument 'steps=3'" steps=3
expect_exit 2 "--fault step 9 is after --steps=4" --steps=4 --fault=crash:rank=0,step=9
expect_exit 2 "byte 19 is a space" --steps=4 "--fault=crash:rank=0,step=2
"

touch "$tmp/a_file"
expect_exit 2 "--checkpoint_dir='$tmp/a_file' is a file, not a directory" --checkpoint_dir="$tmp/a_file"
expect_exit 2 "--checkpoint_dir='/sys/kernel' is not writable" --checkpoint_dir=/sys/kernel
expect_exit 2 "--lm_dtype must be float32 or float64, not half" --job=lm --mesh=1x1 --lm_dtype=half
expect_exit 2 "--lm_grads_steps needs --lm_grads_dir" --job=lm --mesh=1x1 --lm_grads_steps=2
expect_exit 2 "--lm_grads_steps must be >= 0" --job=lm --mesh=1x1 --lm_grads_steps=-1
expect_exit 2 "--strategy: strategy 'zero3' is not one of model_parallel, fsdp_tp, fsdp, ddp, hsdp" --job=lm --mesh=1x1 --strategy=zero3
expect_exit 2 "--strategy: the fsdp strategy is data parallel only: the mesh must be Nx1, not 2x2 (--mesh=2x2)" \
  --job=lm --mesh=2x2 --strategy=fsdp
expect_exit 2 "--strategy applies to --job=lm; --job=main would ignore it" --strategy=ddp
expect_exit 2 "--fsdp_per_unit applies to --strategy=fsdp or hsdp; --strategy=ddp would ignore it" \
  --job=lm --mesh=2x1 --strategy=ddp --fsdp_per_unit=false
expect_exit 2 "--fsdp_per_unit applies to --job=lm --strategy=fsdp; --job=main would ignore it" --fsdp_per_unit=false
expect_exit 2 "--param_dtype (fsdp's mixed-precision policy) applies to the fsdp and hsdp strategies only, not ddp" \
  --job=lm --mesh=2x1 --strategy=ddp --param_dtype=bf16
expect_exit 2 "--reduce_dtype: 'int8' is not a floating dtype" --job=lm --mesh=2x1 --strategy=fsdp --reduce_dtype=int8
expect_exit 2 "--param_dtype and --reduce_dtype apply to --job=lm --strategy=fsdp; --job=main would ignore them" \
  --param_dtype=bf16
expect_exit 2 "--die_in applies to --job=lm --strategy=fsdp with --fsdp_per_unit" --die_in=all-gather:rank=0,step=1,unit=block0
expect_exit 2 "--die_in names the unit 'block9', not one of block0, block1" \
  --job=lm --mesh=1x1 --strategy=fsdp --die_in=all-gather:rank=0,step=1,unit=block9
expect_exit 2 "--die_in: 'reduce-scatter:rank=0,step=1,unit=block0,n=2' has n '2'" \
  --job=lm --mesh=1x1 --strategy=fsdp --die_in=reduce-scatter:rank=0,step=1,unit=block0,n=2
expect_exit 2 "--fsdp_buffer_pool applies to --job=lm; --job=main would ignore it" --fsdp_buffer_pool=false
expect_exit 2 "--fsdp_buffer_pool=false applies to --strategy=fsdp, hsdp or fsdp_tp" \
  --job=lm --mesh=1x1 --strategy=ddp --fsdp_buffer_pool=false
expect_exit 2 "--die_in names the unit 'block0', not one of model" \
  --job=lm --mesh=1x1 --strategy=fsdp_tp --die_in=all-gather:rank=0,step=1,unit=block0
expect_exit 2 "--die_in: fsdp_tp gathers its unit 'model' once per step (n=1), not 2 times" \
  --job=lm --mesh=1x1 --strategy=fsdp_tp --die_in=all-gather:rank=0,step=1,unit=model,n=2
expect_exit 2 "--save_at saves a plain checkpoint, which --keep_last's checkpoint root cannot hold" \
  --job=lm --mesh=1x1 --save_at=1 --keep_last=2 --checkpoint_dir="$tmp/lm_root"

expect_exit 2 "--lm_deferred_init applies to the dense build" --job=lm --mesh=1x1 --lm_deferred_init
expect_exit 2 "--strategy=fsdp_tp builds each rank's slices and would ignore it" --job=lm --mesh=1x1 --strategy=fsdp_tp --lm_deferred_init

# --lm_optimizer and the SGD hyper-parameters (lightning::SgdOptions, tp::MeshSgdOptimizer).
expect_exit 2 "--lm_optimizer: optimizer 'adam' is not one of adamw, sgd" --job=lm --mesh=1x1 --lm_optimizer=adam
expect_exit 2 "--lm_momentum applies to --lm_optimizer=sgd; adamw would ignore it" --job=lm --mesh=1x1 --lm_momentum=0.5
expect_exit 2 "--lm_momentum=-0.1 must be in [0, 1)" --job=lm --mesh=1x1 --lm_optimizer=sgd --lm_momentum=-0.1
expect_exit 2 "--lm_momentum=1 must be in [0, 1)" --job=lm --mesh=1x1 --lm_optimizer=sgd --lm_momentum=1
expect_exit 2 "--lm_weight_decay=-0.5 must be >= 0" --job=lm --mesh=1x1 --lm_optimizer=sgd --lm_weight_decay=-0.5
expect_exit 2 "--lm_weight_decay=-1 must be >= 0" --job=lm --mesh=1x1 --lm_weight_decay=-1
expect_exit 2 "--lr=0 must be > 0" --job=lm --mesh=1x1 --lm_optimizer=sgd --lr=0
expect_exit 2 "--lm_optimizer, --lm_momentum and --lm_weight_decay apply to --job=lm; --job=main would ignore them" \
  --lm_optimizer=sgd
expect_exit 2 "--save_format=torch_dcp writes torch.optim.AdamW's state under torch's names; --lm_optimizer=sgd has none" \
  --job=lm --mesh=1x1 --strategy=fsdp --lm_optimizer=sgd --save_format=torch_dcp --save_at=1 --checkpoint_dir="$tmp/lm_dcp"

# --lm_deferred_init (GptOptions::deferred_init): the same losses as the eager build under fsdp.
lm_losses() {
  timeout 120 "$bin" --launcher=single --master_port=$((20000 + RANDOM % 20000)) --job=lm --strategy=fsdp --mesh=1x1 \
    --lm_dim=24 --lm_heads=2 --lm_mlp=48 --lm_context=16 --lm_layers=2 --batch=4 --steps=3 --log_every=1 "$@" 2>&1 |
    sed -n 's/^lm: step \([0-9]*\) loss \([0-9.]*\) .*/\1 \2/p'
}
eager=$(lm_losses)
deferred=$(lm_losses --lm_deferred_init)
[ "$(wc -l <<<"$eager")" -eq 3 ] || fail "want 3 loss lines from the eager LM run: '$eager'"
[ "$deferred" = "$eager" ] || fail "--lm_deferred_init losses '$deferred' differ from the eager build's '$eager'"

# SGD resumes: 2 steps, a checkpoint, 2 more equal 4 uninterrupted steps (the
# momentum buffers and the step saved); the checkpoint refused by AdamW,
# naming both optimizers' keys.
sgd=(--lm_optimizer=sgd --lm_momentum=0.9 --lm_weight_decay=0.01 --lr=0.05)
straight=$(lm_losses "${sgd[@]}" --steps=4)
first=$(lm_losses "${sgd[@]}" --steps=2 --checkpoint_dir="$tmp/lm_sgd")
resumed=$(lm_losses "${sgd[@]}" --steps=4 --checkpoint_dir="$tmp/lm_sgd")
[ "$(wc -l <<<"$straight")" -eq 4 ] || fail "want 4 loss lines from the SGD run: '$straight'"
[ "$first"$'\n'"$resumed" = "$straight" ] || fail "SGD resumed losses '$first' + '$resumed' differ from '$straight'"
out=$(timeout 120 "$bin" --launcher=single --master_port=$((20000 + RANDOM % 20000)) --job=lm --strategy=fsdp --mesh=1x1 \
  --lm_dim=24 --lm_heads=2 --lm_mlp=48 --lm_context=16 --batch=4 --steps=6 --checkpoint_dir="$tmp/lm_sgd" 2>&1); got=$?
[ "$got" -eq 1 ] || fail "adamw resuming an SGD checkpoint exited $got, want 1: $out"
grep -q "missing keys.*exp_avg.*unexpected keys.*momentum_buffer" <<<"$out" || fail "adamw resuming SGD: $out"

# Issue 15, defect 8: a rerun of a finished run has nothing to do; another
# run's checkpoint is refused unless asked for (one process, a free port).
port=$((20000 + RANDOM % 20000))
run() { timeout 120 "$bin" --launcher=single --master_port="$port" --checkpoint_dir="$tmp/ck8" "$@" 2>&1; }
out=$(run --steps=2 --seed=1) || fail "first run exited $?: $out"
grep -q "^train: job of 1 processes (single, gloo) trained steps 0->2" <<<"$out" || fail "first run: $out"
out=$(run --steps=2 --seed=1) || fail "rerun exited $?: $out"
grep -qF "train: nothing to do: the checkpoint in $tmp/ck8 is at step 2 and --steps=2" <<<"$out" || fail "rerun: $out"
grep -q "final loss" <<<"$out" && fail "rerun printed an empty job line: $out"
out=$(run --steps=3 --seed=99); got=$?
[ "$got" -eq 1 ] || fail "other seed exited $got, want 1: $out"
grep -qF "is from a different run: seed 1 there, 99 here" <<<"$out" || fail "other seed: $out"
out=$(run --steps=3 --seed=99 --allow_different_run) || fail "allowed other seed exited $?: $out"
grep -q "trained steps 2->3" <<<"$out" || fail "allowed other seed: $out"
echo PASS
