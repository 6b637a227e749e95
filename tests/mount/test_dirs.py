"""Directories: mkdir/rmdir errors, nlink, readdir completeness and
offsets, big directories."""

import ctypes
import errno
import os
import random
import stat

import pytest

from conftest import getdents, libc

DT_DIR, DT_REG, DT_LNK = 4, 8, 10


def touch(path, data=b""):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    if data:
        os.write(fd, data)
    os.close(fd)


def errno_of(fn, *args):
    try:
        fn(*args)
    except OSError as e:
        return e.errno
    return 0


# ------------------------------------------------------------ mkdir/rmdir

def test_mkdir_rmdir(fs):
    d = fs.path("d")
    os.mkdir(d, 0o750)
    st = os.stat(d)
    assert stat.S_ISDIR(st.st_mode)
    old = os.umask(0)
    os.umask(old)
    assert stat.S_IMODE(st.st_mode) == 0o750 & ~old
    assert st.st_nlink == 2
    assert os.listdir(d) == []
    os.rmdir(d)
    assert not os.path.exists(d)
    assert sorted(os.listdir(fs.mnt)) == ["lost+found"]
    # name can be reused for a file and a dir again
    touch(d)
    os.unlink(d)
    os.mkdir(d)
    assert os.path.isdir(d)


def test_mkdir_rmdir_errors(fs):
    os.mkdir(fs.path("d"))
    touch(fs.path("f"))
    os.symlink("d", fs.path("l"))
    os.symlink("missing", fs.path("dangling"))
    assert errno_of(os.mkdir, fs.path("d")) == errno.EEXIST
    assert errno_of(os.mkdir, fs.path("f")) == errno.EEXIST
    assert errno_of(os.mkdir, fs.path("l")) == errno.EEXIST
    assert errno_of(os.mkdir, fs.path("dangling")) == errno.EEXIST
    assert errno_of(os.mkdir, fs.path("f", "sub")) == errno.ENOTDIR
    assert errno_of(os.mkdir, fs.path("missing", "sub")) == errno.ENOENT
    assert errno_of(os.mkdir, fs.path("n" * 256)) == errno.ENAMETOOLONG
    assert errno_of(os.rmdir, fs.path("f")) == errno.ENOTDIR
    assert errno_of(os.rmdir, fs.path("l")) == errno.ENOTDIR
    assert errno_of(os.rmdir, fs.path("missing")) == errno.ENOENT
    assert errno_of(os.rmdir, fs.path("d", ".")) == errno.EINVAL
    assert errno_of(os.rmdir, fs.path("d", "..")) == errno.ENOTEMPTY
    touch(fs.path("d", "x"))
    assert errno_of(os.rmdir, fs.path("d")) == errno.ENOTEMPTY
    os.unlink(fs.path("d", "x"))
    os.mkdir(fs.path("d", "sub"))
    assert errno_of(os.rmdir, fs.path("d")) == errno.ENOTEMPTY
    os.rmdir(fs.path("d", "sub"))
    os.symlink("x", fs.path("d", "s"))
    assert errno_of(os.rmdir, fs.path("d")) == errno.ENOTEMPTY
    os.unlink(fs.path("d", "s"))
    os.rmdir(fs.path("d"))
    # the failed operations must not have changed anything
    assert sorted(os.listdir(fs.mnt)) == ["dangling", "f", "l", "lost+found"]
    assert os.stat(fs.mnt).st_nlink == 3


def test_rmdir_nonempty_after_many(fs):
    """A directory whose entries were all deleted (htree, several blocks)
    is empty again and can be removed; one survivor makes it non-empty."""
    d = fs.path("d")
    os.mkdir(d)
    for i in range(600):
        touch(os.path.join(d, "entry-with-a-longish-name-%04d" % i))
    for i in range(600):
        if i != 417:
            os.unlink(os.path.join(d, "entry-with-a-longish-name-%04d" % i))
    assert errno_of(os.rmdir, d) == errno.ENOTEMPTY
    assert os.listdir(d) == ["entry-with-a-longish-name-0417"]
    os.unlink(os.path.join(d, "entry-with-a-longish-name-0417"))
    fs.remount()
    assert os.listdir(d) == []
    os.rmdir(d)
    assert not os.path.exists(d)


def test_nlink(fs):
    root_nlink = os.stat(fs.mnt).st_nlink
    assert root_nlink == 3        # ., .. and lost+found/..
    p = fs.path("p")
    os.mkdir(p)
    assert os.stat(fs.mnt).st_nlink == root_nlink + 1
    for i in range(50):
        os.mkdir(os.path.join(p, "sub%d" % i))
        touch(os.path.join(p, "file%d" % i))     # files do not count
    assert os.stat(p).st_nlink == 52
    for i in range(0, 50, 2):
        os.rmdir(os.path.join(p, "sub%d" % i))
    assert os.stat(p).st_nlink == 27
    os.mkdir(os.path.join(p, "sub1", "deeper"))
    assert os.stat(p).st_nlink == 27
    assert os.stat(os.path.join(p, "sub1")).st_nlink == 3
    fs.remount()
    assert os.stat(p).st_nlink == 27
    assert os.stat(os.path.join(p, "sub1")).st_nlink == 3
    assert os.stat(fs.mnt).st_nlink == root_nlink + 1


def test_deep_nesting(fs):
    parts = ["level%03d" % i for i in range(120)]
    path = fs.mnt
    for part in parts:
        path = os.path.join(path, part)
        os.mkdir(path)
    touch(os.path.join(path, "leaf"), b"deep")
    fs.remount()
    with open(os.path.join(path, "leaf"), "rb") as f:
        assert f.read() == b"deep"
    os.unlink(os.path.join(path, "leaf"))
    for i in range(len(parts), 0, -1):
        os.rmdir(os.path.join(fs.mnt, *parts[:i]))
    assert sorted(os.listdir(fs.mnt)) == ["lost+found"]


def test_parent_times_updated(fs):
    d = fs.path("d")
    os.mkdir(d)
    old = 1_000_000_000

    def changed(op):
        os.utime(d, ns=(old * 10**9, old * 10**9))
        before = os.stat(d)
        op()
        after = os.stat(d)
        assert after.st_mtime_ns > before.st_mtime_ns, op
        assert after.st_ctime_ns >= before.st_ctime_ns, op

    changed(lambda: touch(os.path.join(d, "f")))
    changed(lambda: os.mkdir(os.path.join(d, "s")))
    changed(lambda: os.rename(os.path.join(d, "f"), os.path.join(d, "g")))
    changed(lambda: os.symlink("t", os.path.join(d, "l")))
    changed(lambda: os.link(os.path.join(d, "g"), os.path.join(d, "h")))
    changed(lambda: os.unlink(os.path.join(d, "g")))
    changed(lambda: os.rmdir(os.path.join(d, "s")))


# ----------------------------------------------------------------- readdir

def make_entries(d, n, rng):
    names = set()
    kinds = {}
    while len(names) < n:
        ln = rng.choice([1, 2, 5, 8, 13, 40, 100, 255])
        name = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789_-.")
                       for _ in range(ln))
        if name in (".", "..") or name in names:
            continue
        names.add(name)
    for i, name in enumerate(sorted(names)):
        p = os.path.join(d, name)
        if i % 10 == 0:
            os.mkdir(p)
            kinds[name] = DT_DIR
        elif i % 10 == 1:
            os.symlink("target-" + name[:10], p)
            kinds[name] = DT_LNK
        else:
            touch(p)
            kinds[name] = DT_REG
    return kinds


def test_readdir_complete(fs):
    d = fs.path("d")
    os.mkdir(d)
    kinds = make_entries(d, 2500, random.Random(7))

    def check():
        names = os.listdir(d)
        assert len(names) == len(set(names)) == len(kinds)
        assert set(names) == set(kinds)
        seen = {}
        with os.scandir(d) as it:
            for e in it:
                assert e.name not in seen, "duplicate %r" % e.name
                seen[e.name] = e
        assert set(seen) == set(kinds)
        for name, e in seen.items():
            k = kinds[name]
            assert e.is_dir(follow_symlinks=False) == (k == DT_DIR), name
            assert e.is_symlink() == (k == DT_LNK), name
            assert e.is_file(follow_symlinks=False) == (k == DT_REG), name
            assert e.inode() == os.lstat(e.path).st_ino, name
        ents = getdents(d)
        byname = {n: (ino, typ) for ino, off, typ, n in ents}
        assert len(ents) == len(kinds) + 2
        assert byname["."][0] == os.stat(d).st_ino
        assert byname[".."][0] == os.stat(fs.mnt).st_ino
        for name, k in kinds.items():
            assert byname[name][1] in (k, 0), name     # DT_UNKNOWN allowed

    check()
    fs.remount()
    check()


def test_readdir_small_buffers_and_offsets(fs):
    """getdents with tiny buffers, and resuming at every returned d_off
    (what telldir/seekdir do) gives exactly the remaining entries."""
    d = fs.path("d")
    os.mkdir(d)
    kinds = make_entries(d, 700, random.Random(8))
    full = getdents(d)
    names = [n for _, _, _, n in full]
    assert sorted(names) == sorted(list(kinds) + [".", ".."])
    for bufsize in (300, 1024, 4096):
        assert [n for _, _, _, n in getdents(d, bufsize=bufsize)] == names
    rng = random.Random(9)
    positions = sorted(rng.sample(range(len(full) - 1), 25)) + [len(full) - 1]
    for i in positions:
        off = full[i][1]
        rest = [n for _, _, _, n in getdents(d, start=off, bufsize=2048)]
        assert rest == names[i + 1:], "resume after entry %d" % i
    assert getdents(d, start=0)[0][3] == names[0]


def test_telldir_seekdir(fs):
    d = fs.path("d")
    os.mkdir(d)
    for i in range(300):
        touch(os.path.join(d, "f%03d" % i))

    class Dirent(ctypes.Structure):
        _fields_ = [("d_ino", ctypes.c_uint64), ("d_off", ctypes.c_int64),
                    ("d_reclen", ctypes.c_ushort), ("d_type", ctypes.c_ubyte),
                    ("d_name", ctypes.c_char * 256)]

    c = libc()
    c.opendir.restype = ctypes.c_void_p
    c.opendir.argtypes = [ctypes.c_char_p]
    c.readdir.restype = ctypes.POINTER(Dirent)
    c.readdir.argtypes = [ctypes.c_void_p]
    c.telldir.restype = ctypes.c_long
    c.telldir.argtypes = [ctypes.c_void_p]
    c.seekdir.argtypes = [ctypes.c_void_p, ctypes.c_long]
    c.rewinddir.argtypes = [ctypes.c_void_p]
    c.closedir.argtypes = [ctypes.c_void_p]
    dp = c.opendir(os.fsencode(d))
    assert dp

    def read_rest():
        out = []
        while True:
            ent = c.readdir(dp)
            if not ent:
                return out
            out.append(ent.contents.d_name.decode())

    try:
        marks = []
        seq = []
        while True:
            pos = c.telldir(dp)
            ent = c.readdir(dp)
            if not ent:
                break
            marks.append(pos)
            seq.append(ent.contents.d_name.decode())
        assert sorted(seq) == sorted(["f%03d" % i for i in range(300)]
                                     + [".", ".."])
        for i in (0, 1, 2, 57, 150, 151, 298, len(seq) - 1):
            c.seekdir(dp, marks[i])
            assert read_rest() == seq[i:], i
        c.rewinddir(dp)
        assert read_rest() == seq
    finally:
        c.closedir(dp)


def test_delete_while_reading(fs):
    """rm -rf pattern: unlinking every entry as it is returned must not
    make readdir skip or repeat the remaining entries."""
    d = fs.path("d")
    os.mkdir(d)
    n = 3000
    for i in range(n):
        touch(os.path.join(d, "name-%05d" % i))
    seen = []
    with os.scandir(d) as it:
        for e in it:
            seen.append(e.name)
            os.unlink(e.path)
    assert len(seen) == len(set(seen)) == n
    assert os.listdir(d) == []
    os.rmdir(d)


def test_add_while_reading(fs):
    """Entries that existed before opendir and were not touched must be
    returned exactly once even when other entries are added meanwhile."""
    d = fs.path("d")
    os.mkdir(d)
    n = 1500
    for i in range(n):
        touch(os.path.join(d, "old-%05d" % i))
    seen = []
    with os.scandir(d) as it:
        for k, e in enumerate(it):
            seen.append(e.name)
            if k % 3 == 0:
                touch(os.path.join(d, "new-%05d" % k))
    old = [s for s in seen if s.startswith("old-")]
    assert len(old) == len(set(old)) == n
    assert len(seen) == len(set(seen))


# ------------------------------------------------------------- big dir

@pytest.mark.image(size="512M", mkfs_args=["-N", "60000"])
def test_50000_entries(fs):
    d = fs.path("big")
    os.mkdir(d)
    n = 50000
    names = ["f%06d" % i for i in range(n)]
    for name in names:
        os.close(os.open(os.path.join(d, name), os.O_CREAT | os.O_WRONLY,
                         0o644))
    listing = os.listdir(d)
    assert len(listing) == n
    assert set(listing) == set(names)
    with os.scandir(d) as it:
        sc = [e.name for e in it]
    assert len(sc) == n and set(sc) == set(names)
    rng = random.Random(50000)
    inos = set()
    for name in rng.sample(names, 500):
        st = os.stat(os.path.join(d, name))
        assert stat.S_ISREG(st.st_mode) and st.st_size == 0
        inos.add(st.st_ino)
    assert len(inos) == 500
    for name in names[::2]:
        os.unlink(os.path.join(d, name))
    keep = set(names[1::2])
    listing = os.listdir(d)
    assert len(listing) == len(keep) and set(listing) == keep
    with pytest.raises(FileNotFoundError):
        os.stat(os.path.join(d, names[0]))
    fs.remount()
    listing = os.listdir(d)
    assert len(listing) == len(keep) and set(listing) == keep
    for name in rng.sample(sorted(keep), 200):
        assert os.path.isfile(os.path.join(d, name))
