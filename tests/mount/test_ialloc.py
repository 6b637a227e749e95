"""Inode placement (issue 26): rrfuse puts inodes in the groups the kernel's ext4 does.

One tree is made on two copies of one fresh image, one through rrfuse and
one through the kernel's ext4 (loop mount), and the group of every inode
(inode number -> group by inodes per group) must be the same on both:

* directories in the root, and in a directory marked TOPDIR (chattr +T),
  are spread over the flex groups from a start their name's hash decides
  (Orlov, with the image's hash seed: the copies share it);
* deeper directories stay in their parent's flex group;
* files, symlinks and the rest go to their parent's flex group.

Files are empty: when file data reaches the disk (the kernel's delayed
allocation, its per-CPU locality groups) decides the free block counts that
the rules compare, and that is the block allocator's fidelity, not this.
The kernel's whole-filesystem counts are per-CPU counters that lag by up
to a batch (32) per CPU; rrfuse models one CPU's (src/core/ialloc.c), and which
CPU ran each mkdir is the scheduler's.  So the image has 32 flex groups and
few top-level directories: every comparison of a flex group's free inodes
or blocks with the average is decided by more than two CPUs' lag over 32
flex groups, and the kernel repeats itself.  The crowded-parent and fallback
rules are the unit test's (tests/unit/test_ialloc.c).
"""

import os
import re
import shutil
import subprocess

import pytest

from conftest import loop_works, make_image, run_mounted

pytestmark = pytest.mark.rrfuse_only

# 64 groups of 16 MiB, 2 per flex group; the seed fixes the names' hashes.
MKFS = ["-g", "4096", "-G", "2", "-E", "hash_seed=6a0c4d1e-93b2-4f47-8d5e-0f1a2b3c4d5e"]
TOPS = ["usr", "home", "etc", "var", "srv", "opt"]


def plant(mnt):
    """The tree; {path: inode number} of everything in it."""
    def touch(*parts):
        open(os.path.join(mnt, *parts), "w").close()

    def mkdir(*parts):
        os.mkdir(os.path.join(mnt, *parts))

    touch("README")
    for top in TOPS:
        mkdir(top)
        for i in range(4):
            touch(top, "f%d" % i)
        os.symlink("f0", os.path.join(mnt, top, "link"))
        d = [top]
        for sub in ("a", "b", "c"):
            d.append(sub)
            mkdir(*d)
            mkdir(*(d[:-1] + [sub + "x"]))
            touch(*(d + ["g"]))
    mkdir("proj")
    subprocess.run(["chattr", "+T", os.path.join(mnt, "proj")], check=True)
    for p in ("p1", "p2", "p3"):
        mkdir("proj", p)
        touch("proj", p, "h")
        mkdir("proj", p, "q")
    inos = {}
    for root, dirs, files in os.walk(mnt):
        for n in dirs + files:
            p = os.path.join(root, n)
            inos[os.path.relpath(p, mnt)] = os.lstat(p).st_ino
    return inos


def inodes_per_group(image):
    out = subprocess.run(["dumpe2fs", "-h", image], capture_output=True, text=True,
                         check=True).stdout
    return int(re.search(r"^Inodes per group:\s+(\d+)", out, re.M).group(1))


def test_groups_as_kernel():
    if not loop_works():
        pytest.skip("needs loop devices: the kernel's ext4 is the reference")
    image = make_image(size="1G", mkfs_args=MKFS)
    kimage = os.path.join(os.path.dirname(image), "kernel.img")
    try:
        shutil.copyfile(image, kimage)
        ipg = inodes_per_group(image)
        ours = run_mounted(image, plant)
        kernel = run_mounted(kimage, plant, kernel=True)
        assert sorted(ours) == sorted(kernel)
        wrong = ["%s: inode %d group %d, kernel %d group %d"
                 % (p, ours[p], (ours[p] - 1) // ipg, kernel[p], (kernel[p] - 1) // ipg)
                 for p in sorted(ours) if (ours[p] - 1) // ipg != (kernel[p] - 1) // ipg]
        same_ino = sum(ours[p] == kernel[p] for p in ours)
        print("inode groups as the kernel's: %d of %d (same inode number: %d)"
              % (len(ours) - len(wrong), len(ours), same_ino))
        assert not wrong, "\n".join(wrong)
        # Spread at all: the top-level directories are not all in one flex group.
        assert len({(ours[t] - 1) // ipg // 2 for t in TOPS}) > 1
    finally:
        shutil.rmtree(os.path.dirname(image), ignore_errors=True)
