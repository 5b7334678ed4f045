#!/usr/bin/env bash
# Makes sure Debian's OpenBLAS (libopenblas0-pthread) is installed: the CPU device's matrix multiplies call its
# cblas_sgemm through an FFI (packages/gpu/src/cpu/Blas.ts), several times faster than the WebAssembly SIMD route.
# Optional: without it the CPU device runs its matmuls on WebAssembly SIMD, and this script says so. The
# distribution's package, from the machine's configured sources; nothing is compiled.
set -euo pipefail

[ "$(uname -s)" = "Linux" ] || exit 0
for dir in /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib; do
  [ -e "$dir/libopenblas.so.0" ] && exit 0
  [ -e "$dir/openblas-pthread/libopenblas.so.0" ] && exit 0
done

if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "envtrain: OpenBLAS is not installed, so the CPU device's matmuls use WebAssembly SIMD (several times slower)." >&2
  echo "For the faster route, install Debian's package as root:" >&2
  echo "  sudo sh -c 'apt-get update && apt-get install -y libopenblas0-pthread'" >&2
  exit 0
fi
echo "envtrain: installing Debian's OpenBLAS (libopenblas0-pthread) for the CPU device's matmuls…" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq libopenblas0-pthread >&2
echo "envtrain: $(dpkg-query -W -f='libopenblas0-pthread ${Version}' libopenblas0-pthread 2>/dev/null || echo 'OpenBLAS installed')" >&2
