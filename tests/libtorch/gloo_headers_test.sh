#!/usr/bin/env bash
# Gloo's code lives inside libtorch_cpu. ProcessGroupGloo.hpp includes gloo
# headers, and a torch wheel ships none, so the torch 2.x leg compiles against
# Debian's libgloo-dev headers (an older gloo). That is safe exactly when no
# gloo code from those headers ends up in shardlight's binaries (no inline
# function, vtable or typeinfo of a gloo type defined by our objects, whose
# layout could differ from the library's gloo) and every gloo symbol our code
# refers to is defined by the LibTorch's own libraries. This test checks both
# on the real binaries, on every leg; with Debian's LibTorch the definitions may
# come from Debian's libgloo.so, which matches it.
# Usage: gloo_headers_test.sh GLOO_SOURCE_TXT PEER_SH BINARY...
set -u
fail() { echo "FAIL: $*" >&2; exit 1; }
source_txt=$1
# shellcheck source=/dev/null
source "$2"
shift 2
headers=$(cat "$source_txt")
echo "gloo headers: $headers; LibTorch $LIBTORCH_VERSION at $LIBTORCH_PREFIX"

libs=()
case "$headers" in
  debian) libs=(/usr/lib/libgloo.so) ;;
  libtorch | debian-headers) ;;
  *) fail "unknown gloo header source '$headers'" ;;
esac
for lib in "$LIBTORCH_PREFIX"/lib/libtorch_cpu.so /usr/lib/x86_64-linux-gnu/libtorch_cpu.so; do
  [ -e "$lib" ] && { libs+=("$lib"); break; }
done
[ ${#libs[@]} -gt 0 ] || fail "no libtorch_cpu.so under $LIBTORCH_PREFIX/lib"
provided=$(nm -D --defined-only "${libs[@]}" 2>/dev/null | awk '{print $NF}' | sort -u)
[ -n "$provided" ] || fail "nm found no symbols in ${libs[*]}"

for bin in "$@"; do
  name=$(basename "$bin")
  # Symbols our binary defines in namespace gloo (mangled _ZN4gloo..., and the
  # vtable/typeinfo/VTT forms _ZTVN4gloo, _ZTIN4gloo, _ZTSN4gloo, _ZTTN4gloo):
  # no code at all (any t/T/W/V: a function, a weak inline one, a vtable), and
  # no global data that could stand in for the library's. Local read-only
  # constants (nm type r, e.g. gloo::transport::kUnsetTimeout) are values
  # copied into our object, with no layout and nothing to interpose.
  syms=$(nm --defined-only "$bin" | awk '$NF ~ /^_Z(T[VIST])?N4gloo/ {print $(NF-1), $NF}')
  defined=$(awk '$1 != "r"' <<<"$syms" | awk 'NF {print $2}')
  [ -z "$defined" ] || fail "$name defines gloo code or data compiled from the headers: $(c++filt <<<"$defined" | head -5)"
  constants=$(awk '$1 == "r" {print $2}' <<<"$syms" | c++filt | sort -u | tr '\n' ' ')
  used=$(nm -u "$bin" | awk '{print $NF}' | sed 's/@.*//' | grep -E '^_Z(T[VIST])?N4gloo' | sort -u || true)
  count=0
  for sym in $used; do
    grep -qxF "$sym" <<<"$provided" || fail "$name needs $(c++filt "$sym"), which ${libs[*]} do not define"
    count=$((count + 1))
  done
  echo "$name: defines no gloo code (local constants: ${constants:-none}); its $count gloo references are all defined by ${libs[*]}"
done
echo "PASS"
