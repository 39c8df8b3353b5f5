# Shared by the cluster binary's shell tests: `source cli_test_lib.sh BIN`.
# expect_exit CODE TEXT ARGS...: runs BIN ARGS, wants exit CODE and TEXT in
# its output (a fixed string).
bin="$1"
fail() { echo "FAIL: $*" >&2; exit 1; }

expect_exit() {
  local want="$1" needle="$2"; shift 2
  local got out
  out=$("$bin" "$@" 2>&1); got=$?
  [ "$got" -eq "$want" ] || fail "$* exited $got, want $want: $out"
  grep -qF -- "$needle" <<<"$out" || fail "$*: message lacks '$needle': $out"
}
