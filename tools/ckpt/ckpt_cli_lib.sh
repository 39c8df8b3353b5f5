# Sourced by the ckpt_cli_*_test.sh scripts: the tool and test-checkpoint
# maker from the arguments, a scratch directory, and the checks they share.
set -u
ckpt="$1"
maker="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }

expect_exit() {  # expect_exit CODE NEEDLE ARGS...: runs ckpt, checks exit code and output
  local want="$1" needle="$2"; shift 2
  local got out
  out=$("$ckpt" "$@" 2>&1); got=$?
  [ "$got" -eq "$want" ] || fail "ckpt $* exited $got, want $want: $out"
  grep -q -- "$needle" <<<"$out" || fail "ckpt $*: output lacks '$needle': $out"
  LAST="$out"
}

flip_last_byte() {  # flip_last_byte DIR: corrupts a data byte of rank 1's file; prints the file's name
  local file size offset orig
  file=$(cd "$1" && ls data-*-r00001.safetensors)
  size=$(stat -c %s "$1/$file")
  offset=$((size - 3))
  orig=$(od -An -tu1 -j "$offset" -N1 "$1/$file" | tr -d ' ')
  printf "\\$(printf %03o $(( (orig + 1) % 256 )))" | dd of="$1/$file" bs=1 seek="$offset" conv=notrunc status=none
  echo "$file"
}
