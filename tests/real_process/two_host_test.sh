#!/usr/bin/env bash
# Two "hosts": two network namespaces joined by a veth pair on a private test
# subnet that this test creates and removes itself, each with its own host
# name (a UTS namespace; /etc/netns/NAME/hosts maps the names). torchrun
# --nnodes=2 --rdzv_backend=c10d runs in each: 2 + 2 processes train and
# checkpoint, then 2 + 1 resume; the result is bit-identical to the thread
# simulator's 4 -> 3 run. Needs root (ip netns); skipped with the reason
# otherwise.
source "$(dirname "$0")/common.sh" "$@"

if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP: creating network namespaces needs root (run the test as root)"
  exit 0
fi
for tool in ip unshare hostname; do command -v $tool >/dev/null || fail "$tool is missing (iproute2, util-linux)"; done

id=$$
octet=$((id % 200 + 20))
subnet="10.213.$octet"
ns_a="sl-a-$id" ns_b="sl-b-$id"
cleanup() {
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  rm -rf "/etc/netns/$ns_a" "/etc/netns/$ns_b"
}
trap cleanup EXIT
ip netns add "$ns_a" && ip netns add "$ns_b" || fail "ip netns add failed"
ip link add "va$id" type veth peer name "vb$id" || fail "ip link add veth failed"
ip link set "va$id" netns "$ns_a" && ip link set "vb$id" netns "$ns_b" || fail "moving the veth ends failed"
ip -n "$ns_a" addr add "$subnet.1/24" dev "va$id" && ip -n "$ns_b" addr add "$subnet.2/24" dev "vb$id" || fail "addr"
for ns in "$ns_a" "$ns_b"; do
  ip -n "$ns" link set lo up && ip -n "$ns" link set "$( [ $ns = $ns_a ] && echo va$id || echo vb$id)" up || fail "link up"
  mkdir -p "/etc/netns/$ns"
  printf '127.0.0.1 localhost\n%s.1 sl-host-a\n%s.2 sl-host-b\n' "$subnet" "$subnet" >"/etc/netns/$ns/hosts"
done

want=$(sim_digest 4 8 13)
note "simulator 4 -> 3 ranks, 8 steps: digest $want"

# host NS NAME NPROC JOBID ARGS...: one torchrun agent on one "host".
host() {
  local ns=$1 name=$2 nproc=$3 job=$4
  shift 4
  ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$name" \
    "$LIBTORCH_TORCHRUN" --nnodes=2 --nproc_per_node="$nproc" --rdzv_backend=c10d --rdzv_endpoint="sl-host-a:29400" \
    --rdzv_id="$job" --no_python $LIBTORCH_TORCHRUN_FLAGS --log_dir="$logs/$name" --max_restarts=0 \
    "$train_bin" --rendezvous_timeout_ms=120000 "$@"
}
# job NPROC_A NPROC_B ARGS...: both hosts, waits for both.
job() {
  local na=$1 nb=$2 rc=0
  shift 2
  local jid="j$RANDOM"
  host "$ns_a" sl-host-a "$na" "$jid" "$@" >"$work/a.out" 2>&1 &
  local a=$!
  host "$ns_b" sl-host-b "$nb" "$jid" "$@" >"$work/b.out" 2>&1 &
  local b=$!
  wait $a || rc=1
  wait $b || rc=1
  cat "$work/a.out" "$work/b.out"
  return $rc
}

ckpt="$work/ckpt"
out=$(job 2 2 --steps=4 --seed=13 --checkpoint_dir="$ckpt") || fail "2 + 2 processes failed: $out"
grep -q "^train: job of 4 processes" <<<"$out" || fail "no 4-process job line: $out"
grep -Eq "^train: torchrun rank [0-3]/4 \(local [01]/2, node 1\), store sl-host-[ab]:" <<<"$out" || fail "no node 1: $out"
out=$(job 2 1 --steps=8 --seed=13 --checkpoint_dir="$ckpt") || fail "2 + 1 processes failed: $out"
got=$(digest_of "$out")
note "two hosts, 4 -> 3 processes: digest $got"
[ "$got" = "$want" ] || fail "the two-host run ended at '$got', the simulator at '$want'"
echo "PASS"
