#!/usr/bin/env bash
# tools/s3/with_seaweedfs.sh: CMD sees a working S3 endpoint and its
# variables; CMD's exit status comes back; the server and its files are gone
# afterwards. Skips (exit 0, saying why) only where SeaweedFS is not installed.
set -euo pipefail
# Where tools/setup_seaweedfs.sh put weed (HOME inside a test is not the user's).
source external/seaweedfs/venv.sh
export SHARDLIGHT_SEAWEEDFS_VENV
script=tools/s3/with_seaweedfs.sh
probe=$(mktemp)
trap 'rm -f "$probe"' EXIT

rc=0
bash "$script" bash -c '
  set -e
  sign() { curl -s --aws-sigv4 "aws:amz:$AWS_REGION:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" "$@"; }
  echo hello > "$0"
  [ "$(sign -o /dev/null -w "%{http_code}" -T "$0" "$AWS_ENDPOINT_URL/$SHARDLIGHT_S3_BUCKET/k")" = 200 ]
  [ "$(sign "$AWS_ENDPOINT_URL/$SHARDLIGHT_S3_BUCKET/k")" = hello ]
  echo "endpoint $AWS_ENDPOINT_URL" > "$0"
  exit 7' "$probe" || rc=$?
if [ "$rc" = 3 ]; then
  if [ "${SHARDLIGHT_REQUIRE_S3_SERVER:-}" = 1 ]; then
    echo "FAIL: SeaweedFS is not installed and SHARDLIGHT_REQUIRE_S3_SERVER=1 (bash tools/setup.sh installs it)" >&2
    exit 1
  fi
  echo "SKIPPED: SeaweedFS is not installed (bash tools/setup.sh installs it)"
  exit 0
fi
[ "$rc" = 7 ] || { echo "FAIL: expected CMD's exit status 7, got $rc" >&2; exit 1; }
grep -q '^endpoint http://127.0.0.1:' "$probe" || { echo "FAIL: CMD did not run to its end: $(cat "$probe")" >&2; exit 1; }
echo "PASS: a signed PUT and GET through $(cat "$probe"); exit status passed through"
