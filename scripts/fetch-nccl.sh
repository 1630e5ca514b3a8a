#!/usr/bin/env bash
# Fetches one NCCL release as NVIDIA's PyPI wheel (nvidia-nccl-cu13: headers
# and libnccl.so.2, no build needed) and prints the nccl_home to build
# nccl-dcp against it:
#
#   scripts/fetch-nccl.sh VERSION [DIR]
#     VERSION  e.g. 2.32.3 (pip versions: python3 -m pip index versions nvidia-nccl-cu13)
#     DIR      where to unpack (default .deps/nccl-VERSION; ignored by git)
#   meson setup build-nccl-2.32 -Dnccl_home="$(scripts/fetch-nccl.sh 2.32.3)"
#
# Only the last line goes to stdout: the nccl_home (DIR/nvidia/nccl, the
# wheel's layout: include/, lib/libnccl.so.2). A complete unpack is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ $# -gt 2 ] || ! [[ $1 =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "usage: $0 VERSION [DIR]   (VERSION like 2.32.3, got '${1:-}')" >&2
  exit 2
fi
version=$1
dir=$(realpath -m "${2:-.deps/nccl-$version}")
home="$dir/nvidia/nccl"

# The unpack is complete when the header's version is the one asked for.
header_version() {
  grep -E '^#define NCCL_(MAJOR|MINOR|PATCH) ' "$1/include/nccl.h" 2>/dev/null | awk '{print $3}' | paste -sd.
}
if [ -f "$home/lib/libnccl.so.2" ] && [ "$(header_version "$home")" = "$version" ]; then
  echo "$home"
  exit 0
fi

mkdir -p "$dir"
wheel_dir=$(mktemp -d "$dir/.download.XXXXXX")
trap 'rm -rf "$wheel_dir"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: "nvidia-nccl-cu13==$version" -d "$wheel_dir" >&2
wheel=$(ls "$wheel_dir"/nvidia_nccl_cu13-"$version"-*.whl)
# The device-library bitcode (libnccl_device.*) is for NCCL's own LTO
# builds: not needed to compile or run nccl-dcp.
python3 - "$wheel" "$dir" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as whl:
    whl.extractall(sys.argv[2], [n for n in whl.namelist()
                                 if n.startswith(("nvidia/nccl/include/", "nvidia/nccl/lib/libnccl.so"))])
EOF
got=$(header_version "$home")
if [ "$got" != "$version" ] || [ ! -f "$home/lib/libnccl.so.2" ]; then
  echo "the wheel for $version unpacked no NCCL $version under $home (headers say '${got:-nothing}')" >&2
  exit 1
fi
echo "$home"
