#!/usr/bin/env bash
# Makes sure Debian's OpenBLAS (libopenblas0-pthread) is installed: the CPU device's matrix multiplies call its
# cblas_sgemm through an FFI (packages/gpu/src/cpu/Blas.ts), several times faster than the WebAssembly SIMD route.
# Optional: without it the CPU device runs its matmuls on WebAssembly SIMD, and this script says so. The
# distribution's package, from the machine's configured sources; nothing is compiled.
set -euo pipefail
source "$(dirname "$0")/lib/debian-package.sh"

[ "$(uname -s)" = "Linux" ] || exit 0
for dir in /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib; do
  [ -e "$dir/libopenblas.so.0" ] && exit 0
  [ -e "$dir/openblas-pthread/libopenblas.so.0" ] && exit 0
done
debian_package_install libopenblas0-pthread \
  "the CPU device's matmuls use WebAssembly SIMD without it (several times slower)." optional \
  "dpkg-query -W -f='libopenblas0-pthread \${Version}' libopenblas0-pthread"
