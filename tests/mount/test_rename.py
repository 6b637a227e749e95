"""rename(2) and renameat2(2) (RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT)."""

import ctypes
import errno
import os
import subprocess

import pytest

import stat

import conftest
from conftest import getdents, libc, make_image, pattern, run_as, syncfs, wait_for

RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
RENAME_WHITEOUT = 4
AT_FDCWD = -100


def renameat2(old, new, flags):
    c = libc()
    fn = getattr(c, "renameat2", None)
    o, n = os.fsencode(old), os.fsencode(new)
    if fn is not None:
        fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                       ctypes.c_char_p, ctypes.c_uint]
        r = fn(AT_FDCWD, o, AT_FDCWD, n, flags)
    else:
        nr = {"x86_64": 316, "aarch64": 276}[os.uname().machine]
        c.syscall.restype = ctypes.c_long
        r = c.syscall(ctypes.c_long(nr), ctypes.c_int(AT_FDCWD), o,
                      ctypes.c_int(AT_FDCWD), n, ctypes.c_uint(flags))
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), old, None, new)


def put(path, data):
    with open(path, "wb") as f:
        f.write(data)


def get(path):
    with open(path, "rb") as f:
        return f.read()


def errno_of(fn, *args):
    try:
        fn(*args)
    except OSError as e:
        return e.errno
    return 0


def dotdot_ino(d):
    """d_ino of '..' as the filesystem reports it in readdir (the kernel
    answers stat(d/..) from its dentry cache, readdir asks the fs)."""
    for ino, _, _, name in getdents(d):
        if name == "..":
            return ino
    raise AssertionError("no .. entry in %s" % d)


def nlink(p):
    return os.stat(p).st_nlink


# ------------------------------------------------------------ plain rename

def test_rename_within_dir(fs):
    put(fs.path("a"), b"data-a")
    os.setxattr(fs.path("a"), "user.k", b"v")
    st = os.stat(fs.path("a"))
    os.rename(fs.path("a"), fs.path("b"))
    assert not os.path.lexists(fs.path("a"))
    st2 = os.stat(fs.path("b"))
    assert st2.st_ino == st.st_ino and st2.st_nlink == 1
    assert get(fs.path("b")) == b"data-a"
    assert os.getxattr(fs.path("b"), "user.k") == b"v"
    # same name: no-op
    os.rename(fs.path("b"), fs.path("b"))
    assert get(fs.path("b")) == b"data-a"
    # rename to a long name and back
    os.rename(fs.path("b"), fs.path("n" * 255))
    assert errno_of(os.rename, fs.path("n" * 255),
                    fs.path("m" * 256)) == errno.ENAMETOOLONG
    os.rename(fs.path("n" * 255), fs.path("c"))
    # symlinks are renamed, not followed
    os.symlink("c", fs.path("s"))
    os.rename(fs.path("s"), fs.path("s2"))
    assert os.readlink(fs.path("s2")) == "c"
    fs.remount()
    assert sorted(os.listdir(fs.mnt)) == ["c", "lost+found", "s2"]
    assert get(fs.path("s2")) == b"data-a"


def test_rename_across_dirs(fs):
    os.makedirs(fs.path("x", "deep"))
    os.mkdir(fs.path("y"))
    data = pattern("r", 300000)
    put(fs.path("x", "deep", "f"), data)
    ino = os.stat(fs.path("x", "deep", "f")).st_ino
    os.rename(fs.path("x", "deep", "f"), fs.path("y", "g"))
    assert os.listdir(fs.path("x", "deep")) == []
    assert os.listdir(fs.path("y")) == ["g"]
    assert os.stat(fs.path("y", "g")).st_ino == ino
    # file renames do not change directory link counts
    assert nlink(fs.path("x")) == 3 and nlink(fs.path("y")) == 2
    fs.remount()
    assert get(fs.path("y", "g")) == data
    assert not os.path.exists(fs.path("x", "deep", "f"))


def test_rename_over_existing_file(fs):
    # Counted from here: the replaced inodes' FORGETs come when the kernel
    # sends them, syncfs or not, so only the final counts are waited for.
    sv0 = os.statvfs(fs.mnt)
    put(fs.path("src"), b"new content")
    put(fs.path("dst"), pattern("old", 2 << 20))
    os.link(fs.path("dst"), fs.path("dst-link"))
    src_ino = os.stat(fs.path("src")).st_ino
    os.rename(fs.path("src"), fs.path("dst"))
    assert os.stat(fs.path("dst")).st_ino == src_ino
    assert get(fs.path("dst")) == b"new content"
    # the old target inode lives on through its other link
    assert nlink(fs.path("dst-link")) == 1
    assert get(fs.path("dst-link")) == pattern("old", 2 << 20)

    # replaced inode without other links is freed (inode and blocks)
    os.unlink(fs.path("dst-link"))
    syncfs(fs.mnt)
    put(fs.path("victim"), pattern("victim", 4 << 20))
    put(fs.path("winner"), b"w")
    fd = os.open(fs.path("victim"), os.O_RDONLY)
    try:
        os.rename(fs.path("winner"), fs.path("victim"))
        assert os.fstat(fd).st_nlink == 0
        assert os.pread(fd, 10, 0) == pattern("victim", 4 << 20)[:10]
        assert get(fs.path("victim")) == b"w"
    finally:
        os.close(fd)
    # left: "dst" (src's inode) and "victim" (winner's), one block each
    assert wait_for(lambda: os.statvfs(fs.mnt).f_ffree == sv0.f_ffree - 2)
    assert wait_for(lambda: os.statvfs(fs.mnt).f_bfree >= sv0.f_bfree - 4)
    assert sorted(os.listdir(fs.mnt)) == ["dst", "lost+found", "victim"]
    fs.remount()
    assert get(fs.path("victim")) == b"w"


def test_rename_hardlinks_of_same_inode(fs):
    put(fs.path("a"), b"x")
    os.link(fs.path("a"), fs.path("b"))
    # POSIX: both names refer to the same file -> no-op
    os.rename(fs.path("a"), fs.path("b"))
    assert os.path.exists(fs.path("a")) and os.path.exists(fs.path("b"))
    assert nlink(fs.path("a")) == 2


def test_rename_dir_over_empty_dir(fs):
    os.makedirs(fs.path("p", "a", "content"))
    os.mkdir(fs.path("p", "b"))
    assert nlink(fs.path("p")) == 4
    a_ino = os.stat(fs.path("p", "a")).st_ino
    os.rename(fs.path("p", "a"), fs.path("p", "b"))
    assert os.listdir(fs.path("p")) == ["b"]
    assert os.stat(fs.path("p", "b")).st_ino == a_ino
    assert os.listdir(fs.path("p", "b")) == ["content"]
    assert nlink(fs.path("p")) == 3
    assert nlink(fs.path("p", "b")) == 3
    # over an empty dir in another parent
    os.mkdir(fs.path("q"))
    os.mkdir(fs.path("q", "empty"))
    os.rename(fs.path("p", "b"), fs.path("q", "empty"))
    assert nlink(fs.path("p")) == 2 and nlink(fs.path("q")) == 3
    assert dotdot_ino(fs.path("q", "empty")) == os.stat(fs.path("q")).st_ino
    fs.remount()
    assert os.listdir(fs.path("q", "empty")) == ["content"]
    assert nlink(fs.path("p")) == 2 and nlink(fs.path("q")) == 3


def test_rename_errors(fs):
    os.makedirs(fs.path("d1", "child"))
    os.mkdir(fs.path("d2"))
    os.makedirs(fs.path("full", "x"))
    put(fs.path("f"), b"f")
    os.mkdir(fs.path("emptydir"))
    # dir over non-empty dir
    assert errno_of(os.rename, fs.path("d2"), fs.path("full")) in (
        errno.ENOTEMPTY, errno.EEXIST)
    # file over dir
    assert errno_of(os.rename, fs.path("f"), fs.path("emptydir")) == errno.EISDIR
    # dir over file
    assert errno_of(os.rename, fs.path("d2"), fs.path("f")) == errno.ENOTDIR
    # dir into its own subtree
    assert errno_of(os.rename, fs.path("d1"),
                    fs.path("d1", "child", "d1")) == errno.EINVAL
    # missing source / missing target directory
    assert errno_of(os.rename, fs.path("nope"), fs.path("z")) == errno.ENOENT
    assert errno_of(os.rename, fs.path("f"),
                    fs.path("nope", "z")) == errno.ENOENT
    assert errno_of(os.rename, fs.path("f"), fs.path("f", "z")) == errno.ENOTDIR
    # nothing changed
    assert sorted(os.listdir(fs.mnt)) == ["d1", "d2", "emptydir", "f", "full",
                                         "lost+found"]
    assert os.listdir(fs.path("full")) == ["x"]
    assert get(fs.path("f")) == b"f"
    assert nlink(fs.mnt) == 3 + 4


def test_rename_dir_across_parents(fs):
    os.makedirs(fs.path("a", "moving", "sub1"))
    os.mkdir(fs.path("a", "moving", "sub2"))
    put(fs.path("a", "moving", "file"), b"in moving")
    os.mkdir(fs.path("a", "stay"))
    os.makedirs(fs.path("b", "other"))
    assert nlink(fs.path("a")) == 4 and nlink(fs.path("b")) == 3
    ino = os.stat(fs.path("a", "moving")).st_ino
    os.rename(fs.path("a", "moving"), fs.path("b", "moved"))

    def check():
        assert nlink(fs.path("a")) == 3
        assert nlink(fs.path("b")) == 4
        m = fs.path("b", "moved")
        assert os.stat(m).st_ino == ino
        assert nlink(m) == 4
        assert os.stat(os.path.join(m, "..")).st_ino == os.stat(fs.path("b")).st_ino
        assert dotdot_ino(m) == os.stat(fs.path("b")).st_ino
        assert dotdot_ino(os.path.join(m, "sub1")) == ino
        assert get(os.path.join(m, "file")) == b"in moving"
        assert sorted(os.listdir(fs.path("a"))) == ["stay"]

    check()
    fs.remount()
    check()
    # and back up to the root
    os.rename(fs.path("b", "moved"), fs.path("top"))
    assert dotdot_ino(fs.path("top")) == os.stat(fs.mnt).st_ino
    assert nlink(fs.path("b")) == 3
    assert nlink(fs.mnt) == 3 + 3


def test_rename_chain(fs):
    names = ["n%d" % i for i in range(20)]
    for n in names:
        put(fs.path(n), n.encode())
    # rotate: n19 -> tmp, n18 -> n19, ..., tmp -> n0
    os.rename(fs.path(names[-1]), fs.path("tmp"))
    for i in range(len(names) - 1, 0, -1):
        os.rename(fs.path(names[i - 1]), fs.path(names[i]))
    os.rename(fs.path("tmp"), fs.path(names[0]))
    fs.remount()
    for i, n in enumerate(names):
        assert get(fs.path(n)) == names[i - 1].encode()


# ------------------------------------------------------------- renameat2

def test_rename_noreplace(fs):
    put(fs.path("a"), b"a")
    put(fs.path("b"), b"b")
    with pytest.raises(FileExistsError):
        renameat2(fs.path("a"), fs.path("b"), RENAME_NOREPLACE)
    assert get(fs.path("a")) == b"a" and get(fs.path("b")) == b"b"
    os.mkdir(fs.path("d"))
    with pytest.raises(FileExistsError):
        renameat2(fs.path("a"), fs.path("d"), RENAME_NOREPLACE)
    renameat2(fs.path("a"), fs.path("c"), RENAME_NOREPLACE)
    assert not os.path.exists(fs.path("a"))
    assert get(fs.path("c")) == b"a"
    renameat2(fs.path("d"), fs.path("c-dir"), RENAME_NOREPLACE)
    assert os.path.isdir(fs.path("c-dir"))
    fs.remount()
    assert sorted(os.listdir(fs.mnt)) == ["b", "c", "c-dir", "lost+found"]


def test_rename_exchange_files(fs):
    os.mkdir(fs.path("d"))
    put(fs.path("a"), b"content a")
    put(fs.path("d", "b"), pattern("b", 100000))
    ia, ib = os.stat(fs.path("a")).st_ino, os.stat(fs.path("d", "b")).st_ino
    renameat2(fs.path("a"), fs.path("d", "b"), RENAME_EXCHANGE)
    assert os.stat(fs.path("a")).st_ino == ib
    assert os.stat(fs.path("d", "b")).st_ino == ia
    assert get(fs.path("a")) == pattern("b", 100000)
    assert get(fs.path("d", "b")) == b"content a"
    with pytest.raises(FileNotFoundError):
        renameat2(fs.path("a"), fs.path("missing"), RENAME_EXCHANGE)
    with pytest.raises(OSError) as ei:
        renameat2(fs.path("a"), fs.path("x"),
                  RENAME_EXCHANGE | RENAME_NOREPLACE)
    assert ei.value.errno == errno.EINVAL
    fs.remount()
    assert get(fs.path("d", "b")) == b"content a"


def test_rename_exchange_file_and_dir(fs):
    os.makedirs(fs.path("p1", "dir", "inner"))
    put(fs.path("p1", "dir", "f"), b"inside")
    os.mkdir(fs.path("p2"))
    put(fs.path("p2", "file"), b"plain")
    p1_ino, p2_ino = os.stat(fs.path("p1")).st_ino, os.stat(fs.path("p2")).st_ino
    dir_ino = os.stat(fs.path("p1", "dir")).st_ino
    assert nlink(fs.path("p1")) == 3 and nlink(fs.path("p2")) == 2
    renameat2(fs.path("p1", "dir"), fs.path("p2", "file"), RENAME_EXCHANGE)

    def check():
        assert os.path.isfile(fs.path("p1", "dir"))
        assert get(fs.path("p1", "dir")) == b"plain"
        d = fs.path("p2", "file")
        assert os.path.isdir(d)
        assert os.stat(d).st_ino == dir_ino
        assert get(os.path.join(d, "f")) == b"inside"
        assert os.stat(os.path.join(d, "..")).st_ino == p2_ino
        assert dotdot_ino(d) == p2_ino
        assert dotdot_ino(os.path.join(d, "inner")) == dir_ino
        assert nlink(fs.path("p1")) == 2
        assert nlink(fs.path("p2")) == 3
        assert nlink(d) == 3
        assert os.stat(fs.path("p1")).st_ino == p1_ino

    check()
    fs.remount()
    check()


def test_rename_exchange_dirs(fs):
    os.makedirs(fs.path("a", "x", "x1"))
    os.makedirs(fs.path("b", "y"))
    renameat2(fs.path("a", "x"), fs.path("b", "y"), RENAME_EXCHANGE)
    assert os.listdir(fs.path("b", "y")) == ["x1"]
    assert os.listdir(fs.path("a", "x")) == []
    assert dotdot_ino(fs.path("b", "y")) == os.stat(fs.path("b")).st_ino
    assert dotdot_ino(fs.path("a", "x")) == os.stat(fs.path("a")).st_ino
    assert nlink(fs.path("a")) == 3 and nlink(fs.path("b")) == 3
    assert nlink(fs.path("b", "y")) == 3 and nlink(fs.path("a", "x")) == 2
    # exchanging a directory with its own child is refused
    with pytest.raises(OSError) as ei:
        renameat2(fs.path("b"), fs.path("b", "y"), RENAME_EXCHANGE)
    assert ei.value.errno in (errno.EINVAL, errno.ENOTEMPTY)


def _whiteouts(root):
    """The whiteout steps overlayfs takes; what each left, as (mode, rdev, owner) or errno."""
    d = os.path.join(root, "w")
    os.mkdir(d)
    os.chmod(d, 0o777)
    put(os.path.join(d, "a"), b"a")
    put(os.path.join(d, "b"), b"b")
    os.mkdir(os.path.join(d, "sub"))
    out = {}
    renameat2(os.path.join(d, "a"), os.path.join(d, "a2"), RENAME_WHITEOUT)
    renameat2(os.path.join(d, "b"), os.path.join(d, "a2"), RENAME_WHITEOUT)	# over a file
    renameat2(os.path.join(d, "sub"), os.path.join(d, "sub2"), RENAME_WHITEOUT)
    for n in ("a", "b", "sub"):
        st = os.lstat(os.path.join(d, n))
        out[n] = (oct(st.st_mode), st.st_rdev, st.st_uid, st.st_nlink)
    out["a2"] = get(os.path.join(d, "a2"))
    out["exchange"] = errno_of(renameat2, os.path.join(d, "a2"), os.path.join(d, "sub2"),
                               RENAME_WHITEOUT | RENAME_EXCHANGE)
    put(os.path.join(d, "mine"), b"m")
    os.chmod(os.path.join(d, "mine"), 0o666)
    out["user"] = run_as(65534, 65534, lambda: errno_of(renameat2, os.path.join(d, "mine"),
                                                          os.path.join(d, "mine2"), RENAME_WHITEOUT))
    out["names"] = sorted(os.listdir(d))
    return out


@pytest.mark.opts("allow_other")
def test_rename_whiteout_as_the_kernel(fs):
    """RENAME_WHITEOUT (overlayfs) leaves a character device 0:0 of mode 0
    where the source was, over a file or not, for a directory too; refused
    with RENAME_EXCHANGE; allowed to any user (Linux 5.8 on); the same as the
    kernel's ext4 on a loop device."""
    got = _whiteouts(fs.mnt)
    assert got["a"][:2] == (oct(stat.S_IFCHR), 0), got
    assert got["a2"] == b"b" and got["exchange"] == errno.EINVAL, got
    if conftest.loop_works():
        image = make_image(size="32M")
        kmnt = os.path.join(os.path.dirname(image), "kmnt")
        os.mkdir(kmnt)
        subprocess.run(["mount", "-o", "loop", image, kmnt], check=True)
        try:
            want = _whiteouts(kmnt)
        finally:
            subprocess.run(["umount", kmnt], check=True)
        assert got == want
        rc, out = conftest.fsck(image)
        assert rc == 0, out


@pytest.mark.image(size="32M", mkfs_args=["-N", "64"])
def test_rename_whiteout_without_inodes_changes_nothing(fs):
    """No inode left for the whiteout: ENOSPC, and the rename did not happen."""
    put(fs.path("src"), b"s")
    n = 0
    while True:
        try:
            open(fs.path("fill%d" % n), "w").close()
        except OSError as e:
            assert e.errno == errno.ENOSPC
            break
        n += 1
    assert errno_of(renameat2, fs.path("src"), fs.path("dst"), RENAME_WHITEOUT) == errno.ENOSPC
    assert get(fs.path("src")) == b"s" and not os.path.exists(fs.path("dst"))
