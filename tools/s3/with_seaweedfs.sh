#!/usr/bin/env bash
# with_seaweedfs.sh CMD [ARG...]: runs CMD next to a fresh SeaweedFS S3 server
# on loopback, with AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION and
# AWS_ENDPOINT_URL set for it (and SHARDLIGHT_S3_BUCKET, a bucket it made),
# then stops the server and removes everything it left. For what runs outside
# C++ tests (boto3, a benchmark, a shell); the C++ tests use
# sharded/checkpoint/storage/s3/testing/seaweedfs_server.h, which starts the
# server the same way.
#
# As root, CMD and the server run in a private network namespace with only
# loopback up (unshare -n): nothing can leave the machine. Otherwise both use
# the machine's loopback; the server binds 127.0.0.1 only either way, and
# always runs with -master.telemetry=false (its default posts to an outside
# address). Exit status: CMD's; 3 when SeaweedFS is not installed (bash
# tools/setup.sh installs it); 4 when the server did not become ready.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 CMD [ARG...]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)

if [ "${SHARDLIGHT_IN_NETNS:-}" != 1 ] && [ "$(id -u)" = 0 ] && command -v unshare >/dev/null && command -v ip >/dev/null; then
  exec env SHARDLIGHT_IN_NETNS=1 unshare -n bash -c 'ip link set lo up && exec "$0" "$@"' "$0" "$@"
fi

version=$(sed -n 's/^SEAWEEDFS_VERSION = "\(.*\)"$/\1/p' "$here/../bazel/system_libs/seaweedfs.bzl")
weed=${SHARDLIGHT_SEAWEEDFS_VENV:-$HOME/.cache/shardlight/seaweedfs-$version}/bin/weed
if [ ! -x "$weed" ]; then
  echo "with_seaweedfs: SeaweedFS $version is not installed (no $weed); bash tools/setup.sh installs it" >&2
  exit 3
fi

# Ten free ports on 127.0.0.1 (weed derives port + 10000 in places; the
# admin gRPC port must be the admin port + 10000), below the kernel's
# ephemeral range where it leaves room: weed's own parts connect to each other
# from ephemeral ports as they start, and one took the S3 port before the S3
# gateway (started last) bound it -- "bind: address already in use", seen in a
# full-suite run. No two ports 10000 apart (weed derives port + 10000). Picked
# again, with the server restarted, if one was taken all the same.
pick_ports() {
  read -r -a ports < <(python3 - <<'PY'
import random, socket
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); return True
    except OSError:
        return False
    finally:
        s.close()
try:
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except (OSError, ValueError, IndexError):
    low = 32768
top = low - 1 - 10000
first, last = (10000, top) if top >= 15000 else (20000, 49999)
out = []
while len(out) < 9:
    p = random.randint(first, last)
    if p in out or p + 10000 in out or p - 10000 in out or not free(p) or (len(out) == 8 and not free(p + 10000)):
        continue
    out.append(p)
print(*out, out[8] + 10000)
PY
)
}

dir=$(mktemp -d /tmp/shardlight-s3-XXXXXX)
before=$(ls /tmp/seaweedfs-*.sock 2>/dev/null || true)
pid=
ports=()
stop_weed() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && { echo "with_seaweedfs: weed ignored TERM for 30 s: KILL" >&2; kill -KILL "$pid" 2>/dev/null || true; }
    wait "$pid" 2>/dev/null || true
  fi
  pid=
  for p in "${ports[@]}"; do
    for s in /tmp/seaweedfs-*-"$p".sock; do
      [ -e "$s" ] && ! grep -qxF "$s" <<<"$before" && rm -f "$s"
    done
  done
  # The loop's status is its last test's (a glob that matched nothing): under
  # set -e a nonzero return here would end the EXIT trap, and the script,
  # with status 1 after CMD passed.
  return 0
}
stop() {
  stop_weed
  rm -rf "$dir"
}
trap stop EXIT
trap 'exit 130' INT TERM

export AWS_ACCESS_KEY_ID=shardlight-test AWS_SECRET_ACCESS_KEY=shardlight-test-secret AWS_REGION=us-east-1
export SHARDLIGHT_S3_BUCKET=shardlight
# Ready when a signed ListBuckets answers 200 (a plain GET /, which curl's
# own SigV4 signs correctly), within 60 s.
signed() { curl -s -o /dev/null -w '%{http_code}' --aws-sigv4 "aws:amz:$AWS_REGION:s3" \
  --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" "$@"; }
# Starts weed mini on fresh ports and a fresh data folder; sets code to the
# last ListBuckets answer (200: ready).
start_weed() {
  pick_ports
  export AWS_ENDPOINT_URL="http://127.0.0.1:${ports[6]}"
  rm -rf "$dir/data" "$dir/log" && mkdir -p "$dir/data" "$dir/log"
  printf '{"identities":[{"name":"tester","credentials":[{"accessKey":"%s","secretKey":"%s"}],"actions":["Admin","Read","Write","List","Tagging"]}]}' \
    "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY" >"$dir/s3.json"
  "$weed" -logdir="$dir/log" mini -dir="$dir/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 -master.telemetry=false \
    -webdav=false -admin.ui=false -s3.port.iceberg=0 -s3.port.lance=0 -s3.autoCreateBucket=false \
    -s3.config="$dir/s3.json" -filer.localSocket="$dir/filer.sock" -s3.localSocket="$dir/s3.sock" \
    -master.port="${ports[0]}" -master.port.grpc="${ports[1]}" -volume.port="${ports[2]}" -volume.port.grpc="${ports[3]}" \
    -filer.port="${ports[4]}" -filer.port.grpc="${ports[5]}" -s3.port="${ports[6]}" -s3.port.grpc="${ports[7]}" \
    -admin.port="${ports[8]}" -admin.port.grpc="${ports[9]}" >"$dir/out.log" 2>&1 </dev/null &
  pid=$!
  code=000
  for _ in $(seq 1 600); do
    kill -0 "$pid" 2>/dev/null || break
    code=$(signed "$AWS_ENDPOINT_URL/" || true)
    [ "$code" = 200 ] && break
    sleep 0.1
  done
}
for attempt in 1 2 3; do
  start_weed
  [ "$code" = 200 ] && break
  grep -q 'address already in use' "$dir/out.log" || break
  echo "with_seaweedfs: a port was taken before weed bound it (attempt $attempt): again on new ports" >&2
  stop_weed
done
if [ "$code" != 200 ]; then
  echo "with_seaweedfs: weed mini did not answer a signed ListBuckets with 200 (last: $code); its output:" >&2
  tail -30 "$dir/out.log" >&2
  exit 4
fi
code=$(signed -X PUT "$AWS_ENDPOINT_URL/$SHARDLIGHT_S3_BUCKET")
[ "$code" = 200 ] || { echo "with_seaweedfs: creating bucket $SHARDLIGHT_S3_BUCKET answered $code" >&2; exit 4; }

rc=0
"$@" || rc=$?
exit "$rc"
