#!/usr/bin/env bash
# The ckpt tool's dependency closure (a genquery of deps(//tools/ckpt:ckpt))
# holds none of the collective layer: the cross-rank agreement, the
# collectives, process groups, the box exchange, the rank monitor, the
# collective checkpoint protocol and roots.
set -euo pipefail
deps="$1"
[ -s "$deps" ] || { echo "FAIL: empty dependency list '$deps'"; exit 1; }
grep -q '^//tools/ckpt:ckpt$' "$deps" || { echo "FAIL: '$deps' is not the ckpt tool's closure"; exit 1; }
grep -q '^//sharded/checkpoint/roots:root_layout$' "$deps" || { echo "FAIL: the tool no longer resolves roots through root_layout"; exit 1; }
forbidden='^//sharded:(agreement|collectives|process_groups|box_exchange|rank_monitor)$|^//sharded/checkpoint:checkpoint$|^//sharded/checkpoint/roots:checkpoint_root$|^//sharded/checkpoint/async:'
if grep -E "$forbidden" "$deps"; then
  echo "FAIL: //tools/ckpt:ckpt depends on the collective targets above"
  exit 1
fi
echo "PASS: $(grep -c '^//' "$deps") targets in the tool's closure, none collective"
