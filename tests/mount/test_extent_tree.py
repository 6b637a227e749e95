"""Extent-tree blocks where the kernel's ext4 puts them.

The kernel takes a new leaf near the data being mapped (ext4_ext_split's
blocks from ext4_ext_new_meta_block, its goal from ext4_ext_find_goal), and
the block a root leaf moves into where the inode's data starts
(ext4_ext_grow_indepth).  libext2fs, left to itself, aims a new leaf just
before the first extent of the leaf it splits: for a file mapped in order,
the file's start, however far the data has gone.  A sparse file whose
second leaf maps data two block groups further on tells the two apart.
"""

import os
import re
import shutil

import pytest

from conftest import debugfs, leaf_extents, loop_works, make_image, run_mounted

pytestmark = pytest.mark.rrfuse_only

BLOCK = 4096
STRIDE = 128            # one block in 128: no two extents merge
WRITES = 400            # more than a leaf holds (340): one split, at block 340 * 128
BLOCKS_PER_GROUP = 32768


def sparse_in_order(mnt):
    """Blocks 0, 128, 256, ... written in order, then one fsync: one
    write-back in ascending order, as both systems map it."""
    fd = os.open(os.path.join(mnt, "sparse"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for i in range(WRITES):
            os.pwrite(fd, b"\x5a" * BLOCK, i * STRIDE * BLOCK)
        os.fsync(fd)
    finally:
        os.close(fd)


def tree_blocks(image):
    """The tree's blocks below the inode, as (logical start, physical block)."""
    out = []
    for line in debugfs(image, "ex /sparse").splitlines()[1:]:
        m = re.match(r"\s*(\d+)/\s*(\d+)\s+\d+/\s*\d+\s+(\d+)\s*-\s*\d+\s+(\d+)\s", line)
        if m and int(m.group(1)) < int(m.group(2)):
            out.append((int(m.group(3)), int(m.group(4))))
    return out


def layout(kernel):
    image = make_image(size="1G")
    try:
        run_mounted(image, sparse_in_order, kernel=kernel)
        return tree_blocks(image), leaf_extents(image, "sparse")
    finally:
        shutil.rmtree(os.path.dirname(image), ignore_errors=True)


def test_new_leaf_goes_near_the_data_it_maps():
    tree, data = layout(False)
    assert len(data) == WRITES, data[:8]
    # Depth 1: the root leaf moved out at the fifth extent, then one split.
    assert len(tree) == 2, tree
    (l0, first_leaf), (l1, second_leaf) = tree
    group = lambda b: b // BLOCKS_PER_GROUP
    # The first leaf where the file's data starts, before its first block.
    assert group(first_leaf) == group(data[0][1]) and first_leaf < data[0][1], (tree, data[0])
    # The second in the group of the data it maps (libext2fs: the first leaf's group).
    mapped = [p for (lb, p, _) in data if lb >= l1]
    assert group(second_leaf) == group(mapped[0]) != group(first_leaf), (tree, mapped[0])
    if loop_works():
        theirs, their_data = layout(True)
        print("tree: rrfuse %s, kernel %s" % (tree, theirs))
        assert their_data == data
        assert [p for (_, p) in tree] == [p for (_, p) in theirs]
        # Where the second leaf begins: libext2fs, splitting a full last
        # leaf, moves its last extent into the new one; the kernel starts
        # the new leaf empty (doc/behaviour.md).
        assert theirs[1][0] - STRIDE <= tree[1][0] <= theirs[1][0], (tree, theirs)
