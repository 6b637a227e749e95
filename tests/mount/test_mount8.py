"""rrfuse through mount(8): `mount -t fuse.rrfuse IMG MNT -o ...` and an fstab
line, as mount.fuse3 runs it.  mount(8) runs helpers with its own fixed PATH,
so the test links the binary under test as /usr/local/sbin/rrfuse for its
duration (and skips if something else is installed there)."""
import errno
import os
import re
import shutil
import stat
import subprocess

import pytest

import conftest
from conftest import (RRFUSE, fsck, make_image, require_binary, require_fuse,
                      require_root, wait_for)

pytestmark = pytest.mark.rrfuse_only

LINK = "/usr/local/sbin/rrfuse"
# umount(8) looks for its helper here only.
HELPER = "/sbin/umount.fuse.rrfuse"


@pytest.fixture
def env():
    """Image and mount point; `rrfuse` where mount(8) looks for it."""
    require_root("mount(8)")
    require_fuse()
    require_binary()
    if shutil.which("mount.fuse3") is None:
        pytest.skip("needs mount.fuse3 (fuse3)")
    for p in (LINK, HELPER):
        if os.path.lexists(p):
            pytest.skip("%s exists (an installed rrfuse?): not replacing it" % p)
    image = make_image(size="64M")
    d = os.path.dirname(image)
    mnt = os.path.join(d, "mnt")
    os.mkdir(mnt)
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    os.symlink(os.path.abspath(RRFUSE), LINK)
    os.symlink(os.path.abspath(RRFUSE), HELPER)
    try:
        yield image, mnt
    finally:
        os.unlink(LINK)
        os.unlink(HELPER)
        subprocess.run(["umount", "-l", mnt], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    if not conftest.KEEP:
        conftest._rm_workdir(d)


def mount_entry(mnt):
    with open("/proc/self/mounts") as f:
        for line in f:
            t = line.split()
            if t[1] == mnt:
                return t
    return None


def daemon_gone(image):
    return subprocess.run(["pgrep", "-f", image], stdout=subprocess.DEVNULL).returncode != 0


def daemon_args(image):
    """The running daemon's command line (as mount.fuse3 built it)."""
    r = subprocess.run(["pgrep", "-a", "-f", "rrfuse " + image], capture_output=True, text=True)
    return r.stdout


def use_and_unmount(image, mnt):
    with open(os.path.join(mnt, "f"), "w") as f:
        f.write("through mount(8)\n")
    r = subprocess.run(["umount", mnt], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # umount ran the helper: the daemon has let go of the image already.
    assert not conftest.image_writer(image), "umount returned while the daemon still writes"
    assert wait_for(lambda: daemon_gone(image), timeout=30)
    rc, out = fsck(image)
    assert rc == 0, out
    assert "through mount(8)" in subprocess.run(
        ["debugfs", "-R", "cat /f", image], capture_output=True, text=True).stdout


def test_mount_t_fuse_rrfuse(env):
    image, mnt = env
    r = subprocess.run(["mount", "-t", "fuse.rrfuse", image, mnt,
                        "-o", "rw,noatime,nodev,nosuid,commit=10,rralloc,max_prealloc_kb=32768"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    args = daemon_args(image)
    assert "rralloc" in args and "max_prealloc_kb=32768" in args, args
    t = mount_entry(mnt)
    assert t and t[0] == image and t[2] == "fuse.rrfuse", t
    assert {"rw", "noatime", "nodev", "nosuid"} <= set(t[3].split(",")), t
    use_and_unmount(image, mnt)


def test_fstab_line(env):
    image, mnt = env
    fstab = os.path.join(os.path.dirname(image), "fstab")
    with open(fstab, "w") as f:
        f.write("%s %s fuse.rrfuse rw,noatime,commit=10,rralloc,max_prealloc_kb=32768 0 0\n"
                % (image, mnt))
    r = subprocess.run(["mount", "--fstab", fstab, mnt], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    t = mount_entry(mnt)
    assert t and t[2] == "fuse.rrfuse", t
    use_and_unmount(image, mnt)


def test_bad_option_through_mount(env):
    image, mnt = env
    before = open(image, "rb").read()
    r = subprocess.run(["mount", "-t", "fuse.rrfuse", image, mnt, "-o", "commit=abc"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "commit" in r.stderr, r.stderr
    assert mount_entry(mnt) is None
    assert open(image, "rb").read() == before


def superblock_state(image):
    out = subprocess.run(["dumpe2fs", "-h", image], capture_output=True, text=True).stdout
    return re.search(r"^Filesystem state:\s+(.*)$", out, re.M).group(1).strip()


def test_remount_ro_and_rw(env):
    """mount -o remount,ro acts on the running daemon, as ext4's remount:
    data written out, the image clean and checkable while mounted, every
    change refused; remount,rw takes changes again (fstests generic/294,
    306, 452)."""
    image, mnt = env
    r = subprocess.run(["mount", "-t", "fuse.rrfuse", image, mnt, "-o", "noatime"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    pid = daemon_args(image).split()[0]
    data = os.urandom(3 << 20)
    with open(os.path.join(mnt, "f"), "wb") as f:
        f.write(data)
    # Open for writing: the kernel refuses a remount to ro, and nothing changes.
    with open(os.path.join(mnt, "busy"), "wb") as busy:
        r = subprocess.run(["mount", "-o", "remount,ro", mnt], capture_output=True, text=True)
        assert r.returncode != 0
        busy.write(b"still writable")
    assert "rw" in mount_entry(mnt)[3].split(",")
    r = subprocess.run(["mount", "-o", "remount,ro", mnt], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "ro" in mount_entry(mnt)[3].split(",")
    assert daemon_args(image).split()[0] == pid, "a second daemon was started"
    for op in (lambda: open(os.path.join(mnt, "g"), "w"),
               lambda: os.mknod(os.path.join(mnt, "fifo"), 0o600 | stat.S_IFIFO),
               lambda: os.mkdir(os.path.join(mnt, "d")),
               lambda: os.unlink(os.path.join(mnt, "f"))):
        with pytest.raises(OSError) as e:
            op()
        assert e.value.errno == errno.EROFS
    # Clean on disk while mounted read-only, with the data in place.
    assert superblock_state(image) == "clean"
    r = subprocess.run(["e2fsck", "-fn", image], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout
    out = subprocess.run(["debugfs", "-R", "dump /f /dev/stdout", image], capture_output=True).stdout
    assert out == data
    with open(os.path.join(mnt, "f"), "rb") as f:
        assert f.read() == data
    r = subprocess.run(["mount", "-o", "remount,rw", mnt], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "rw" in mount_entry(mnt)[3].split(",")
    # In use again: with the journal written, as the kernel marks it,
    # needs_recovery set and the state left clean (a crash needs a replay only).
    assert superblock_state(image) == "clean"
    out = subprocess.run(["dumpe2fs", "-h", image], capture_output=True, text=True).stdout
    assert "needs_recovery" in re.search(r"^Filesystem features:(.*)$", out, re.M).group(1)
    with open(os.path.join(mnt, "g"), "w") as f:
        f.write("after remount,rw\n")
    os.unlink(os.path.join(mnt, "busy"))
    use_and_unmount(image, mnt)
    assert "after remount,rw" in subprocess.run(
        ["debugfs", "-R", "cat /g", image], capture_output=True, text=True).stdout


def test_remount_rw_of_a_read_only_mount_is_refused(env):
    image, mnt = env
    r = subprocess.run(["mount", "-t", "fuse.rrfuse", image, mnt, "-o", "ro"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["mount", "-o", "remount,rw", mnt], capture_output=True, text=True)
    assert r.returncode != 0
    assert "read-only from the start" in r.stderr, r.stderr
    assert "ro" in mount_entry(mnt)[3].split(",")
    r = subprocess.run(["umount", mnt], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert wait_for(lambda: daemon_gone(image), timeout=30)
    rc, out = fsck(image)
    assert rc == 0, out
