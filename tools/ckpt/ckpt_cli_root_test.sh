#!/usr/bin/env bash
# The ckpt commands given a checkpoint root (`latest` + step-<N>/): they use
# its newest good step and say which, falling back past a damaged one as a
# load does (also past a broken `latest`); a root's bad input is an error
# naming it, and nothing in the root is deleted or changed.
source "$(dirname "$0")/ckpt_cli_lib.sh"

root="$tmp/root"
mkdir -p "$root"
"$maker" make "$root/step-000002" || fail "could not make step 2"
"$maker" make "$root/step-000004" 10 || fail "could not make step 4"
echo step-000004 >"$root/latest"
snapshot() { (cd "$1" && find . -type f -exec md5sum {} + | sort); }

# A good root: every reading command uses `latest`'s step and says so.
expect_exit 0 "checkpoint root '$root': using step 4 ('$root/step-000004')" inspect "$root"
grep -Eq '^embed\.weight +sharded +F32 +\[40, 8\]' <<<"$LAST" || fail "inspect of the root: $LAST"
expect_exit 0 "^OK: 6 tensors" verify "$root"
expect_exit 0 "^EQUAL: 6 tensors bit for bit" diff "$root" "$root/step-000004"
grep -q "using step 4" <<<"$LAST" || fail "diff does not say which step: $LAST"

# Step 4 damaged (a data file gone): the commands fall back to step 2, with
# the line a load prints, and step 2's values are what they read.
rm "$root"/step-000004/data-*-r00001.safetensors
before=$(snapshot "$root")
expect_exit 0 "wrote $tmp/all.safetensors" consolidate "$root" "$tmp/all.safetensors"
grep -q "ckpt: step 4 ('$root/step-000004') failed verification: .*r00001.*; falling back to step 2" <<<"$LAST" \
  || fail "no fallback line: $LAST"
grep -q "using step 2 ('$root/step-000002')" <<<"$LAST" || fail "consolidate does not say it used step 2: $LAST"
"$maker" check "$tmp/all.safetensors" || fail "consolidate of the root did not read step 2"
expect_exit 0 "for 3 ranks" --world_size=3 reshard "$root" "$tmp/r3"
grep -q "using step 2" <<<"$LAST" || fail "reshard does not say which step: $LAST"
expect_exit 0 "^EQUAL" diff "$tmp/r3" "$root/step-000002"
[ "$(snapshot "$root")" = "$before" ] || fail "reading the root changed it"

# Bad input: each an error naming what is wrong (exit 1), nothing written,
# the root unchanged; each case goes to another reading command (one process
# a case keeps the test fast), so every command meets a bad root.
check_refused() {  # check_refused DIR NEEDLE COMMAND...: the command refuses DIR
  local dir="$1" needle="$2" state
  shift 2
  state=$(snapshot "$dir")
  expect_exit 1 "$needle" "$@"
  [ -e "$tmp/refused.safetensors" ] || [ -e "$tmp/refused" ] && fail "a refused command wrote its output"
  [ "$(snapshot "$dir")" = "$state" ] || fail "a refused command changed $dir"
}
# A broken `latest` is like a broken step: the committed steps are tried
# newest first (4, damaged above, then 2), with the lines a load prints, and
# the root is unchanged.
cp -r "$root" "$tmp/garbled" && printf 'step-4x\n' >"$tmp/garbled/latest"
cp -r "$root" "$tmp/dangling" && echo step-000009 >"$tmp/dangling/latest"
for broken in "garbled:\"step-4x\" is not a step directory name (step-<digits>)" \
  "dangling:it names 'step-000009', which is not in the root"; do
  dir="$tmp/${broken%%:*}"
  before=$(snapshot "$dir")
  expect_exit 0 "using step 2 ('$dir/step-000002')" verify "$dir"
  grep -q "ckpt: broken 'latest' pointer '$dir/latest': ${broken#*:}; falling back to the newest committed step, 4" \
    <<<"$LAST" || fail "no fallback line for the ${broken%%:*} 'latest': $LAST"
  [ "$(snapshot "$dir")" = "$before" ] || fail "reading the root with a ${broken%%:*} 'latest' changed it"
done
cp -r "$root" "$tmp/twice" && cp -r "$root/step-000002" "$tmp/twice/step-2"
check_refused "$tmp/twice" "'step-000002' and 'step-2' both claim step 2" \
  consolidate "$tmp/twice" "$tmp/refused.safetensors"
cp -r "$root" "$tmp/foreign" && mkdir "$tmp/foreign/step-000003" && echo notes >"$tmp/foreign/step-000003/notes.txt"
check_refused "$tmp/foreign" "claims step 3 but is not a checkpoint: no index.json, and it holds 'notes.txt'" \
  --world_size=2 reshard "$tmp/foreign" "$tmp/refused"
cp -r "$root" "$tmp/nolatest" && rm "$tmp/nolatest/latest"
check_refused "$tmp/nolatest" "no checkpoint in '$tmp/nolatest': it has no 'latest' pointer" diff "$tmp/r3" "$tmp/nolatest"
mkdir -p "$tmp/allbad" && cp -r "$root/step-000004" "$tmp/allbad/" && echo step-000004 >"$tmp/allbad/latest"
check_refused "$tmp/allbad" "no checkpoint in root '$tmp/allbad' loads: step 4 .* no older checkpoint" inspect "$tmp/allbad"
echo PASS
