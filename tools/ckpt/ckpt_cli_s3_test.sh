#!/usr/bin/env bash
# The ckpt tool on s3://bucket/prefix locations, against a real S3 server
# (tools/s3/with_seaweedfs.sh: SeaweedFS on loopback, the AWS_* variables set
# for it): a checkpoint saved straight to the bucket, inspect and verify
# there, reshard bucket -> bucket, bucket -> local and local -> bucket (each
# loads on its world size), diff across them, a damaged object found by
# verify, and missing credentials named. Skips, saying why, where SeaweedFS
# is not installed, unless SHARDLIGHT_REQUIRE_S3_SERVER=1 (CI), where that
# fails.
source "$(dirname "$0")/ckpt_cli_lib.sh"
source tools/s3/rerun_with_seaweedfs.sh "$0" "$@"
b="s3://$SHARDLIGHT_S3_BUCKET"
"$maker" make "$b/saved" || fail "could not save the test checkpoint to $b/saved"
"$maker" make "$tmp/local" || fail "could not make the local test checkpoint"

expect_exit 0 "saved by" inspect "$b/saved"
expect_exit 0 "" verify "$b/saved"
expect_exit 0 "^EQUAL: 6 tensors bit for bit" diff "$tmp/local" "$b/saved"

# reshard: bucket -> bucket, bucket -> local, local -> bucket.
expect_exit 0 "wrote $b/r5: 6 tensors for 5 ranks" --world_size=5 reshard "$b/saved" "$b/r5"
expect_exit 0 "saved by 5 ranks" inspect "$b/r5"
"$maker" load "$b/r5" 5 2 || fail "the 5-rank reshard in the bucket does not load on 5 and 2 ranks"
expect_exit 0 "for 2 ranks" --world_size=2 reshard "$b/r5" "$tmp/r2"
"$maker" load "$tmp/r2" 2 || fail "the 2-rank reshard from the bucket does not load"
expect_exit 0 "for 3 ranks" --world_size=3 reshard "$tmp/local" "$b/r3"
"$maker" load "$b/r3" 3 1 || fail "the 3-rank reshard into the bucket does not load"
expect_exit 0 "^EQUAL: 6 tensors bit for bit" diff "$b/r3" "$tmp/r2"

# A damaged object: rank 1's data file in the bucket, fetched, flipped and put
# back over itself; verify names it.
s3curl() { curl -sf --aws-sigv4 "aws:amz:$AWS_REGION:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" "$@"; }
key=$(s3curl "$AWS_ENDPOINT_URL/$SHARDLIGHT_S3_BUCKET?list-type=2&prefix=saved%2F" | grep -o 'saved/data-[^<]*-r00001\.safetensors' | head -1)
[ -n "$key" ] || fail "no data file of rank 1 listed under saved/"
mkdir -p "$tmp/fetched"
s3curl -o "$tmp/fetched/${key#saved/}" "$AWS_ENDPOINT_URL/$SHARDLIGHT_S3_BUCKET/$key" || fail "could not fetch $key"
flip_last_byte "$tmp/fetched" >/dev/null
s3curl -o /dev/null -T "$tmp/fetched/${key#saved/}" "$AWS_ENDPOINT_URL/$SHARDLIGHT_S3_BUCKET/$key" || fail "could not put $key back"
expect_exit 1 "${key#saved/}" verify "$b/saved"

# Missing credentials: named, with the location.
out=$(env -u AWS_ACCESS_KEY_ID "$ckpt" inspect "$b/r5" 2>&1) && fail "inspect without credentials succeeded: $out"
grep -q "AWS_ACCESS_KEY_ID" <<<"$out" || fail "missing credentials not named: $out"
grep -qF "$b/r5" <<<"$out" || fail "the location not named: $out"

echo PASS
