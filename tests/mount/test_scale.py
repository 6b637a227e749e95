"""Huge sparse images.

The issue: mounting a 16 TiB sparse image must stay about as cheap as
mounting a 1 GiB one, because the groups mke2fs left uninitialised are never
read.  How fast is a benchmark's business (tools/bench/rrbench -w W6); the
test checks what makes it possible and can be seen without a clock: the
daemon mounts a 16 TiB image, writes, reads back, unmounts clean and
e2fsck -fn and the kernel agree, with a peak RSS far below one bit per block
(512 MiB for 2^32 blocks: what libext2fs's bit-array bitmaps, allocated
at open by ext2fs_check_desc and ext2fs_read_bitmaps, cost before).
"""

import os
import subprocess

import pytest

from conftest import TMPROOT, device_io, make_image, pattern

pytestmark = pytest.mark.rrfuse_only

MIB = 1 << 20
TIB = 1 << 40

# Generous: the daemon needs ~25 MiB on 16 TiB (mostly the per-group arrays of
# 131072 groups); a block bitmap as a bit array alone is 512 MiB.
RSS_LIMIT_MIB = 256


def sparse_16t_size():
    """Bytes for a '16 TiB' image under TMPROOT, or None (with why) if none fits.

    ext4 caps a file at 16 TiB - 4 KiB (2^32 - 1 blocks of 4 KiB), so there
    the image is one block short, which is still 2^32 - 1 blocks and 131072
    groups.  mke2fs writes ~1.1 GiB (descriptors, journal) into it."""
    probe = os.path.join(TMPROOT, "rrfuse-16t-probe.%d" % os.getpid())
    try:
        for size in (16 * TIB, 16 * TIB - 4096):
            try:
                with open(probe, "wb") as f:
                    f.truncate(size)
                break
            except OSError:
                continue
        else:
            return None, "the file system under %s cannot hold a sparse 16 TiB file" % TMPROOT
    finally:
        if os.path.exists(probe):
            os.unlink(probe)
    st = os.statvfs(TMPROOT)
    if st.f_bavail * st.f_frsize < 3 << 30:
        return None, "needs ~3 GiB free under %s for the 16 TiB image's metadata" % TMPROOT
    return size, None


def vmhwm_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM for %d" % pid)


@pytest.mark.slow
def test_16tib_sparse_image(mount_factory):
    size, why = sparse_16t_size()
    if size is None:
        pytest.skip(why)
    image = make_image(size=str(size))
    m = mount_factory(image=image)
    out = subprocess.run(["dumpe2fs", "-h", image], capture_output=True, text=True).stdout
    assert "Block count:              4294967" in out, out

    st = os.statvfs(m.mnt)
    assert st.f_blocks * st.f_frsize > 15 * TIB, st
    # The mount's commit ("in use" in the superblock) writes what changed:
    # not the 2048 descriptor blocks libext2fs writes whole (the cache knows
    # them by their sums, io/sum.h), nor 8192 groups' bitmaps.
    mounted = device_io(m)["metadata_blocks_written"]
    print("16 TiB image: the mount wrote %d metadata blocks" % mounted)
    assert mounted < 50, mounted

    os.mkdir(m.path("d"))
    data = pattern("16t", 48 * MIB + 12345)
    with open(m.path("d", "f"), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    with open(m.path("d", "f"), "rb") as f:
        assert f.read() == data

    rss = vmhwm_mib(m.proc.pid)
    print("16 TiB image: daemon VmHWM %.1f MiB after mount and a 48 MiB write" % rss)
    assert rss < RSS_LIMIT_MIB, "daemon peak RSS %.0f MiB on a 16 TiB image" % rss
    # A commit writes what changed: the bitmaps of the groups that changed
    # (src/core/bitmaps.c; libext2fs's writer wrote all 8192 initialised groups'),
    # the primary superblock and descriptors, never the backups.
    # The descriptors (2048 blocks here) are written whole by libext2fs and
    # skipped where the device holds them (known by their sums, io/sum.h).
    before = device_io(m)
    with open(m.path("d", "small"), "wb") as f:
        f.write(pattern("small", 4096))
        f.flush()
        os.fsync(f.fileno())
    after = device_io(m)
    writes = after["metadata_writes"] - before["metadata_writes"]
    blocks = after["metadata_blocks_written"] - before["metadata_blocks_written"]
    print("16 TiB image: fsync after a 4 KiB write: %d metadata writes, %d blocks" % (writes, blocks))
    assert writes < 50 and blocks < 50, (writes, blocks)
    # Teardown: unmount (daemon exit 0), e2fsck -fn clean, the kernel sees the same tree.
