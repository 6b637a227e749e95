"""statvfs(2) through the mount, checked against the image geometry and
against dumpe2fs -h after unmount."""
import errno
import os
import subprocess

import pytest

from conftest import pattern, wait_for, syncfs

BS = 4096




def dumpe2fs(image):
    r = subprocess.run(["dumpe2fs", "-h", image], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    assert r.returncode == 0
    out = {}
    for line in r.stdout.splitlines():
        k, sep, v = line.partition(":")
        if sep:
            out[k.strip()] = v.strip()
    return out


def sb_counts(image):
    d = dumpe2fs(image)
    return {
        "block_size": int(d["Block size"]),
        "blocks": int(d["Block count"]),
        "free_blocks": int(d["Free blocks"]),
        "inodes": int(d["Inode count"]),
        "free_inodes": int(d["Free inodes"]),
        "reserved": int(d["Reserved block count"]),
    }


def statvfs_synced(path):
    syncfs(path)
    return os.statvfs(path)


def write_synced(path, data):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def test_statvfs_geometry(fs):
    sv = os.statvfs(fs.mnt)
    sb = sb_counts(fs.image)  # mke2fs values; the mount does not change them
    assert sv.f_bsize == BS
    assert sv.f_frsize == BS
    assert sv.f_namemax == 255
    # 256M image: 65536 blocks. The kernel subtracts metadata overhead
    # (bitmaps, inode tables, journal) from f_blocks ("bsddf"); accept
    # anything between that and the raw count.
    assert sb["blocks"] == 65536
    assert 0.85 * sb["blocks"] <= sv.f_blocks <= sb["blocks"]
    assert 0 < sv.f_bfree <= sv.f_blocks
    assert sv.f_bavail <= sv.f_bfree
    assert sv.f_files == sb["inodes"]
    assert 0 < sv.f_ffree <= sv.f_files
    assert sv.f_favail == sv.f_ffree
    # a fresh filesystem is nearly empty
    assert sv.f_bfree >= 0.9 * sv.f_blocks
    assert sv.f_ffree >= sv.f_files - 16


def test_statvfs_reserved_blocks(fs):
    sv = statvfs_synced(fs.mnt)
    sb = sb_counts(fs.image)
    assert sb["reserved"] > 0  # mke2fs default: 5%
    # f_bavail excludes the root reserve (the kernel additionally keeps back
    # a small internal reserve of at most 4096 clusters)
    assert sv.f_bavail <= sv.f_bfree - sb["reserved"]
    assert sv.f_bavail >= sv.f_bfree - sb["reserved"] - 4096


@pytest.mark.image(size="128M", mkfs_args=["-m", "0", "-N", "5000"])
def test_statvfs_mkfs_args(fs):
    sv = statvfs_synced(fs.mnt)
    sb = sb_counts(fs.image)
    assert sb["blocks"] == 32768
    assert 0.85 * sb["blocks"] <= sv.f_blocks <= sb["blocks"]
    assert sv.f_files == sb["inodes"]
    assert 5000 <= sv.f_files < 6000
    assert sv.f_bavail >= sv.f_bfree - 4096


def test_bfree_tracks_writes_and_unlink(fs):
    sv0 = statvfs_synced(fs.mnt)
    p = os.path.join(fs.mnt, "big")
    write_synced(p, pattern("big", 8 << 20))
    sv1 = statvfs_synced(fs.mnt)
    used = sv0.f_bfree - sv1.f_bfree
    # 2048 data blocks plus a few for metadata (extent tree, dir growth)
    assert 2048 <= used <= 2048 + 32, used
    assert sv0.f_bavail - sv1.f_bavail == used
    assert sv1.f_ffree == sv0.f_ffree - 1
    assert sv1.f_blocks == sv0.f_blocks and sv1.f_files == sv0.f_files
    os.unlink(p)
    # space returns after unlink (FUSE may release the inode asynchronously)
    back = wait_for(lambda: statvfs_synced(fs.mnt).f_bfree == sv0.f_bfree)
    assert back, (sv0.f_bfree, statvfs_synced(fs.mnt).f_bfree)
    assert statvfs_synced(fs.mnt).f_ffree == sv0.f_ffree


def test_sparse_file_uses_no_space(fs):
    sv0 = statvfs_synced(fs.mnt)
    p = os.path.join(fs.mnt, "sparse")
    with open(p, "wb") as f:
        f.truncate(100 << 20)
    sv1 = statvfs_synced(fs.mnt)
    assert sv0.f_bfree - sv1.f_bfree <= 1
    os.unlink(p)


def test_ffree_tracks_inodes(fs):
    sv0 = statvfs_synced(fs.mnt)
    d = os.path.join(fs.mnt, "many")
    os.mkdir(d)
    for i in range(100):
        open(os.path.join(d, "f%03d" % i), "w").close()
    os.symlink("x" * 100, os.path.join(d, "slink"))  # slow symlink: 1 block
    os.mkfifo(os.path.join(d, "fifo"))
    sv1 = statvfs_synced(fs.mnt)
    assert sv0.f_ffree - sv1.f_ffree == 103
    # hard links take no inode
    os.link(os.path.join(d, "f000"), os.path.join(d, "hard"))
    assert statvfs_synced(fs.mnt).f_ffree == sv1.f_ffree
    # the dir needs a few blocks, the slow symlink one
    assert 2 <= sv0.f_bfree - sv1.f_bfree <= 8
    for n in os.listdir(d):
        os.unlink(os.path.join(d, n))
    os.rmdir(d)
    assert wait_for(lambda: statvfs_synced(fs.mnt).f_ffree == sv0.f_ffree)
    assert wait_for(lambda: statvfs_synced(fs.mnt).f_bfree == sv0.f_bfree)


def test_statvfs_matches_dumpe2fs_after_unmount(fs):
    # do some work so the counters are not the mke2fs ones
    d = os.path.join(fs.mnt, "d")
    os.mkdir(d)
    for i in range(20):
        write_synced(os.path.join(d, "f%d" % i), pattern(i, 5000 * (i + 1)))
    for i in range(0, 20, 3):
        os.unlink(os.path.join(d, "f%d" % i))
    write_synced(os.path.join(fs.mnt, "big"), pattern("b", 3 << 20))
    # wait until FUSE's asynchronous releases have settled
    last = None
    for _ in range(50):
        sv = statvfs_synced(fs.mnt)
        cur = (sv.f_bfree, sv.f_ffree)
        if cur == last:
            break
        last = cur
        wait_for(lambda: False, timeout=0.05)
    fs.unmount()
    sb = sb_counts(fs.image)
    assert sv.f_bfree == sb["free_blocks"]
    assert sv.f_ffree == sb["free_inodes"]
    assert sv.f_files == sb["inodes"]
    assert sv.f_bsize == sb["block_size"]
    # and after mounting again statvfs agrees with the superblock
    fs.mount()
    sv2 = os.statvfs(fs.mnt)
    assert (sv2.f_bfree, sv2.f_ffree) == (sv.f_bfree, sv.f_ffree)


def test_statvfs_on_subdir_and_file(fs):
    d = os.path.join(fs.mnt, "sub")
    os.mkdir(d)
    p = os.path.join(d, "f")
    open(p, "w").close()
    a = statvfs_synced(fs.mnt)
    b = os.statvfs(d)
    c = os.statvfs(p)
    for sv in (b, c):
        assert (sv.f_bsize, sv.f_blocks, sv.f_files, sv.f_namemax) == \
            (a.f_bsize, a.f_blocks, a.f_files, a.f_namemax)
        assert sv.f_bfree == a.f_bfree and sv.f_ffree == a.f_ffree
    fd = os.open(p, os.O_RDONLY)
    try:
        assert os.fstatvfs(fd).f_blocks == a.f_blocks
    finally:
        os.close(fd)


def test_name_max_enforced(fs):
    ok = os.path.join(fs.mnt, "n" * 255)
    open(ok, "w").close()
    assert os.path.exists(ok)
    with pytest.raises(OSError) as ei:
        open(os.path.join(fs.mnt, "n" * 256), "w").close()
    assert ei.value.errno == errno.ENAMETOOLONG


@pytest.mark.image(size="32M")
def test_full_filesystem(fs):
    # Fill the disk: ENOSPC once the space is exhausted, statvfs agrees, and
    # deleting gives the space back. The kernel's ext4 reserves space at
    # write() time; a FUSE mount with a writeback cache can only report the
    # error from fsync() or close(), which POSIX allows, so accept any of them.
    sv0 = statvfs_synced(fs.mnt)
    p = os.path.join(fs.mnt, "fill")
    chunk = b"\xab" * (1 << 20)
    written = 0
    errors = []
    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while written < (64 << 20):
            written += os.write(fd, chunk)
            if written % (4 << 20) == 0:
                os.fsync(fd)
        os.fsync(fd)
    except OSError as e:
        errors.append(e.errno)
    try:
        os.close(fd)
    except OSError as e:
        errors.append(e.errno)
    assert errors and errors[0] == errno.ENOSPC, errors
    assert written < (40 << 20)
    try:
        syncfs(fs.mnt)  # may report the failed writeback once more
    except OSError as e:
        assert e.errno == errno.ENOSPC
    sv1 = os.statvfs(fs.mnt)
    # root may use the reserve, so the write stops near f_bfree == 0
    assert sv1.f_bavail == 0 or sv1.f_bfree < 0.1 * sv1.f_blocks
    assert sv1.f_bfree < sv0.f_bfree / 10
    os.unlink(p)
    assert wait_for(lambda: statvfs_synced(fs.mnt).f_bfree >= sv0.f_bfree - 2)
    # and the space is usable again
    write_synced(os.path.join(fs.mnt, "again"), pattern("again", 4 << 20))
