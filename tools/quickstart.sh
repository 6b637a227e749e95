#!/bin/bash
# Install what is missing, build rrfuse, make a default 4 GiB ext4 image and mount it.
#   tools/quickstart.sh [IMAGE [MOUNTPOINT [-o OPTIONS]]]
# Without OPTIONS the project's example: the rralloc policy with 32 MiB
# preallocation windows; "" mounts with none.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/tools/deps.sh"
rr_install_deps

img=${1:-$top/rrfuse.img}
mnt=${2:-$top/mnt}
opts=${3-rralloc,max_prealloc_kb=32768}

cd "$top"
[ -d build ] || meson setup build >/dev/null
meson compile -C build >/dev/null

if [ ! -e "$img" ]; then
	truncate -s 4G "$img"
	mke2fs -q -t ext4 -b 4096 "$img"
	echo "rrfuse: made a 4 GiB ext4 image at $img"
fi
mkdir -p "$mnt"
if mountpoint -q "$mnt"; then
	echo "rrfuse: $mnt is already a mount point"
	exit 1
fi
build/rrfuse "$img" "$mnt" ${opts:+-o "$opts"}
echo "rrfuse: $img is mounted at $mnt${opts:+ with -o $opts}"
echo "rrfuse: what the allocator does:  build/rrctl $mnt -g  (free space by group);"
echo "rrfuse:   build/rrctl $mnt mb_stats=1, then after some writes:  build/rrctl $mnt -s"
echo "rrfuse: unmount with:  build/rrfuse -u $mnt   (returns when the image is complete)"
echo "rrfuse: then check with:  e2fsck -fn $img"
