# Shared by the DCP interop tests: the torch of the build's LibTorch (peer.sh)
# as the real peer, a scratch directory, and a free port for torchrun.
# Usage: source dcp_lib.sh PEER_SH NAME
set -u
# shellcheck source=/dev/null
source "$1"  # LIBTORCH_PYTHON, LIBTORCH_TORCHRUN, LIBTORCH_VERSION, LIBTORCH_PREFIX
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/$2.XXXXXX")
fail() { echo "FAIL: $*" >&2; exit 1; }
if [ -z "$LIBTORCH_TORCHRUN" ]; then
  echo "SKIP: the LibTorch at $LIBTORCH_PREFIX comes without Python; the DCP tests need the torch it belongs to"
  exit 0
fi
if ! "$LIBTORCH_PYTHON" -c 'import torch.distributed.checkpoint as d, torch.distributed.tensor; d.save, d.load' 2>/dev/null; then
  echo "SKIP: torch $LIBTORCH_VERSION ($LIBTORCH_PYTHON) has no torch.distributed.checkpoint with DTensor; the DCP peer needs torch >= 2.4 (the --config=torch2 leg)"
  exit 0
fi
free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# dcp_torchrun N ARGS...: torchrun of N processes on a free port.
dcp_torchrun() {
  local n=$1
  shift
  "$LIBTORCH_TORCHRUN" --nnodes=1 --nproc_per_node="$n" --rdzv_backend=c10d \
    --rdzv_endpoint="127.0.0.1:$(free_port)" --rdzv_id="dcp$RANDOM" "$@"
}
# torchrun_py N SCRIPT ARGS...: a Python job of N processes, under peer.sh's
# torchrun_once_more (a job whose process torch itself killed by a signal runs
# once more, on a new port).
torchrun_py() { torchrun_once_more "$tmp/torchrun_py.$$.log" dcp_torchrun "$@"; }
