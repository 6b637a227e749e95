"""Directories are indexed (htree) once they outgrow their first block, as
ext4 does, and stay valid (e2fsck checks the index) as they grow and shrink."""
import os

import pytest

from conftest import KERNEL, debugfs


def inode_flags(image, path):
    for line in debugfs(image, "stat " + path).splitlines():
        if "Flags:" in line:
            return int(line.split("Flags:")[1].split()[0], 16)
    raise AssertionError("no flags for " + path)


EXT2_INDEX_FL = 0x1000


@pytest.mark.parametrize("count,namelen", [(40, 8), (3000, 40)])
def test_directory_becomes_indexed(fs, count, namelen):
    d = fs.path("d")
    os.mkdir(d)
    names = ["%0*d" % (namelen, i) for i in range(count)]
    for n in names:
        open(os.path.join(d, n), "w").close()
    os.mkdir(fs.path("subdirs"))
    for i in range(300):
        os.mkdir(fs.path("subdirs", "subdir-%04d" % i))
    assert sorted(os.listdir(d)) == names
    for n in names[::7]:
        assert os.stat(os.path.join(d, n)).st_nlink == 1
    fs.unmount()
    small = count * (namelen + 12) < 4096
    flags = inode_flags(fs.image, "/d")
    if small:
        assert not flags & EXT2_INDEX_FL, "a one-block directory stays linear"
    else:
        assert flags & EXT2_INDEX_FL, "directory of %d entries is not indexed" % count
        dump = debugfs(fs.image, "htree /d")
        assert "Number of entries (count)" in dump
    assert inode_flags(fs.image, "/subdirs") & EXT2_INDEX_FL
    fs.mount()
    # Shrink and grow again through the index.
    for n in names[::2]:
        os.unlink(os.path.join(d, n))
    for i in range(count // 2):
        open(os.path.join(d, "again-%d" % i), "w").close()
    left = sorted(os.listdir(d))
    assert left == sorted(names[1::2] + ["again-%d" % i for i in range(count // 2)])


@pytest.mark.skipif(KERNEL, reason="rrfuse-specific: the lookup path of an index rrfuse built")
def test_lookup_in_indexed_directory(fs):
    d = fs.path("big")
    os.mkdir(d)
    for i in range(2000):
        with open(os.path.join(d, "f%05d" % i), "w") as f:
            f.write(str(i))
    for i in range(0, 2000, 37):
        with open(os.path.join(d, "f%05d" % i)) as f:
            assert f.read() == str(i)
    assert not os.path.exists(os.path.join(d, "f99999"))
