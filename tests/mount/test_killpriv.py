"""Set-user-ID, set-group-ID and file capabilities dropped on modification,
as the kernel's ext4 drops them, now that rrfuse asks for
FUSE_HANDLE_KILLPRIV_V2 (src/channel.c) and drops the set-id bits itself.

The rule (the VFS's setattr_should_drop_suidgid): a write, truncate or
fallocate by a caller without CAP_FSETID drops set-user-ID, and set-group-ID
when the file is group-executable or the caller is not in the file's group;
root keeps both.  chown() drops set-user-ID always and set-group-ID when the
file is group-executable.  Run with RRFUSE_TEST_KERNEL=1, every expectation
here holds on the kernel's ext4 too.
"""

import os
import re
import stat
import subprocess

import pytest

from conftest import KERNEL, RRCTL, run_as

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
