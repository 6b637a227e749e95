"""statx's birth time: rrfuse answers FUSE_STATX (protocol 7.39) in its
channel, as libfuse 3.14 cannot, with i_crtime; the kernel's ext4 shows the
same birth time for the same inode.  Inodes of 128 bytes have none."""

import os
import subprocess
import time

import pytest

from conftest import loop_works


def birth(path):
    """stat(1)'s %w (coreutils asks statx for STATX_BTIME): '-' when unknown."""
    return subprocess.run(["stat", "-c", "%w", path], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_birth_time_is_the_inodes_and_the_kernels(fs):
    t0 = time.time()
    p = fs.path("f")
    with open(p, "w") as f:
        f.write("x")
    os.mkdir(fs.path("d"))
    born = {n: birth(fs.path(n)) for n in ("f", "d")}
    assert all(b != "-" for b in born.values()), born
    with open(p, "a") as f:
        f.write("more")		# mtime and ctime move; birth does not
    os.utime(p, (1, 1))
    assert birth(p) == born["f"]
    secs = subprocess.run(["stat", "-c", "%W", p], capture_output=True, text=True).stdout
    assert abs(int(secs) - t0) < 60, (secs, t0)
    fs.unmount()
    if loop_works():
        kmnt = os.path.join(os.path.dirname(fs.image), "kmnt")
        os.makedirs(kmnt, exist_ok=True)
        subprocess.run(["mount", "-o", "loop,ro", fs.image, kmnt], check=True)
        try:
            assert {n: birth(os.path.join(kmnt, n)) for n in born} == born
        finally:
            subprocess.run(["umount", kmnt], check=True)
    fs.mount()


@pytest.mark.image(size="64M", mkfs_args=["-I", "128"])
def test_no_birth_time_in_small_inodes(fs):
    p = fs.path("f")
    open(p, "w").close()
    assert birth(p) == "-"
    os.utime(p, (1000, 2000))
    st = os.stat(p)
    assert (st.st_atime, st.st_mtime) == (1000, 2000)
