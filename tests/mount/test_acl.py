"""POSIX ACL tests through setfacl/getfacl (package acl): access ACLs,
the mask, default ACL inheritance, chmod/mask interaction, persistence."""
import errno
import os
import stat
import subprocess

import pytest

from conftest import run_as

UID_A, GID_A = 1001, 1001
UID_B, GID_B = 1002, 1002

# ACLs are enforced by the kernel only with default_permissions on a FUSE
# mount, and other users need allow_other. Dropped in kernel mode.
pytestmark = pytest.mark.opts("allow_other,default_permissions")


def setfacl(*args):
    p = subprocess.run(["setfacl", *args], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p


def getfacl(path, *opts):
    """Entries of getfacl -cn (no header, numeric ids, no effective-rights
    comments) as a set of strings like 'user:1001:r--'."""
    p = subprocess.run(["getfacl", "-cnE", *opts, path],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return {l.strip() for l in p.stdout.splitlines()
            if l.strip() and not l.startswith("#")}


def try_call(fn, *args, **kw):
    try:
        r = fn(*args, **kw)
        return "ok" if r is None else r
    except OSError as e:
        return e.errno


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def write_file(path, data=b"", mode=0o666):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def mode_of(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_named_user_read(fs):
    p = os.path.join(fs.mnt, "secret")
    write_file(p, b"for A only")
    os.chmod(p, 0o600)
    assert run_as(UID_A, GID_A, lambda: try_call(read_file, p)) == errno.EACCES
    setfacl("-m", "u:%d:r" % UID_A, p)
    acl = getfacl(p)
    assert "user:%d:r--" % UID_A in acl
    assert "mask::r--" in acl
    assert {"user::rw-", "group::---", "other::---"} <= acl
    # the group bits of the mode now show the mask
    assert mode_of(p) == 0o640
    assert "system.posix_acl_access" in os.listxattr(p)
    # the named user can read, but not write
    assert run_as(UID_A, GID_A, lambda: try_call(read_file, p)) == b"for A only"
    assert run_as(UID_A, GID_A,
                  lambda: try_call(os.open, p, os.O_WRONLY)) == errno.EACCES
    # another user cannot read
    assert run_as(UID_B, GID_B, lambda: try_call(read_file, p)) == errno.EACCES


def test_named_group_write(fs):
    p = os.path.join(fs.mnt, "f")
    write_file(p, b"orig")
    os.chmod(p, 0o600)
    setfacl("-m", "g:%d:rw" % GID_B, p)
    assert run_as(UID_B, GID_B,
                  lambda: try_call(write_file, p, b"by B")) == "ok"
    assert read_file(p) == b"by B"
    assert run_as(UID_A, GID_A, lambda: try_call(read_file, p)) == errno.EACCES


def test_mask_limits_named_entries(fs):
    p = os.path.join(fs.mnt, "f")
    write_file(p, b"data")
    os.chmod(p, 0o600)
    setfacl("-m", "u:%d:rw" % UID_A, p)
    assert run_as(UID_A, GID_A, lambda: try_call(read_file, p)) == b"data"
    # mask r--: A keeps read but loses write
    setfacl("-m", "m::r", p)
    assert "mask::r--" in getfacl(p)
    assert "user:%d:rw-" % UID_A in getfacl(p)  # entry itself unchanged
    assert mode_of(p) == 0o640
    assert run_as(UID_A, GID_A, lambda: try_call(read_file, p)) == b"data"
    assert run_as(UID_A, GID_A,
                  lambda: try_call(os.open, p, os.O_WRONLY)) == errno.EACCES
    # mask ---: A loses everything
    setfacl("-m", "m::-", p)
    assert mode_of(p) == 0o600
    assert run_as(UID_A, GID_A, lambda: try_call(read_file, p)) == errno.EACCES


def test_chmod_updates_mask(fs):
    p = os.path.join(fs.mnt, "f")
    write_file(p, b"data")
    os.chmod(p, 0o600)
    setfacl("-m", "u:%d:rwx" % UID_A, p)
    assert "mask::rwx" in getfacl(p)
    os.chmod(p, 0o640)
    acl = getfacl(p)
    assert "mask::r--" in acl
    assert "user:%d:rwx" % UID_A in acl
    assert "group::---" in acl  # the owning group entry is untouched
    assert run_as(UID_A, GID_A,
                  lambda: try_call(os.open, p, os.O_WRONLY)) == errno.EACCES
    assert run_as(UID_A, GID_A, lambda: try_call(read_file, p)) == b"data"
    os.chmod(p, 0o600)
    acl = getfacl(p)
    assert "mask::---" in acl
    assert "user:%d:rwx" % UID_A in acl
    assert run_as(UID_A, GID_A, lambda: try_call(read_file, p)) == errno.EACCES
    # (Not tested: mode 0604, i.e. mask --- with other r--. POSIX denies the
    # named user, but Linux skips the ACL entirely when the group/mask bits
    # are 0 and grants "other" access, so the kernel itself disagrees.)


def test_remove_acl(fs):
    p = os.path.join(fs.mnt, "f")
    write_file(p, b"data")
    os.chmod(p, 0o600)
    setfacl("-m", "u:%d:r" % UID_A, p)
    setfacl("-b", p)
    assert getfacl(p) == {"user::rw-", "group::---", "other::---"}
    assert "system.posix_acl_access" not in os.listxattr(p)
    assert run_as(UID_A, GID_A, lambda: try_call(read_file, p)) == errno.EACCES


def test_minimal_acl_is_just_mode(fs):
    # setting an ACL equivalent to the mode changes the mode and stores
    # no xattr
    p = os.path.join(fs.mnt, "f")
    write_file(p)
    setfacl("--set", "u::rwx,g::r-x,o::--x", p)
    assert mode_of(p) == 0o751
    assert "system.posix_acl_access" not in os.listxattr(p)


def test_default_acl_inherited(fs):
    d = os.path.join(fs.mnt, "d")
    os.mkdir(d, 0o755)
    setfacl("-d", "-m", "u:%d:rw,g::r,o::-,m::rw" % UID_A, d)
    dacl = getfacl(d)
    assert "default:user:%d:rw-" % UID_A in dacl
    assert "default:mask::rw-" in dacl
    assert "system.posix_acl_default" in os.listxattr(d)

    old = os.umask(0o022)
    try:
        f = os.path.join(d, "newfile")
        write_file(f, b"inherited", 0o666)
        sub = os.path.join(d, "newdir")
        os.mkdir(sub, 0o777)
    finally:
        os.umask(old)

    # new file: access ACL from the default ACL, umask ignored
    facl = getfacl(f)
    assert "user:%d:rw-" % UID_A in facl
    assert "mask::rw-" in facl
    assert "group::r--" in facl
    assert "other::---" in facl
    assert not any(e.startswith("default:") for e in facl)  # files get none
    # mode = create mode (0666) masked by the ACL: u=rw, mask=rw, o=-
    assert mode_of(f) == 0o660
    assert run_as(UID_A, GID_A, lambda: try_call(read_file, f)) == b"inherited"
    assert run_as(UID_B, GID_B, lambda: try_call(read_file, f)) == errno.EACCES

    # new subdirectory: both an access ACL and the default ACL
    sacl = getfacl(sub)
    assert "user:%d:rw-" % UID_A in sacl
    assert "default:user:%d:rw-" % UID_A in sacl
    assert "default:mask::rw-" in sacl
    assert "system.posix_acl_default" in os.listxattr(sub)
    # create mode 0777 limited by the default ACL (u::rwx from mkdir's
    # default-acl base entries, mask rw, other none)
    assert mode_of(sub) & 0o077 == 0o060

    # and it propagates one more level
    f2 = os.path.join(sub, "deeper")
    write_file(f2, b"x", 0o644)
    assert "user:%d:rw-" % UID_A in getfacl(f2)
    assert mode_of(f2) == 0o640  # 0644 & (u::rw, mask::rw, o::-)


def test_default_acl_umask_used_without_default(fs):
    # control case: without a default ACL the umask applies
    d = os.path.join(fs.mnt, "plain")
    os.mkdir(d)
    old = os.umask(0o027)
    try:
        f = os.path.join(d, "f")
        write_file(f, b"", 0o666)
    finally:
        os.umask(old)
    assert mode_of(f) == 0o640
    assert getfacl(f) == {"user::rw-", "group::r--", "other::---"}


def test_default_acl_set_after_creates(fs):
    """A create remembers that its directory has no default ACL
    (src/ns/xattr.c); setting one afterwards must reach the next create,
    and removing it the one after."""
    d = os.path.join(fs.mnt, "later")
    os.mkdir(d)
    write_file(os.path.join(d, "before"))
    assert "system.posix_acl_access" not in os.listxattr(os.path.join(d, "before"))
    setfacl("-d", "-m", "u:%d:rw" % UID_A, d)
    f = os.path.join(d, "after")
    write_file(f)
    assert "user:%d:rw-" % UID_A in getfacl(f)
    setfacl("-k", d)
    g = os.path.join(d, "again")
    write_file(g)
    assert "system.posix_acl_access" not in os.listxattr(g)


def test_remove_default_acl(fs):
    d = os.path.join(fs.mnt, "d")
    os.mkdir(d)
    setfacl("-d", "-m", "u:%d:rwx" % UID_A, d)
    setfacl("-k", d)
    assert not any(e.startswith("default:") for e in getfacl(d))
    assert "system.posix_acl_default" not in os.listxattr(d)
    f = os.path.join(d, "f")
    write_file(f)
    assert "system.posix_acl_access" not in os.listxattr(f)


def test_acl_on_directory_access(fs):
    d = os.path.join(fs.mnt, "d")
    os.mkdir(d, 0o700)
    write_file(os.path.join(d, "inside"), b"in")
    os.chmod(os.path.join(d, "inside"), 0o644)
    assert run_as(UID_A, GID_A, lambda: try_call(os.listdir, d)) == errno.EACCES
    setfacl("-m", "u:%d:rx" % UID_A, d)
    assert run_as(UID_A, GID_A, lambda: try_call(os.listdir, d)) == ["inside"]
    assert run_as(UID_A, GID_A,
                  lambda: try_call(read_file, os.path.join(d, "inside"))) == b"in"
    # no w in the ACL: cannot create
    assert run_as(UID_A, GID_A,
                  lambda: try_call(write_file, os.path.join(d, "new"))) == errno.EACCES
    assert run_as(UID_B, GID_B, lambda: try_call(os.listdir, d)) == errno.EACCES


def test_many_acl_entries(fs):
    # enough entries to push the ACL xattr out of the inode
    p = os.path.join(fs.mnt, "f")
    write_file(p, b"many")
    os.chmod(p, 0o600)
    spec = ",".join("u:%d:r" % (2000 + i) for i in range(60))
    setfacl("-m", spec + ",u:%d:r" % UID_A, p)
    acl = getfacl(p)
    assert sum(1 for e in acl if e.startswith("user:2")) == 60
    assert run_as(UID_A, GID_A, lambda: try_call(read_file, p)) == b"many"
    fs.remount()
    acl2 = getfacl(p)
    assert acl2 == acl
    assert run_as(UID_A, GID_A, lambda: try_call(read_file, p)) == b"many"


def test_acls_survive_remount(fs):
    p = os.path.join(fs.mnt, "f")
    d = os.path.join(fs.mnt, "d")
    write_file(p, b"persist")
    os.chmod(p, 0o600)
    os.mkdir(d)
    setfacl("-m", "u:%d:r,g:%d:rw" % (UID_A, GID_B), p)
    setfacl("-d", "-m", "u:%d:rwx,m::rx" % UID_B, d)
    before_f, before_d = getfacl(p), getfacl(d)
    mode_f = mode_of(p)
    fs.remount()
    assert getfacl(p) == before_f
    assert getfacl(d) == before_d
    assert mode_of(p) == mode_f
    assert run_as(UID_A, GID_A, lambda: try_call(read_file, p)) == b"persist"
    assert run_as(UID_B, 3333, lambda: try_call(read_file, p)) == errno.EACCES
    # inheritance still works after remount
    f = os.path.join(d, "child")
    write_file(f, b"", 0o666)
    assert "user:%d:rwx" % UID_B in getfacl(f)
    # mask = default mask (r-x) & create mode's group bits (rw-)
    assert "mask::r--" in getfacl(f)


@pytest.mark.parametrize("acl", ["u:%d:r" % UID_B, "g::rx"])
def test_setfacl_clears_setgid_outside_group(fs, acl):
    # fstests generic/375: an owner outside the file's group who sets an
    # access ACL loses the set-gid bit, as with chmod (named entries, or an
    # ACL the mode alone expresses); root and group members keep it.
    def setfacl_as(uid, path):
        # GID_A only as a supplementary group, so that both ways in count.
        return run_as(uid, 5555, ["setfacl", "-m", acl, path], groups=(GID_A,))

    cases = {"outsider": (UID_A, 4444, False), "member": (UID_A, GID_A, True)}
    for name, (uid, gid, keeps) in cases.items():
        p = os.path.join(fs.mnt, name)
        write_file(p, b"x")
        os.chown(p, uid, gid)
        os.chmod(p, 0o2775)
        r = setfacl_as(uid, p)
        assert r.returncode == 0, r.stderr
        assert bool(os.stat(p).st_mode & stat.S_ISGID) == keeps, (name, oct(os.stat(p).st_mode))
    p = os.path.join(fs.mnt, "by-root")
    write_file(p, b"x")
    os.chown(p, UID_A, 4444)
    os.chmod(p, 0o2775)
    setfacl("-m", acl, p)
    assert os.stat(p).st_mode & stat.S_ISGID
    fs.remount()
    assert not os.stat(os.path.join(fs.mnt, "outsider")).st_mode & stat.S_ISGID
    assert os.stat(os.path.join(fs.mnt, "member")).st_mode & stat.S_ISGID
