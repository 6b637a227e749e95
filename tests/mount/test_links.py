"""Hard links and symbolic links."""

import errno
import os
import stat

import pytest

from conftest import pattern, wait_for


def put(path, data):
    with open(path, "wb") as f:
        f.write(data)


def get(path):
    with open(path, "rb") as f:
        return f.read()


def errno_of(fn, *args, **kw):
    try:
        fn(*args, **kw)
    except OSError as e:
        return e.errno
    return 0


# ------------------------------------------------------------- hard links

def test_hardlink_same_dir(fs):
    a, b = fs.path("a"), fs.path("b")
    put(a, b"one")
    ino = os.stat(a).st_ino
    os.link(a, b)
    sa, sb = os.stat(a), os.stat(b)
    assert sa.st_ino == sb.st_ino == ino
    assert sa.st_nlink == sb.st_nlink == 2
    # content is shared both ways
    with open(b, "ab") as f:
        f.write(b"-two")
    assert get(a) == b"one-two"
    put(a, b"three")
    assert get(b) == b"three"
    os.chmod(a, 0o600)
    assert stat.S_IMODE(os.stat(b).st_mode) == 0o600
    fs.remount()
    sa, sb = os.stat(a), os.stat(b)
    assert sa.st_ino == sb.st_ino and sa.st_nlink == 2
    os.unlink(a)
    assert not os.path.exists(a)
    assert os.stat(b).st_nlink == 1
    assert get(b) == b"three"


def test_hardlink_across_dirs(fs):
    os.makedirs(fs.path("x", "y"))
    os.mkdir(fs.path("z"))
    src = fs.path("x", "y", "f")
    data = pattern("hl", 200000)
    put(src, data)
    targets = [fs.path("z", "g"), fs.path("x", "h"), fs.path("top")]
    for t in targets:
        os.link(src, t)
    for p in [src] + targets:
        st = os.stat(p)
        assert st.st_nlink == 4
        assert st.st_ino == os.stat(src).st_ino
        assert get(p) == data
    # directories' link counts are not affected by file hard links
    assert os.stat(fs.path("z")).st_nlink == 2
    fs.remount()
    os.unlink(src)
    os.unlink(targets[0])
    assert os.stat(targets[1]).st_nlink == 2
    assert get(targets[2]) == data
    # the remaining links stay after another remount
    fs.remount()
    assert os.stat(targets[2]).st_nlink == 2
    assert get(targets[1]) == data


def test_many_links(fs):
    src = fs.path("src")
    put(src, b"many")
    os.mkdir(fs.path("links"))
    n = 300
    for i in range(n):
        os.link(src, fs.path("links", "l%d" % i))
    assert os.stat(src).st_nlink == n + 1
    for i in range(0, n, 2):
        os.unlink(fs.path("links", "l%d" % i))
    assert os.stat(src).st_nlink == n // 2 + 1
    fs.remount()
    assert os.stat(fs.path("links", "l1")).st_nlink == n // 2 + 1
    assert get(fs.path("links", "l%d" % (n - 1))) == b"many"


def test_hardlink_errors(fs):
    put(fs.path("f"), b"x")
    os.mkdir(fs.path("d"))
    put(fs.path("exists"), b"y")
    assert errno_of(os.link, fs.path("d"), fs.path("dl")) == errno.EPERM
    assert errno_of(os.link, fs.path("f"), fs.path("exists")) == errno.EEXIST
    assert errno_of(os.link, fs.path("f"), fs.path("d")) == errno.EEXIST
    assert errno_of(os.link, fs.path("missing"), fs.path("n")) == errno.ENOENT
    assert errno_of(os.link, fs.path("f"), fs.path("nodir", "n")) == errno.ENOENT
    assert errno_of(os.link, fs.path("f"), fs.path("f", "n")) == errno.ENOTDIR
    assert os.stat(fs.path("f")).st_nlink == 1
    assert get(fs.path("exists")) == b"y"
    assert sorted(os.listdir(fs.mnt)) == ["d", "exists", "f", "lost+found"]


def test_hardlink_to_symlink(fs):
    os.symlink("target-of-symlink", fs.path("s"))
    os.link(fs.path("s"), fs.path("s2"), follow_symlinks=False)
    a, b = os.lstat(fs.path("s")), os.lstat(fs.path("s2"))
    assert stat.S_ISLNK(b.st_mode)
    assert a.st_ino == b.st_ino and b.st_nlink == 2
    assert os.readlink(fs.path("s2")) == "target-of-symlink"
    os.unlink(fs.path("s"))
    assert os.lstat(fs.path("s2")).st_nlink == 1
    assert os.readlink(fs.path("s2")) == "target-of-symlink"


# ---------------------------------------------------------------- symlinks

SYMLINK_LENGTHS = [1, 2, 30, 58, 59, 60, 61, 100, 500, 1000, 4000, 4095]


def target_of(n):
    # a path-like target of exactly n bytes (non-ASCII included)
    base = "dir/é-ü/" + "abcdefghij/" * (n // 11 + 1)
    t = base.encode()[:n]
    while True:
        try:
            s = t.decode()
            break
        except UnicodeDecodeError:
            t = t[:-1] + b"x"
    assert len(s.encode()) == n
    return s


def test_symlinks_fast_and_slow(fs):
    d = fs.path("links")
    os.mkdir(d)
    for n in SYMLINK_LENGTHS:
        os.symlink(target_of(n), os.path.join(d, "l%d" % n))

    def check():
        for n in SYMLINK_LENGTHS:
            p = os.path.join(d, "l%d" % n)
            assert os.readlink(p) == target_of(n), n
            assert os.readlink(os.fsencode(p)) == target_of(n).encode()
            st = os.lstat(p)
            assert stat.S_ISLNK(st.st_mode), n
            assert st.st_size == n, n
            assert stat.S_IMODE(st.st_mode) == 0o777
            assert st.st_nlink == 1
            assert st.st_uid == os.geteuid()

    check()
    fs.remount()
    check()
    for n in SYMLINK_LENGTHS[::2]:
        os.unlink(os.path.join(d, "l%d" % n))
    fs.remount()
    assert sorted(os.listdir(d)) == sorted("l%d" % n
                                           for n in SYMLINK_LENGTHS[1::2])


def test_symlink_too_long(fs):
    assert errno_of(os.symlink, "a" * 4096, fs.path("l")) == errno.ENAMETOOLONG
    assert not os.path.lexists(fs.path("l"))
    assert errno_of(os.symlink, "", fs.path("l")) == errno.ENOENT


def test_symlink_follow(fs):
    os.makedirs(fs.path("real", "sub"))
    put(fs.path("real", "sub", "f"), b"content")
    os.symlink("real", fs.path("rel"))
    os.symlink(fs.path("real", "sub"), fs.path("abs"))
    os.symlink("../real/sub/f", fs.path("real", "up"))
    os.symlink("rel", fs.path("chain"))
    assert get(fs.path("rel", "sub", "f")) == b"content"
    assert get(fs.path("abs", "f")) == b"content"
    assert get(fs.path("real", "up")) == b"content"
    assert get(fs.path("chain", "sub", "f")) == b"content"
    assert os.path.isdir(fs.path("rel"))
    assert os.stat(fs.path("real", "up")).st_size == 7
    assert os.lstat(fs.path("real", "up")).st_size == len("../real/sub/f")
    assert sorted(os.listdir(fs.path("rel"))) == ["sub", "up"]
    # writing through a symlink writes the target
    with open(fs.path("real", "up"), "ab") as f:
        f.write(b"+")
    assert get(fs.path("real", "sub", "f")) == b"content+"
    # unlinking the symlink leaves the target alone
    os.unlink(fs.path("real", "up"))
    assert get(fs.path("real", "sub", "f")) == b"content+"
    # lchown/lutimes act on the link itself
    os.utime(fs.path("rel"), ns=(10**18, 10**18), follow_symlinks=False)
    assert os.lstat(fs.path("rel")).st_mtime_ns == 10**18
    assert os.stat(fs.path("rel")).st_mtime_ns != 10**18
    os.chown(fs.path("rel"), 1234, 5678, follow_symlinks=False)
    assert os.lstat(fs.path("rel")).st_uid == 1234
    assert os.stat(fs.path("real")).st_uid == os.geteuid()


def test_dangling_and_loops(fs):
    os.symlink("nothing-here", fs.path("dangling"))
    assert os.path.lexists(fs.path("dangling"))
    assert not os.path.exists(fs.path("dangling"))
    assert os.readlink(fs.path("dangling")) == "nothing-here"
    with pytest.raises(FileNotFoundError):
        open(fs.path("dangling"), "rb")
    assert "dangling" in os.listdir(fs.mnt)
    # O_CREAT through a dangling symlink creates the target
    put(fs.path("dangling"), b"now")
    assert get(fs.path("nothing-here")) == b"now"
    assert os.path.exists(fs.path("dangling"))
    os.unlink(fs.path("nothing-here"))
    assert not os.path.exists(fs.path("dangling"))
    # loops
    os.symlink("loop2", fs.path("loop1"))
    os.symlink("loop1", fs.path("loop2"))
    os.symlink("self", fs.path("self"))
    for p in ("loop1", "self"):
        assert errno_of(os.stat, fs.path(p)) == errno.ELOOP
    assert errno_of(os.open, fs.path("self"),
                    os.O_RDONLY | os.O_NOFOLLOW) == errno.ELOOP
    assert errno_of(os.symlink, "x", fs.path("self")) == errno.EEXIST
    assert os.readlink(fs.path("loop1")) == "loop2"
    # readlink on a non-symlink
    put(fs.path("plain"), b"")
    assert errno_of(os.readlink, fs.path("plain")) == errno.EINVAL
    fs.remount()
    assert os.readlink(fs.path("dangling")) == "nothing-here"
    assert not os.path.exists(fs.path("dangling"))


def test_symlink_in_subdirs_and_removal(fs):
    os.mkdir(fs.path("d"))
    for i in range(200):
        os.symlink("t" * (i * 20 + 1), fs.path("d", "s%d" % i))
    fs.remount()
    for i in range(200):
        assert os.readlink(fs.path("d", "s%d" % i)) == "t" * (i * 20 + 1)
    sv0 = os.statvfs(fs.mnt)
    for i in range(200):
        os.unlink(fs.path("d", "s%d" % i))
    os.rmdir(fs.path("d"))
    # FUSE may free the inodes only when FORGET arrives: poll
    assert wait_for(lambda: os.statvfs(fs.mnt).f_ffree == sv0.f_ffree + 201)
