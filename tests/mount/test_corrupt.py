"""Corrupt structures met while mounted: each gives EIO (or EUCLEAN) for the
file it belongs to, is logged, and the daemon goes on serving the rest.

The image is populated through rrfuse, unmounted, damaged with debugfs in
known ways, and mounted again.  Afterwards e2fsck must report the damage
that was planted and nothing more: rrfuse made nothing worse."""
import errno
import os
import re

import pytest

import conftest
from conftest import (Mount, debugfs, fsck, make_image, pattern,
                      require_mount_backend)

pytestmark = pytest.mark.rrfuse_only

BAD = (errno.EIO, errno.EUCLEAN)
BS = 4096
INODE_GENERATION = 0x64


def make_fragmented(path, blocks):
    """Every other block written: one extent each, a tree of depth 1."""
    with open(path, "wb") as f:
        for i in range(0, blocks, 2):
            f.seek(i * BS)
            f.write(pattern(i, BS))


def extent_leaf(image, path):
    """The block of the first leaf of a depth-1 extent tree."""
    for line in debugfs(image, "ex " + path).splitlines():
        t = line.split()
        if len(t) >= 8 and t[0] == "0/" and t[1] == "1":
            return int(t[7])
    raise AssertionError("no index level in the extent tree of " + path)


def inode_location(image, path):
    out = debugfs(image, "imap " + path)
    m = re.search(r"located at block (\d+), offset (0x[0-9a-f]+)", out)
    assert m, out
    return int(m.group(1)), int(m.group(2), 16)


def problems(fsck_output):
    """e2fsck's findings, without the banner and the usage summary."""
    return [l for l in fsck_output.splitlines()
            if l.strip() and not l.startswith("e2fsck ") and "files (" not in l]


def expect_bad(fn, *args):
    with pytest.raises(OSError) as e:
        fn(*args)
    assert e.value.errno in BAD, e.value


@pytest.fixture
def image():
    """A 64 MiB image of its own; the fs fixture would fsck a damaged one."""
    require_mount_backend()
    path = make_image(size="64M")
    yield path
    if not conftest.KEEP:
        conftest._rm_workdir(os.path.dirname(path))


def test_corrupt_structures_give_eio(image):
    m = Mount(image)
    m.mount()
    try:
        good = pattern(7, 300000)
        with open(m.path("good"), "wb") as f:
            f.write(good)
        for name in ("frag_magic", "frag_key"):
            make_fragmented(m.path(name), 40)
        with open(m.path("csum"), "w") as f:
            f.write("inode checksum\n")
        for d in ("dcsum", "d"):
            os.mkdir(m.path(d))
            with open(m.path(d, "f"), "w") as f:
                f.write(d)
    finally:
        m.unmount()
    rc, out = fsck(image)
    assert rc == 0, out

    # A leaf whose header is destroyed; an index whose key is not its leaf's.
    leaf = extent_leaf(image, "/frag_magic")
    # An inode, and a directory block, whose checksums no longer match.
    iblk, ioff = inode_location(image, "/csum")
    dblk = int(debugfs(image, "bmap /dcsum 0").split()[-1])
    debugfs(image,
            "zap_block -o 0 -l 2 -p 0 %d" % leaf,
            "sif /frag_key block[3] 7",
            "zap_block -o %d -l 4 -p 0x55 %d" % (ioff + INODE_GENERATION, iblk),
            "zap_block -o 8 -l 1 -p 0x41 %d" % dblk,
            # Entries naming the journal inode and a free inode.
            "ln <8> /d/reserved",
            "ln <200> /d/ghost",
            write=True)
    rc, planted = fsck(image)
    assert rc == 4, planted
    planted = problems(planted)

    m = Mount(image)
    m.mount()
    try:
        with open(m.path("frag_magic"), "rb") as f:
            expect_bad(f.read)
        with open(m.path("frag_key"), "r+b") as f:
            expect_bad(f.read)
            f.seek(BS)              # a hole: the write would go into the bad tree
            expect_bad(lambda: (f.write(b"x" * BS), f.flush(), os.fsync(f.fileno())))
        expect_bad(os.stat, m.path("csum"))
        expect_bad(os.listdir, m.path("dcsum"))
        assert sorted(os.listdir(m.path("d"))) == ["f", "ghost", "reserved"]
        expect_bad(os.stat, m.path("d", "reserved"))
        expect_bad(os.stat, m.path("d", "ghost"))
        for e in os.scandir(m.path("d")):
            if e.name != "f":
                expect_bad(e.stat)

        # The rest of the filesystem is served as before, writes included.
        with open(m.path("good"), "rb") as f:
            assert f.read() == good
        with open(m.path("d", "f")) as f:
            assert f.read() == "d"
        with open(m.path("new"), "wb") as f:
            f.write(good)
            os.fsync(f.fileno())
        assert m.daemon_alive()
        log = m.daemon_log
        assert "inode 8: reserved or out of range" in log, log
        assert "deleted inode 200" in log, log
        m.unmount()     # and the daemon exits with status 0
    finally:
        m.cleanup()

    rc, after = fsck(image)
    assert problems(after) == planted, "\n".join(problems(after))


def test_inline_data_flag_gives_eio(image):
    """The inline-data flag on an extent file of an image without inline_data:
    libext2fs would call its blocks invalid; the file must be EIO instead of
    looking empty (a write would then graft a second map onto its tree)."""
    m = Mount(image)
    m.mount()
    try:
        make_fragmented(m.path("inline"), 40)
    finally:
        m.unmount()
    debugfs(image, "sif /inline flags 0x10080000", write=True)
    rc, planted = fsck(image)
    assert rc == 4, planted
    m = Mount(image)
    m.mount()
    try:
        with open(m.path("inline"), "r+b") as f:
            expect_bad(f.read)
            f.seek(BS)
            expect_bad(lambda: (f.write(b"y" * BS), f.flush(), os.fsync(f.fileno())))
        m.unmount()
    finally:
        m.cleanup()
    rc, after = fsck(image)
    assert problems(after) == problems(planted), "\n".join(problems(after))
