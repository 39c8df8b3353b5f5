#!/usr/bin/env bash
# Issue 28 as real processes under torchrun: an index.json that is there but
# cannot be read (a dangling link, a link loop, a directory, a FIFO, a file
# that is no index, an unreadable file) makes every process of a resume fail
# naming it, with every file as it was; in a checkpoint root the resume falls
# back to the previous good step instead. Only a directory without an index
# starts over, and rank 0 says what it removed.
source "$(dirname "$0")/common.sh" "$@"

# Every entry under $1 (links not followed) and the bytes of its files.
snapshot() { (cd "$1" && find . -printf '%p %y %m %l\n' | sort && find . -type f -exec md5sum {} + | sort); }

# Makes $1 (a saved index) broken in the way $2 names; prints what the error must say.
kinds="dangling loop directory fifo not-an-index unreadable"
break_index() {
  local path=$1
  rm -f "$path"
  case $2 in
    dangling) ln -s "$path.gone" "$path" && echo "dangling symbolic link" ;;
    loop) ln -s index.json "$path" && echo "symbolic-link loop" ;;
    directory) mkdir "$path" && echo "is a directory, not a regular file" ;;
    fifo) mkfifo "$path" && echo "is a FIFO, not a regular file" ;;
    not-an-index) echo '{"format": "notes", "version": 1}' >"$path" && echo "not a shardlight checkpoint index" ;;
    unreadable) cp "$work/index.saved" "$path" && chmod 000 "$path" && echo "Permission denied" ;;
  esac
}
# Puts back the directory $1 as its first job left it.
restore() {
  rm -rf "$1"
  cp -a "$1.pristine" "$1"
}

# Whether case $2 of part $1 cannot run here, saying why: root ignores file
# modes, so the unreadable case needs another user.
skipped() {
  [ "$2" = unreadable ] || return 1
  touch "$work/probe" && chmod 000 "$work/probe"
  cat "$work/probe" >/dev/null 2>&1 || return 1
  note "$1, $2: skipped (running as root: file modes do not deny reads)"
}

plain="$work/plain"
out=$(torchrun_job 2 "$train_bin" --steps=4 --seed=5 --checkpoint_dir="$plain" 2>&1) || fail "first job exited $?: $out"
cp -a "$plain" "$plain.pristine"
cp "$plain/index.json" "$work/index.saved"
for kind in $kinds; do
  skipped plain "$kind" && continue
  why=$(break_index "$plain/index.json" "$kind")
  before=$(snapshot "$plain")
  out=$(torchrun_job 2 "$train_bin" --steps=8 --seed=5 --checkpoint_dir="$plain" 2>&1) && fail "plain, $kind: the resume succeeded: $out"
  for r in 0 1; do
    grep -q "^\(\[default$r\]:\)\{0,1\}train: rank $r: .*resume from '$plain' failed on rank 0: .*'$plain/index.json'.*$why" <<<"$out" ||
      fail "plain, $kind: rank $r did not name the index and why ($why): $out"
  done
  grep -q "removed" <<<"$out" && fail "plain, $kind: something was removed: $out"
  [ "$(snapshot "$plain")" = "$before" ] || fail "plain, $kind: the directory changed: $out"
  note "plain, $kind: refused on both ranks, every file kept"
  restore "$plain"
done

root="$work/root"
out=$(torchrun_job 2 "$train_bin" --steps=4 --seed=5 --checkpoint_every=2 --keep_last=3 --checkpoint_dir="$root" 2>&1) ||
  fail "first root job exited $?: $out"
cp -a "$root" "$root.pristine"
cp "$root/step-000004/index.json" "$work/index.saved"
for kind in $kinds; do
  skipped root "$kind" && continue
  why=$(break_index "$root/step-000004/index.json" "$kind")
  before=$(snapshot "$root/step-000004")
  # To step 3 only: the broken step 4 is never saved over.
  out=$(torchrun_job 2 "$train_bin" --steps=3 --seed=5 --checkpoint_every=2 --keep_last=3 --checkpoint_dir="$root" 2>&1) ||
    fail "root, $kind: the resume failed: $out"
  grep -q "resume: step 4 ('$root/step-000004') failed verification: .*$why.*; falling back to step 2$" <<<"$out" ||
    fail "root, $kind: no fallback line naming why ($why): $out"
  grep -q "^train: resumed from step 2" <<<"$out" || fail "root, $kind: did not resume step 2: $out"
  [ "$(snapshot "$root/step-000004")" = "$before" ] || fail "root, $kind: the broken step changed: $out"
  note "root, $kind: fell back to step 2, the broken step kept"
  restore "$root"
done

# No index at all: the one case that starts over, saying what it removed.
rm "$plain/index.json"
out=$(torchrun_job 2 "$train_bin" --steps=4 --seed=5 --checkpoint_dir="$plain" 2>&1) || fail "no index: exited $?: $out"
grep -q "^train: job of 2 processes (torchrun, gloo) trained steps 0->4" <<<"$out" || fail "no index: did not start over: $out"
grep -qF "checkpoint: removed 2 files in '$plain': the directory had no index (leftovers of a save that never committed)" <<<"$out" ||
  fail "no index: the removal was not said: $out"
"$ckpt_bin" verify "$plain" >/dev/null || fail "no index: the new checkpoint does not verify"
note "no index: started over and said what it removed"
echo "PASS"
