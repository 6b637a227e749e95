"""A normal user mounts an image they own, uses it and unmounts it, with no
root at any step: `mke2fs -E root_owner`, `rrfuse IMG MNT`, `rrfuse -u MNT` (fusermount3 -u inside).

Root only prepares what a stock distribution ships (/dev/fuse open to
everyone, mode 0666; this machine's is 0600) and checks the image afterwards
with e2fsck and the kernel's ext4."""
import os
import shutil
import stat
import subprocess
import time

import pytest

import conftest
from conftest import (RRFUSE, fsck, kernel_check, loop_works, require_binary,
                      require_fuse, require_root, run_as, snapshot, wait_for)

pytestmark = pytest.mark.rrfuse_only

UID = GID = 65534


@pytest.fixture
def user_dir():
    """A work directory owned by the user, and /dev/fuse open to users."""
    require_root("preparing /dev/fuse and a directory for another user")
    require_fuse()
    require_binary()
    if shutil.which("fusermount3") is None:
        pytest.skip("needs fusermount3 (fuse3)")
    mode = stat.S_IMODE(os.stat("/dev/fuse").st_mode)
    os.chmod("/dev/fuse", 0o666)
    d = conftest._new_workdir("rrfuse-user-")
    os.chown(d, UID, GID)
    try:
        yield d
    finally:
        os.chmod("/dev/fuse", mode)
        subprocess.run(["umount", "-l", os.path.join(d, "mnt")],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not conftest.KEEP:
            conftest._rm_workdir(d)


def user(cmd, **kw):
    return run_as(UID, GID, cmd, timeout=60, **kw)


def daemon_gone(image):
    r = subprocess.run(["pgrep", "-f", image], stdout=subprocess.PIPE)
    return r.returncode != 0


def mounted(mnt):
    with open("/proc/self/mountinfo") as f:
        return [l for l in f if l.split()[4] == mnt]


def test_user_mounts_own_image(user_dir):
    img = os.path.join(user_dir, "img")
    mnt = os.path.join(user_dir, "mnt")
    r = user("truncate -s 64M {0} && mke2fs -q -t ext4 -F -E root_owner={1}:{2} {0} "
             "&& mkdir {3}".format(img, UID, GID, mnt))
    assert r.returncode == 0, r.stderr
    r = user([RRFUSE, img, mnt])
    assert r.returncode == 0, r.stderr
    try:
        info = mounted(mnt)
        assert info, "not mounted"
        assert "fuse.rrfuse" in info[0] and "user_id=%d" % UID in info[0], info
        # The user works in it; the kernel checks permissions (default_permissions).
        script = """
set -e
cd {0}
printf 'hello\\n' > f
mkdir d
printf 'deep\\n' > d/g
ln -s f link
chmod 000 d/g
if cat d/g 2>/dev/null; then echo 'mode 000 was readable'; exit 1; fi
chmod 640 d/g
cat f d/g link
stat -c '%u:%g %a %n' f d d/g
""".format(mnt)
        r = user(script)
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.splitlines()[:3] == ["hello", "deep", "hello"]
        assert "%d:%d 640 d/g" % (UID, GID) in r.stdout
        # Without allow_other, nobody else gets in, root included.
        with pytest.raises(PermissionError):
            os.stat(os.path.join(mnt, "f"))
        r = user([RRFUSE, "-u", mnt])
        assert r.returncode == 0, r.stderr
    finally:
        if mounted(mnt):
            subprocess.run(["umount", "-l", mnt])
    assert wait_for(lambda: daemon_gone(img), timeout=30)
    assert not mounted(mnt)
    rc, out = fsck(img)
    assert rc == 0, out
    if loop_works():
        # What the user wrote is what the kernel reads.
        r = user([RRFUSE, img, mnt])
        assert r.returncode == 0, r.stderr
        try:
            snap = run_as(UID, GID, lambda: snapshot(mnt))
        finally:
            user([RRFUSE, "-u", mnt])
        assert wait_for(lambda: daemon_gone(img), timeout=30)
        kernel_check(img, snap)


def test_allow_other_refused_without_fuse_conf(user_dir):
    with open("/etc/fuse.conf") if os.path.exists("/etc/fuse.conf") else open(os.devnull) as f:
        if any(l.strip() == "user_allow_other" for l in f):
            pytest.skip("/etc/fuse.conf allows allow_other to users")
    img = os.path.join(user_dir, "img")
    mnt = os.path.join(user_dir, "mnt")
    r = user("truncate -s 64M {0} && mke2fs -q -t ext4 -F -E root_owner={1}:{2} {0} "
             "&& mkdir {3}".format(img, UID, GID, mnt))
    assert r.returncode == 0, r.stderr
    before = open(img, "rb").read()
    r = user([RRFUSE, img, mnt, "-o", "allow_other"])
    assert r.returncode != 0
    assert "allow_other" in r.stderr, r.stderr
    time.sleep(0.2)
    assert not mounted(mnt)
    assert open(img, "rb").read() == before, "a refused mount changed the image"
