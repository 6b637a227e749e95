"""Extended attribute tests: user., trusted., security. namespaces, flags,
empty/large values, in-inode vs. external xattr block, dirs and symlinks,
persistence across remount."""
import errno
import os

import pytest

from conftest import syncfs, wait_for

ENODATA = errno.ENODATA




def _mkfile(fs, name="f", data=b"hello"):
    p = os.path.join(fs.mnt, name)
    with open(p, "wb") as f:
        f.write(data)
    return p


def _user_names(path, follow=True):
    return sorted(n for n in os.listxattr(path, follow_symlinks=follow)
                  if not n.startswith("system."))


def _sync_blocks(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return os.lstat(path).st_blocks


@pytest.mark.parametrize("ns", ["user", "trusted", "security"])
def test_set_get_list_remove(fs, ns):
    p = _mkfile(fs)
    name = ns + ".test_attr"
    os.setxattr(p, name, b"value1")
    assert os.getxattr(p, name) == b"value1"
    assert name in os.listxattr(p)
    os.setxattr(p, name, b"a longer second value")
    assert os.getxattr(p, name) == b"a longer second value"
    os.setxattr(p, name, b"v")  # shrink
    assert os.getxattr(p, name) == b"v"
    os.removexattr(p, name)
    assert name not in os.listxattr(p)
    with pytest.raises(OSError) as ei:
        os.getxattr(p, name)
    assert ei.value.errno == ENODATA
    with pytest.raises(OSError) as ei:
        os.removexattr(p, name)
    assert ei.value.errno == ENODATA


def test_all_namespaces_together(fs):
    p = _mkfile(fs)
    vals = {"user.a": b"1", "trusted.b": b"22", "security.c": b"333",
            "user.with.dots.in.name": b"x", "trusted.\u00e9t\u00e9": b"utf8 name"}
    for k, v in vals.items():
        os.setxattr(p, k, v)
    assert set(vals) <= set(os.listxattr(p))
    for k, v in vals.items():
        assert os.getxattr(p, k) == v


def test_binary_value(fs):
    p = _mkfile(fs)
    val = bytes(range(256))
    os.setxattr(p, "user.bin", val)
    assert os.getxattr(p, "user.bin") == val
    os.setxattr(p, "user.nul", b"\0\0\0")
    assert os.getxattr(p, "user.nul") == b"\0\0\0"


def test_xattr_create_flag(fs):
    p = _mkfile(fs)
    os.setxattr(p, "user.c", b"first", os.XATTR_CREATE)
    with pytest.raises(FileExistsError):
        os.setxattr(p, "user.c", b"second", os.XATTR_CREATE)
    assert os.getxattr(p, "user.c") == b"first"


def test_xattr_replace_flag(fs):
    p = _mkfile(fs)
    with pytest.raises(OSError) as ei:
        os.setxattr(p, "user.r", b"x", os.XATTR_REPLACE)
    assert ei.value.errno == ENODATA
    assert "user.r" not in os.listxattr(p)
    os.setxattr(p, "user.r", b"x")
    os.setxattr(p, "user.r", b"yy", os.XATTR_REPLACE)
    assert os.getxattr(p, "user.r") == b"yy"


def test_empty_value(fs):
    p = _mkfile(fs)
    os.setxattr(p, "user.empty", b"")
    assert os.getxattr(p, "user.empty") == b""
    assert "user.empty" in os.listxattr(p)
    os.setxattr(p, "trusted.empty", b"")
    assert os.getxattr(p, "trusted.empty") == b""
    # replace empty by non-empty and back
    os.setxattr(p, "user.empty", b"now full", os.XATTR_REPLACE)
    assert os.getxattr(p, "user.empty") == b"now full"
    os.setxattr(p, "user.empty", b"", os.XATTR_REPLACE)
    assert os.getxattr(p, "user.empty") == b""
    fs.remount()
    assert os.getxattr(p, "user.empty") == b""
    assert os.getxattr(p, "trusted.empty") == b""


def test_missing_enodata(fs):
    p = _mkfile(fs)
    for name in ("user.nope", "trusted.nope", "security.nope"):
        with pytest.raises(OSError) as ei:
            os.getxattr(p, name)
        assert ei.value.errno == ENODATA
        with pytest.raises(OSError) as ei:
            os.removexattr(p, name)
        assert ei.value.errno == ENODATA


def test_unknown_namespace_rejected(fs):
    p = _mkfile(fs)
    with pytest.raises(OSError) as ei:
        os.setxattr(p, "bogus.name", b"x")
    assert ei.value.errno in (errno.EOPNOTSUPP, errno.EINVAL)


def test_getxattr_size_query_and_erange(fs):
    import ctypes
    import ctypes.util
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.getxattr.argtypes = [ctypes.c_char_p, ctypes.c_char_p,
                              ctypes.c_void_p, ctypes.c_size_t]
    libc.getxattr.restype = ctypes.c_ssize_t
    p = _mkfile(fs)
    os.setxattr(p, "user.sz", b"0123456789")
    # size 0 returns the value's length
    assert libc.getxattr(p.encode(), b"user.sz", None, 0) == 10
    buf = ctypes.create_string_buffer(4)
    assert libc.getxattr(p.encode(), b"user.sz", buf, 4) == -1
    assert ctypes.get_errno() == errno.ERANGE


def test_many_attrs_overflow_into_block(fs):
    p = _mkfile(fs, data=b"")
    assert _sync_blocks(p) == 0
    vals = {"user.attr%02d" % i: bytes([65 + i]) * 300 for i in range(10)}
    for k, v in vals.items():
        os.setxattr(p, k, v)
    for k, v in vals.items():
        assert os.getxattr(p, k) == v
    assert _user_names(p) == sorted(vals)
    # 3000+ bytes cannot live in a 256-byte inode: an xattr block was
    # allocated and is counted in st_blocks (4096 bytes = 8 sectors)
    assert _sync_blocks(p) == 8
    fs.remount()
    for k, v in vals.items():
        assert os.getxattr(p, k) == v
    assert _user_names(p) == sorted(vals)
    # removing all returns the space
    for k in vals:
        os.removexattr(p, k)
    assert _user_names(p) == []
    assert _sync_blocks(p) == 0


def test_single_large_value(fs):
    p = _mkfile(fs, data=b"")
    val = os.urandom(3000)
    os.setxattr(p, "user.big", val)
    assert os.getxattr(p, "user.big") == val
    assert _sync_blocks(p) == 8
    os.setxattr(p, "user.small", b"s")
    fs.remount()
    assert os.getxattr(p, "user.big") == val
    assert os.getxattr(p, "user.small") == b"s"
    os.removexattr(p, "user.big")
    os.removexattr(p, "user.small")
    assert _sync_blocks(p) == 0
    assert _user_names(p) == []


def test_xattr_space_returned_to_filesystem(fs):
    p = _mkfile(fs, data=b"")
    syncfs(fs.mnt)
    free0 = os.statvfs(fs.mnt).f_bfree
    for i in range(10):
        os.setxattr(p, "user.a%d" % i, b"z" * 300)
    syncfs(fs.mnt)
    assert os.statvfs(fs.mnt).f_bfree == free0 - 1
    for i in range(10):
        os.removexattr(p, "user.a%d" % i)
    syncfs(fs.mnt)
    assert os.statvfs(fs.mnt).f_bfree == free0


def test_value_too_large_for_block(fs):
    # without the ea_inode feature a value must fit in one 4K xattr block
    p = _mkfile(fs)
    with pytest.raises(OSError) as ei:
        os.setxattr(p, "user.huge", b"h" * 8000)
    assert ei.value.errno in (errno.ENOSPC, errno.E2BIG)
    assert "user.huge" not in os.listxattr(p)
    # the file is still fine and can take a normal attribute
    os.setxattr(p, "user.ok", b"ok")
    assert os.getxattr(p, "user.ok") == b"ok"


def test_block_full_enospc_then_recovers(fs):
    p = _mkfile(fs)
    vals = {}
    err = None
    for i in range(40):
        k = "user.fill%02d" % i
        try:
            os.setxattr(p, k, bytes([i]) * 300)
        except OSError as e:
            err = e
            break
        vals[k] = bytes([i]) * 300
    assert err is not None and err.errno in (errno.ENOSPC, errno.E2BIG)
    assert 5 <= len(vals) < 40
    for k, v in vals.items():
        assert os.getxattr(p, k) == v
    # freeing one makes room again
    first = sorted(vals)[0]
    os.removexattr(p, first)
    os.setxattr(p, "user.again", b"a" * 200)
    assert os.getxattr(p, "user.again") == b"a" * 200


def test_value_size_changes_in_place(fs):
    # grow and shrink one attribute across the inode/block boundary
    p = _mkfile(fs, data=b"")
    for n in (1, 50, 200, 1000, 3500, 1000, 60, 0, 2000, 5):
        os.setxattr(p, "user.grow", b"g" * n)
        assert os.getxattr(p, "user.grow") == b"g" * n
    fs.remount()
    assert os.getxattr(p, "user.grow") == b"g" * 5
    os.removexattr(p, "user.grow")
    assert _sync_blocks(p) == 0


def test_xattrs_on_directory(fs):
    d = os.path.join(fs.mnt, "d")
    os.mkdir(d)
    os.setxattr(d, "user.dir", b"dirval")
    os.setxattr(d, "trusted.dir", b"tval")
    os.setxattr(d, "user.dirbig", b"D" * 2500)
    fs.remount()
    assert os.getxattr(d, "user.dir") == b"dirval"
    assert os.getxattr(d, "trusted.dir") == b"tval"
    assert os.getxattr(d, "user.dirbig") == b"D" * 2500
    assert {"user.dir", "trusted.dir", "user.dirbig"} <= set(os.listxattr(d))
    # the directory still works
    open(os.path.join(d, "child"), "w").close()
    assert os.listdir(d) == ["child"]
    os.removexattr(d, "user.dirbig")
    assert "user.dirbig" not in os.listxattr(d)


def test_xattrs_on_symlink(fs):
    t = _mkfile(fs, "target")
    l = os.path.join(fs.mnt, "link")
    os.symlink("target", l)
    # trusted.* on the link itself works for root
    os.setxattr(l, "trusted.onlink", b"L", follow_symlinks=False)
    assert os.getxattr(l, "trusted.onlink", follow_symlinks=False) == b"L"
    assert "trusted.onlink" in os.listxattr(l, follow_symlinks=False)
    # and is not visible on the target
    assert "trusted.onlink" not in os.listxattr(t)
    with pytest.raises(OSError) as ei:
        os.getxattr(l, "trusted.onlink")  # follows to target
    assert ei.value.errno == ENODATA
    # user.* is not allowed on symlinks (VFS rule)
    with pytest.raises(OSError) as ei:
        os.setxattr(l, "user.x", b"1", follow_symlinks=False)
    assert ei.value.errno == errno.EPERM
    # following the link sets it on the target
    os.setxattr(l, "user.viafollow", b"T")
    assert os.getxattr(t, "user.viafollow") == b"T"
    fs.remount()
    assert os.getxattr(l, "trusted.onlink", follow_symlinks=False) == b"L"
    assert os.readlink(l) == "target"
    os.removexattr(l, "trusted.onlink", follow_symlinks=False)
    assert "trusted.onlink" not in os.listxattr(l, follow_symlinks=False)


def test_xattrs_on_long_symlink(fs):
    # a symlink target > 60 bytes lives in a data block, not the inode
    target = "t" * 200
    l = os.path.join(fs.mnt, "longlink")
    os.symlink(target, l)
    os.setxattr(l, "trusted.big", b"B" * 1500, follow_symlinks=False)
    fs.remount()
    assert os.readlink(l) == target
    assert os.getxattr(l, "trusted.big", follow_symlinks=False) == b"B" * 1500


def test_xattrs_on_special_files(fs):
    fifo = os.path.join(fs.mnt, "fifo")
    os.mkfifo(fifo)
    os.setxattr(fifo, "trusted.f", b"fifo")
    assert os.getxattr(fifo, "trusted.f") == b"fifo"
    # user.* only on regular files and directories
    with pytest.raises(OSError) as ei:
        os.setxattr(fifo, "user.f", b"x")
    assert ei.value.errno == errno.EPERM


def test_values_survive_remount(fs):
    p = _mkfile(fs)
    vals = {"user.one": b"1", "user.two": b"2" * 100, "trusted.three": b"3" * 700,
            "security.four": b"4" * 40, "user.empty": b""}
    for k, v in vals.items():
        os.setxattr(p, k, v)
    fs.remount()
    for k, v in vals.items():
        assert os.getxattr(p, k) == v
    assert set(vals) <= set(os.listxattr(p))
    os.removexattr(p, "user.two")
    fs.remount()
    assert "user.two" not in os.listxattr(p)
    assert os.getxattr(p, "trusted.three") == b"3" * 700


def test_xattrs_removed_with_file(fs):
    p = _mkfile(fs, data=b"")
    syncfs(fs.mnt)
    free0 = os.statvfs(fs.mnt).f_bfree
    os.setxattr(p, "user.big", b"b" * 3000)
    os.unlink(p)
    # The inode (and its xattr block) goes when the kernel forgets it, which may come after unlink returns.
    assert wait_for(lambda: os.statvfs(fs.mnt).f_bfree == free0, timeout=5), \
        (os.statvfs(fs.mnt).f_bfree, free0)


def test_hardlinks_share_xattrs(fs):
    p = _mkfile(fs)
    q = os.path.join(fs.mnt, "hard")
    os.link(p, q)
    os.setxattr(p, "user.shared", b"yes")
    assert os.getxattr(q, "user.shared") == b"yes"
    os.removexattr(q, "user.shared")
    assert "user.shared" not in os.listxattr(p)


@pytest.mark.opts("allow_other,default_permissions")
def test_user_xattr_permissions(fs):
    from conftest import run_as

    p = _mkfile(fs)
    os.chmod(p, 0o644)
    os.setxattr(p, "user.r", b"readable")

    def try_call(fn, *a):
        try:
            r = fn(*a)
            return "ok" if r is None else r
        except OSError as e:
            return e.errno

    # readable file: user.* readable; not writable without write permission
    assert run_as(1001, 1001, lambda: try_call(os.getxattr, p, "user.r")) == b"readable"
    assert run_as(1001, 1001,
                  lambda: try_call(os.setxattr, p, "user.w", b"x")) == errno.EACCES
    os.chmod(p, 0o600)
    assert run_as(1001, 1001,
                  lambda: try_call(os.getxattr, p, "user.r")) == errno.EACCES


@pytest.mark.opts("allow_other,default_permissions")
def test_trusted_hidden_from_users(fs):
    from conftest import run_as

    def try_call(fn, *a):
        try:
            r = fn(*a)
            return "ok" if r is None else r
        except OSError as e:
            return e.errno

    p = _mkfile(fs)
    os.chmod(p, 0o666)
    os.setxattr(p, "trusted.t", b"secret")
    os.setxattr(p, "user.u", b"public")
    # ext4 lists trusted.* only to CAP_SYS_ADMIN; the VFS makes reading one
    # look like a missing attribute and denies writing
    names = run_as(1001, 1001, lambda: try_call(os.listxattr, p))
    assert "user.u" in names
    assert "trusted.t" not in names
    assert run_as(1001, 1001,
                  lambda: try_call(os.getxattr, p, "trusted.t")) == ENODATA
    assert run_as(1001, 1001,
                  lambda: try_call(os.setxattr, p, "trusted.u", b"x")) == errno.EPERM


@pytest.mark.image(mkfs_args=["-O", "ea_inode"])
def test_ea_inode_large_value(fs):
    # with ea_inode, values larger than a block are stored in their own inode
    p = _mkfile(fs, data=b"")
    val = os.urandom(20000)
    os.setxattr(p, "user.huge", val)
    assert os.getxattr(p, "user.huge") == val
    fs.remount()
    assert os.getxattr(p, "user.huge") == val
    os.removexattr(p, "user.huge")
    with pytest.raises(OSError) as ei:
        os.getxattr(p, "user.huge")
    assert ei.value.errno == ENODATA
