"""Set-user-ID, set-group-ID and file capabilities dropped on modification,
as the kernel's ext4 drops them, now that rrfuse asks for
FUSE_HANDLE_KILLPRIV_V2 (src/fuse/channel.c) and drops the set-id bits itself.

The rule (the VFS's setattr_should_drop_suidgid): a write, truncate or
fallocate by a caller without CAP_FSETID drops set-user-ID, and set-group-ID
when the file is group-executable or the caller is not in the file's group;
root keeps both.  chown() drops set-user-ID always and set-group-ID when the
file is group-executable.  Run with RRFUSE_TEST_KERNEL=1, every expectation
here holds on the kernel's ext4 too.
"""

import errno
import os
import re
import stat
import struct
import subprocess
import time

import pytest

from conftest import KERNEL, RRCTL, fsck, loop_works, make_image, run_as

USER = 65534		# in neither group 0 nor the files' groups
MULTIUSER = pytest.mark.opts("allow_other,default_permissions")

# mode before -> mode after a modification by USER (fstests generic/683-685's table)
BY_USER = [(0o6666, 0o0666), (0o6676, 0o0676), (0o6766, 0o0766), (0o6777, 0o0777),
           (0o2676, 0o0676), (0o2777, 0o0777), (0o4666, 0o0666), (0o0666, 0o0666)]


def _write(p):
    fd = os.open(p, os.O_WRONLY)
    try:
        os.pwrite(fd, b"y" * 100, 4096)
    finally:
        os.close(fd)


def _write_direct(p):
    import mmap
    buf = mmap.mmap(-1, 4096)
    buf.write(b"d" * 4096)
    fd = os.open(p, os.O_WRONLY | os.O_DIRECT)
    try:
        os.pwritev(fd, [buf], 8192)
    finally:
        os.close(fd)


def _truncate(p):
    os.truncate(p, 10)


def _fallocate(p):
    fd = os.open(p, os.O_WRONLY)
    try:
        os.posix_fallocate(fd, 0, 65536)
    finally:
        os.close(fd)


OPS = {"write": _write, "direct_write": _write_direct, "truncate": _truncate,
       "fallocate": _fallocate}


def _mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)


def _fresh(fs, name, mode):
    p = os.path.join(fs.mnt, name)
    with open(p, "wb") as f:
        f.write(b"x" * 8192)
    os.chmod(p, mode)
    assert _mode(p) == mode
    return p


@MULTIUSER
@pytest.mark.parametrize("op", sorted(OPS))
def test_modification_by_user_drops_setid(fs, op):
    for i, (before, after) in enumerate(BY_USER):
        p = _fresh(fs, "%s%d" % (op, i), before)
        run_as(USER, USER, lambda: OPS[op](p))
        assert _mode(p) == after, (op, oct(before), oct(_mode(p)), oct(after))


@MULTIUSER
@pytest.mark.parametrize("op", sorted(OPS))
def test_modification_by_root_keeps_setid(fs, op):
    for i, (before, _) in enumerate(BY_USER):
        p = _fresh(fs, "%s%d" % (op, i), before)
        OPS[op](p)
        assert _mode(p) == before, (op, oct(before), oct(_mode(p)))


@MULTIUSER
def test_user_in_the_group_keeps_setgid_of_non_group_executable(fs):
    """Set-group-ID without group execute is kept for a caller in the file's group."""
    p = _fresh(fs, "f", 0o6666)
    os.chown(p, 0, 4321)
    os.chmod(p, 0o6666)
    run_as(USER, 4321, lambda: _write(p))
    assert _mode(p) == 0o2666
    q = _fresh(fs, "g", 0o6676)
    os.chown(q, 0, 4321)
    os.chmod(q, 0o6676)
    run_as(USER, 4321, lambda: _truncate(q))
    assert _mode(q) == 0o0676


def test_chown_by_root(fs):
    for i, (before, after) in enumerate([(0o6777, 0o0777), (0o6766, 0o2766), (0o4755, 0o0755),
                                         (0o2755, 0o0755), (0o2745, 0o2745)]):
        p = _fresh(fs, "c%d" % i, before)
        os.chown(p, 1500, 1500)
        assert _mode(p) == after, (oct(before), oct(_mode(p)), oct(after))


def test_setid_drop_persists(fs):
    """The dropped bits are on the image, not only in the kernel's cache."""
    p = _fresh(fs, "f", 0o6777)
    os.chown(p, 1500, 1500)
    os.chmod(p, 0o6777)
    fs.remount()
    assert _mode(p) == 0o6777
    os.truncate(p, 1)
    assert _mode(p) == 0o6777	# root keeps them
    fs.remount()
    assert _mode(p) == 0o6777


# A version 2 security.capability value: CAP_NET_RAW permitted and effective.
CAPS = bytes([0x01, 0x00, 0x00, 0x02, 0x00, 0x20, 0x00, 0x00] + [0] * 12)


def test_write_drops_file_capabilities(fs):
    """Also after an earlier write, which lets the kernel stop asking (S_NOSEC)."""
    p = _fresh(fs, "f", 0o755)
    _write(p)			# the kernel now knows there is nothing to drop
    os.setxattr(p, "security.capability", CAPS)
    assert os.getxattr(p, "security.capability") == CAPS
    _write(p)
    assert "security.capability" not in os.listxattr(p)
    os.setxattr(p, "security.capability", CAPS)
    os.truncate(p, 5)
    assert "security.capability" not in os.listxattr(p)


def _requests(m):
    out = subprocess.run([RRCTL, m.mnt, "-s"], capture_output=True, text=True, check=True).stdout
    line = [l for l in out.splitlines() if l.startswith("requests:")]
    assert line, out
    return {k: int(v) for k, v in re.findall(r"([a-z_]+) (\d+)", line[0])}


@pytest.mark.skipif(KERNEL, reason="counts rrfuse's FUSE requests")
def test_small_writes_ask_for_capabilities_once(fs):
    """Without KILLPRIV_V2 every write() costs a GETXATTR of security.capability."""
    p = os.path.join(fs.mnt, "f")
    before = _requests(fs)
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
    try:
        for i in range(2000):
            os.pwrite(fd, b"z" * 4096, (i * 7919 % 2048) * 4096)
    finally:
        os.close(fd)
    after = _requests(fs)
    assert after.get("getxattr", 0) - before.get("getxattr", 0) <= 1, (before, after)


# ------------------------------------------------------------------
# The set-id matrix, side by side with the kernel's ext4: every
# modification of a set-id file by a user without CAP_FSETID, each under a
# deadline that aborts the connection and fails rather than hangs.  With the
# writeback cache the kernel sends such a write as a write-through WRITE and
# holds the range's pages locked until the reply (fuse_perform_write):
# rrfuse once asked it to drop those pages from inside the request and hung
# the whole mount (issue 25).

OWNER = 1500			# owns the files; in their group 1500
ACL_USER = 65533		# may write by a named-user ACL entry
DEADLINE = 10.0


def _acl_rw_for(uid, mode):
    """system.posix_acl_access: the mode's classes plus user:uid:rw-, mask = group bits."""
    def entry(tag, perm, ident=0xFFFFFFFF):
        return struct.pack("<HHI", tag, perm, ident)
    return (struct.pack("<I", 2) + entry(0x01, (mode >> 6) & 7) + entry(0x02, 6, uid)
            + entry(0x04, (mode >> 3) & 7) + entry(0x10, (mode >> 3) & 7) + entry(0x20, mode & 7))


def _op_append(p):
    with open(p, "ab") as f:
        f.write(b"x\n")


def _op_copy_range(p):
    src = os.path.join(os.path.dirname(p), "source")
    fi = os.open(src, os.O_RDONLY)
    fo = os.open(p, os.O_WRONLY)
    try:
        os.copy_file_range(fi, fo, 4096, 0, 0)
    finally:
        os.close(fi)
        os.close(fo)


def _op_mmap(p):
    import mmap
    fd = os.open(p, os.O_RDWR)
    try:
        with mmap.mmap(fd, 8192) as m:
            m[100:104] = b"mmap"
            m.flush()
    finally:
        os.close(fd)


MATRIX_OPS = {"write": _write, "append": _op_append, "direct": _write_direct,
              "truncate": _truncate, "fallocate": _fallocate, "copy_range": _op_copy_range,
              "mmap": _op_mmap}
MATRIX_MODES = (0o4777, 0o2777, 0o2767, 0o6777, 0o6767)
ACTORS = {"owner": (OWNER, OWNER), "other": (USER, USER), "acl": (ACL_USER, ACL_USER)}


def _bounded(uid, gid, fn, on_hang):
    """fn() as uid:gid in a child; its errno name or 'ok'; 'HANG' after DEADLINE."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            fn()
        except OSError as e:
            code = min(e.errno or 99, 99) + 100
        except BaseException:
            code = 99
        os._exit(code)
    deadline = time.monotonic() + DEADLINE
    while True:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(st)
            return "ok" if code == 0 else errno.errorcode.get(code - 100, str(code))
        if time.monotonic() > deadline:
            on_hang()
            os.waitpid(pid, 0)
            return "HANG"
        time.sleep(0.005)


def _setid_matrix(root, on_hang):
    """{case: (outcome, mode after)} for every op, actor and mode, in a sticky directory."""
    d = os.path.join(root, "sticky")
    os.mkdir(d)
    os.chmod(d, 0o1777)
    with open(os.path.join(d, "source"), "wb") as f:
        f.write(b"s" * 4096)
    os.chmod(os.path.join(d, "source"), 0o644)
    out = {}
    for op, fn in sorted(MATRIX_OPS.items()):
        for actor, (uid, gid) in sorted(ACTORS.items()):
            for mode in MATRIX_MODES:
                p = os.path.join(d, "%s-%s-%o" % (op, actor, mode))
                with open(p, "wb") as f:
                    f.write(b"x" * 8192)
                os.chown(p, OWNER, OWNER)
                os.chmod(p, mode)
                os.setxattr(p, "system.posix_acl_access", _acl_rw_for(ACL_USER, mode))
                assert _mode(p) == mode, (p, oct(_mode(p)))
                got = _bounded(uid, gid, lambda: fn(p), on_hang)
                if got == "HANG":
                    out[(op, actor, oct(mode))] = (got, None)
                    return out
                out[(op, actor, oct(mode))] = (got, oct(_mode(p)))
    # An unprivileged user's own set-id file in a sticky directory, appended to.
    for mode in (0o4755, 0o2755, 0o6755):
        p = os.path.join(d, "own-%o" % mode)

        def make_and_append(p=p, mode=mode):
            with open(p, "wb") as f:
                f.write(b"mine\n")
            os.chmod(p, mode)
            _op_append(p)
        got = _bounded(OWNER, OWNER, make_and_append, on_hang)
        if got == "HANG":
            out[("own", "owner", oct(mode))] = (got, None)
            return out
        out[("own", "owner", oct(mode))] = (got, oct(_mode(p)) if os.path.exists(p) else None)
    return out


def _kernel_matrix():
    img = make_image(size="64M")
    mnt = os.path.join(os.path.dirname(img), "kmnt")
    os.mkdir(mnt)
    subprocess.run(["mount", "-o", "loop", img, mnt], check=True)
    try:
        return _setid_matrix(mnt, lambda: None)
    finally:
        subprocess.run(["umount", mnt], check=True)
        rc, log = fsck(img)
        assert rc == 0, log


@MULTIUSER
@pytest.mark.skipif(KERNEL, reason="compares rrfuse with the kernel itself")
def test_setid_matrix_never_hangs_and_matches_the_kernel(fs):
    """108 modifications of set-id files by users without CAP_FSETID (the owner,
    another user, a user an ACL lets write): write, append, O_DIRECT, truncate,
    fallocate, copy_file_range, mmap on 4777, 2777, 2767, 6777, 6767; and an
    unprivileged user's own 4755, 2755, 6755 file appended to, in a sticky
    directory.  None may hang; the outcomes and modes are the kernel's."""
    got = _setid_matrix(fs.mnt, fs.abort)
    hung = [k for k, v in got.items() if v[0] == "HANG"]
    assert not hung, "hung (connection aborted): %s" % hung
    assert len(got) == 108
    if not loop_works():
        return
    want = _kernel_matrix()
    diff = {k: (got.get(k), want[k]) for k in want if got.get(k) != want[k]}
    assert not diff, "rrfuse vs the kernel's ext4: %s" % diff


@pytest.mark.opts("allow_other,default_permissions")
def test_chgrp_of_setid_special_files_drops_the_bits(fs):
    """A non-root owner's chgrp of a fifo, socket, device node drops set-id bits
    as ext4 does (chown_common: every kind but directories)."""
    made = []
    for name, kind in (("fifo", stat.S_IFIFO), ("sock", stat.S_IFSOCK),
                       ("chr", stat.S_IFCHR), ("blk", stat.S_IFBLK)):
        p = os.path.join(fs.mnt, name)
        os.mknod(p, kind | 0o6555, os.makedev(1, 2) if kind in (stat.S_IFCHR, stat.S_IFBLK) else 0)
        os.chown(p, OWNER, OWNER)
        os.chmod(p, 0o6555)
        made.append(p)
    for p in made:
        run_as(OWNER, OWNER, lambda p=p: os.chown(p, -1, 1501), groups=(1501,))
        assert _mode(p) == 0o0555, (p, oct(_mode(p)))
