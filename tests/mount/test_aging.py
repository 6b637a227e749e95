"""Aging: free space after random creates and deletes, rrfuse against the kernel.

The issue: "an aging workload (random creates and deletes to 80 % full)
leaves free space no more fragmented than the kernel's (e2freefrag)".

The workload is a plan drawn from a seeded generator before anything is
mounted, so rrfuse and the kernel's ext4 (loop mount) run exactly the same
operations on the same fresh 512 MiB image: creates of files of 4 KiB ..
8 MiB (log-uniform, so small files are many and big ones hold most of the
data), deletes of a random live file, and appends of 4 KiB .. 1 MiB to a
random live file, until the files hold 80 % of the image less what mke2fs
used.  Then unmount, e2fsck -fn, and e2freefrag on both images.

When data reaches the disk decides what the kernel's allocator sees, so
the data must reach it during the workload (a run that leaves it all in the
page cache until unmount ages nothing on the kernel's side: deleted files
were never allocated, the survivors are laid out at once, in order):

* fsync: every file is fsynced before its close.  Both allocate while the
  file is open, request by request, with preallocation windows: this
  compares the two allocators.
* syncfs: a syncfs every SYNC_EVERY operations, like periodic writeback.
  The kernel then mostly allocates files that are closed, and for a closed
  file written to its end ext4 asks for exactly its size with no
  preallocation (ext4_mb_group_or_file), which can fill any hole that holds
  it.  rrfuse does the same since it delays allocation (src/data/data.c): the
  pages the kernel writes back wait in the daemon until the last writer's
  release.

Asserted: rrfuse's free extents <= FREE_EXTENTS_RATIO x the kernel's +
FREE_EXTENTS_SLACK.  The margin is about the kernel's own spread between
repeats of one seed in the fsync mode (241 .. 247 free extents for seed 1,
some 3 %), so 1.1x plus a few extents: losing the locality group went
past it (mb_group_prealloc=0, measured before the first-window change:
297/324 against 243/269).  The syncfs mode spreads more (seed 1: 93 .. 114).

Observed, free extents for seeds 1-6, kernel / rrfuse (2026-12-03, with
delayed allocation):
  fsync   241/129 269/148 276/178 293/171 311/161 239/150
  syncfs  106/90  136/117 154/130 157/135 151/134 136/116
Allocating at write time instead (before delayed allocation, or -o
nodelalloc) the syncfs mode was 1.4-1.7x the kernel's (103/176 143/211
154/233 154/223 158/232 137/195), and before a file's first window tried
its goal group first about 2x.
"""

import os
import random
import re
import subprocess

import pytest

from conftest import image_blocks, loop_works, make_image, run_mounted, syncfs

pytestmark = pytest.mark.rrfuse_only

KIB = 1024
MIB = 1 << 20
IMAGE = "512M"
FULL = 0.80
SYNC_EVERY = 16

FREE_EXTENTS_RATIO = 1.1
FREE_EXTENTS_SLACK = 5


def blocks_of(n, bsize):
    return (n + bsize - 1) // bsize


def make_plan(seed, total, free, bsize):
    """[(op, name, size)] until live data reaches FULL of the image (minus mke2fs's share)."""
    rnd = random.Random(seed)
    target = int(FULL * total) - (total - free)
    live = {}               # name -> size in bytes
    used = 0                # data blocks of the live files
    plan = []
    n = 0
    while used < target:
        r = rnd.random()
        if r < 0.25 and len(live) > 4:
            name = rnd.choice(sorted(live))
            used -= blocks_of(live.pop(name), bsize)
            plan.append(("delete", name, 0))
        elif r < 0.35 and live:
            name = rnd.choice(sorted(live))
            add = int(4 * KIB * 256 ** rnd.random())           # 4 KiB .. 1 MiB
            used += blocks_of(live[name] + add, bsize) - blocks_of(live[name], bsize)
            live[name] += add
            plan.append(("append", name, add))
        else:
            size = int(4 * KIB * 2048 ** rnd.random())         # 4 KiB .. 8 MiB
            name = "d%d/f%05d" % (n % 8, n)
            n += 1
            live[name] = size
            used += blocks_of(size, bsize)
            plan.append(("create", name, size))
    return plan


CHUNK = b"\x5a" * MIB


def write_bytes(fd, size):
    while size > 0:
        size -= os.write(fd, CHUNK[:min(size, MIB)])


def run_plan(mnt, plan, sync):
    """sync: "fsync" each file before its close, or "syncfs" every SYNC_EVERY operations."""
    for d in range(8):
        os.mkdir(os.path.join(mnt, "d%d" % d))
    for i, (op, name, size) in enumerate(plan):
        path = os.path.join(mnt, name)
        if sync == "syncfs" and i % SYNC_EVERY == 0:
            syncfs(mnt)
        if op == "delete":
            os.unlink(path)
            continue
        flags = os.O_WRONLY | (os.O_CREAT | os.O_EXCL if op == "create" else os.O_APPEND)
        fd = os.open(path, flags, 0o644)
        try:
            write_bytes(fd, size)
            if sync == "fsync":
                os.fsync(fd)
        finally:
            os.close(fd)


def freefrag(image):
    """(free extents, free blocks, % of free blocks in extents >= 1 MiB, raw output)."""
    out = subprocess.run(["e2freefrag", image], capture_output=True, text=True,
                         check=True).stdout
    nfree = int(re.search(r"^Num\. free extent:\s+(\d+)", out, re.M).group(1))
    fblocks = int(re.search(r"^Free blocks:\s+(\d+)", out, re.M).group(1))
    big = 0
    for lo, unit, count, blocks in re.findall(
            r"^\s*(\d+)([KMGT])\.\.\.\s*\d+[KMGT]-\s*:\s*(\d+)\s+(\d+)", out, re.M):
        kib = int(lo) * 1024 ** "KMGT".index(unit)
        if kib >= 1024:
            big += int(blocks)
    return nfree, fblocks, 100.0 * big / fblocks if fblocks else 0.0, out


def aged(seed, kernel, sync):
    image = make_image(size=IMAGE)
    total, free, bsize = image_blocks(image)
    plan = make_plan(seed, total, free, bsize)

    def workload(mnt):
        run_plan(mnt, plan, sync)
        return os.statvfs(mnt)

    st = run_mounted(image, workload, kernel=kernel)
    res = freefrag(image)
    subprocess.run(["rm", "-rf", os.path.dirname(image)])
    full = 100.0 * (st.f_blocks - st.f_bfree) / st.f_blocks
    return res, full, len(plan)


def compare(seed, sync):
    if not loop_works():
        pytest.skip("needs root and loop devices to age the kernel's ext4 the same way")
    (k_n, k_free, k_big, k_out), k_full, k_ops = aged(seed, True, sync)
    (r_n, r_free, r_big, r_out), r_full, r_ops = aged(seed, False, sync)
    assert k_ops == r_ops
    print("%s seed %d, %d ops: kernel %.1f %% full, %d free extents, %.1f %% of %d free blocks "
          "in extents >= 1 MiB; rrfuse %.1f %% full, %d free extents, %.1f %% of %d"
          % (sync, seed, k_ops, k_full, k_n, k_big, k_free, r_full, r_n, r_big, r_free))
    assert r_n <= FREE_EXTENTS_RATIO * k_n + FREE_EXTENTS_SLACK, (
        "rrfuse leaves %d free extents, the kernel %d\n--- kernel\n%s--- rrfuse\n%s"
        % (r_n, k_n, k_out, r_out))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_aging_fsync_no_more_fragmented_than_kernel(seed):
    compare(seed, "fsync")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_aging_periodic_sync_no_more_fragmented_than_kernel(seed):
    compare(seed, "syncfs")
