#!/usr/bin/env bash
# The S3 peers against a real S3 server (SeaweedFS on loopback,
# tools/s3/with_seaweedfs.sh), on the torch 2.x leg:
#   shardlight -> DCP:  SaveDcpCheckpoint at W=3 to s3://; real
#     torch.distributed.checkpoint.load (through fsspec/s3fs) reads it, in one
#     process and as DTensors at W'=2.
#   DCP -> shardlight:  real dcp.save at W=2 (torchrun, s3fs) to s3://;
#     LoadCheckpoint reads it, resharded, at W'=3 and 1.
#   boto3:  lists and reads (ranged GETs) a shardlight checkpoint the ckpt
#     tool resharded into the bucket, every tensor bit-equal.
# Skips, saying why, without torch 2.x or SeaweedFS (fails for the latter
# when SHARDLIGHT_REQUIRE_S3_SERVER=1, as in CI).
save="$1"; peer_load="$2"; ckpt="$3"; check="$4"; s3_dcp_save="$5"; boto3_read="$6"
source "$(dirname "$0")/dcp_lib.sh" "$7" s3peer || { echo "FAIL: cannot source dcp_lib.sh"; exit 1; }
if ! "$LIBTORCH_PYTHON" -c 'import boto3, s3fs' 2>/dev/null; then
  echo "SKIP: $LIBTORCH_PYTHON has no boto3 and s3fs (bash tools/setup_torch2.sh pins them)"
  exit 0
fi
source tools/s3/rerun_with_seaweedfs.sh "$0" "$@"
b="s3://$SHARDLIGHT_S3_BUCKET"

# shardlight -> DCP through s3fs.
out=$("$save" 3 "$b/sl_dcp" "$tmp/ref3" 2>&1) || fail "shardlight's DCP save to $b/sl_dcp: $out"
"$ckpt" export "$tmp/ref3" "$tmp/ref3.pt" >/dev/null || fail "export of the reference"
"$LIBTORCH_PYTHON" "$peer_load" plain "$b/sl_dcp" "$tmp/ref3.pt" || fail "dcp.load (s3fs) of shardlight's DCP save"
torchrun_py 2 "$peer_load" dtensor "$b/sl_dcp" "$tmp/ref3.pt" >"$tmp/load2.log" 2>&1 ||
  { cat "$tmp/load2.log"; fail "dcp.load (s3fs) into DTensors at W'=2 of shardlight's DCP save"; }

# DCP through s3fs -> shardlight, resharded.
torchrun_py 2 "$s3_dcp_save" "$b/torch_dcp" "$tmp/torch.pt" >"$tmp/save2.log" 2>&1 ||
  { cat "$tmp/save2.log"; fail "dcp.save (s3fs) at W=2 to $b/torch_dcp"; }
"$check" "$b/torch_dcp" "$tmp/torch.pt" 3,1 - || fail "LoadCheckpoint from $b/torch_dcp of torch's DCP save"

# boto3 reads shardlight's own format.
"$ckpt" --world_size=3 reshard "$tmp/ref3" "$b/sl_ckpt" >/dev/null || fail "ckpt reshard into $b/sl_ckpt"
"$LIBTORCH_PYTHON" "$boto3_read" "$SHARDLIGHT_S3_BUCKET" sl_ckpt "$tmp/ref3.pt" || fail "boto3 could not read $b/sl_ckpt"
echo PASS
