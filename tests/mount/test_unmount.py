"""Unmounting is finished when it returns: `rrfuse -u MNT` (and umount(8)
through the umount.fuse.rrfuse helper, and a fuseblk mount's own umount)
return only once the daemon has written the image out and let go of it; a
second rrfuse on an image whose daemon is still finishing waits for it,
saying so; an image mounted already is refused at once, naming where.

The suite's own unmount (conftest) uses `rrfuse -u` and fails a test that
checks or mounts an image while its daemon still holds it."""
import fcntl
import hashlib
import os
import subprocess
import time

import pytest

import conftest
from conftest import (RRFUSE, Mount, fsck, image_writer, make_image, pattern,
                      require_binary, require_fuse, require_root, wait_for)

pytestmark = pytest.mark.rrfuse_only

HELPER = "/sbin/umount.fuse.rrfuse"


def write_pending(mnt, nfiles=48, size=(2 << 20) + 4096):
    """About 100 MiB through the writeback cache in files under the stream
    size: after close, much of it is still in the kernel's cache or in the
    daemon's delayed-allocation buffers, so the unmount has work to wait for."""
    digests = {}
    for i in range(nfiles):
        data = pattern(i, size)
        with open(os.path.join(mnt, "f%03d" % i), "wb") as f:
            f.write(data)
        digests["f%03d" % i] = hashlib.sha256(data).hexdigest()
    return digests


def check_contents(image, digests):
    m = Mount(image)
    m.mount()
    try:
        for name, want in digests.items():
            with open(m.path(name), "rb") as f:
                assert hashlib.sha256(f.read()).hexdigest() == want, name
        m.unmount()
    finally:
        m.cleanup()
    rc, out = fsck(image)
    assert rc == 0, out


def unmount_and_check(m, cmd, nfiles=48):
    """Write pending data, unmount with cmd: at its return the daemon has let
    go of the image (no lock), which is e2fsck-clean and holds the data."""
    m.mount()
    try:
        if m.image.startswith("/dev/"):
            assert conftest._mountinfo_entry(m.mnt)[1] == "fuseblk.rrfuse"
        digests = write_pending(m.mnt, nfiles=nfiles)
        r = subprocess.run(cmd + [m.mnt], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        assert not image_writer(m.image), "%s returned before the daemon let go" % cmd
        r2 = subprocess.run(["e2fsck", "-fn", m.image], capture_output=True, text=True)
        assert r2.returncode == 0, r2.stdout
        m.mounted = False
        m._finish_daemon()
    finally:
        m.cleanup()
    check_contents(m.image, digests)


def test_rrfuse_u_returns_with_the_image_complete():
    unmount_and_check(Mount(make_image(size="1G")), [RRFUSE, "-u"])


def test_rrfuse_u_refuses_what_is_not_rrfuse(tmp_path):
    r = subprocess.run([RRFUSE, "-u", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode != 0 and "not mounted" in r.stderr, r.stderr
    r = subprocess.run([RRFUSE, "-u", "/proc"], capture_output=True, text=True)
    assert r.returncode != 0 and "proc mount, not rrfuse's" in r.stderr, r.stderr


@pytest.fixture
def helper():
    """rrfuse as umount(8)'s helper for fuse.rrfuse, where umount looks for it."""
    require_root("umount(8)")
    require_fuse()
    require_binary()
    if os.path.lexists(HELPER):
        pytest.skip("%s exists (an installed rrfuse?): not replacing it" % HELPER)
    os.symlink(os.path.abspath(RRFUSE), HELPER)
    try:
        yield HELPER
    finally:
        os.unlink(HELPER)


def test_umount8_runs_the_helper_and_waits(helper):
    unmount_and_check(Mount(make_image(size="1G")), ["umount"])


def test_fuseblk_umount_waits_for_the_daemon(loopdev):
    """Root mounts a block device as fuseblk: the kernel's umount waits for
    the daemon's DESTROY, so even umount without a helper returns late enough."""
    dev, image = loopdev
    unmount_and_check(Mount(dev, mnt=os.path.join(os.path.dirname(image), "mnt")), ["umount", "-i"],
                      nfiles=24)


def test_next_mount_waits_for_the_previous_daemon():
    """A lock held by no mount: a daemon still finishing (here: this test)."""
    image = make_image(size="64M")
    mnt = os.path.join(os.path.dirname(image), "mnt")
    os.makedirs(mnt)
    log = os.path.join(os.path.dirname(image), "log")
    fd = os.open(image, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    held = True
    with open(log, "wb") as logf:
        proc = subprocess.Popen([RRFUSE, image, mnt, "-f"], stdout=logf, stderr=logf)
    try:
        assert wait_for(lambda: "waiting up to" in open(log).read(), timeout=20), open(log).read()
        text = open(log).read()
        assert "held by process %d" % os.getpid() in text, text
        time.sleep(0.5)
        assert conftest._mountinfo_entry(mnt) is None, "mounted while the image was held"
        assert proc.poll() is None
        fcntl.flock(fd, fcntl.LOCK_UN)
        held = False
        assert wait_for(lambda: (conftest._mountinfo_entry(mnt) or ("", ""))[1].startswith("fuse"),
                        timeout=20), open(log).read()
        r = subprocess.run([RRFUSE, "-u", mnt], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert proc.wait(30) == 0, open(log).read()
    finally:
        if held:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        if proc.poll() is None:
            subprocess.run(["fusermount3", "-uz", mnt])
            proc.kill()
            proc.wait()
    rc, out = fsck(image)
    assert rc == 0, out


def test_image_mounted_already_is_refused_at_once(mount_factory):
    """fstests generic/732 mounts one image on two mount points: refused,
    saying where it is mounted, without waiting."""
    m = mount_factory(size="64M")
    other = os.path.join(os.path.dirname(m.image), "mnt2")
    os.makedirs(other)
    t0 = time.monotonic()
    r = subprocess.run([RRFUSE, m.image, other, "-f"], capture_output=True, text=True, timeout=60)
    assert time.monotonic() - t0 < 10
    assert r.returncode != 0
    assert "mounted on %s" % os.path.realpath(m.mnt) in r.stderr, r.stderr
    assert conftest._mountinfo_entry(other) is None


def test_unmount_of_a_bind_mount_leaves_the_other(mount_factory):
    """fstests generic/306: the image's mount bound elsewhere, then the first
    mount point unmounted.  The superblock lives on in the bind mount, so the
    daemon keeps the image: rrfuse -u returns at once instead of waiting for
    it, the bind mount still works, and its own unmount is the one that
    waits for the image to be complete."""
    require_root("bind mounts")
    m = mount_factory(size="64M")
    bind = os.path.join(os.path.dirname(m.image), "bind")
    os.makedirs(bind)
    subprocess.run(["mount", "--bind", m.mnt, bind], check=True)
    try:
        t0 = time.monotonic()
        r = subprocess.run([RRFUSE, "-u", m.mnt], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert time.monotonic() - t0 < 20, "rrfuse -u waited for a daemon that serves the bind mount"
        assert conftest._mountinfo_entry(m.mnt) is None
        data = pattern(7, 3 << 20)
        with open(os.path.join(bind, "after"), "wb") as f:
            f.write(data)
        assert image_writer(m.image)
        r = subprocess.run([RRFUSE, "-u", bind], capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        assert not image_writer(m.image), "the last unmount returned before the daemon let go"
    except BaseException:
        subprocess.run(["umount", "-l", bind])
        raise
    m.mounted = False
    m._finish_daemon()
    check_contents(m.image, {"after": hashlib.sha256(data).hexdigest()})
