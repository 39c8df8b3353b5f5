# Sourced by a test script as its first S3 step, with the script's own
# arguments: `source tools/s3/rerun_with_seaweedfs.sh "$0" "$@"`. The first
# time, it runs the script again next to a fresh SeaweedFS
# (with_seaweedfs.sh: AWS_* and SHARDLIGHT_S3_BUCKET set) and exits with its
# status; where SeaweedFS is not installed it skips (exit 0, saying why), or
# fails when SHARDLIGHT_REQUIRE_S3_SERVER=1 (CI). The second time (inside),
# it returns and the script goes on. Needs @seaweedfs//:venv.sh,
# //tools/s3:with_seaweedfs.sh and //tools/bazel/system_libs:seaweedfs.bzl
# in the test's data.
# shellcheck source=/dev/null
source external/seaweedfs/venv.sh
export SHARDLIGHT_SEAWEEDFS_VENV
if [ "${SHARDLIGHT_IN_S3:-}" != 1 ]; then
  rerun_rc=0
  SHARDLIGHT_IN_S3=1 bash tools/s3/with_seaweedfs.sh bash "$@" || rerun_rc=$?
  if [ "$rerun_rc" = 3 ]; then
    if [ "${SHARDLIGHT_REQUIRE_S3_SERVER:-}" = 1 ]; then
      echo "FAIL: SeaweedFS is not installed and SHARDLIGHT_REQUIRE_S3_SERVER=1 (bash tools/setup.sh installs it)" >&2
      exit 1
    fi
    echo "SKIPPED: SeaweedFS is not installed (bash tools/setup.sh installs it)"
    exit 0
  fi
  exit "$rerun_rc"
fi
