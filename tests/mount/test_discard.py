"""Discarding free space: `fstrim MOUNTPOINT` (FITRIM through the FUSE ioctl)
punches holes in an image file, or sends BLKDISCARD to a block device (a loop
device passes it on to its backing file), so the image shrinks; blocks in use
keep their data.  Only root may trim."""
import os
import shutil
import subprocess

import pytest

import conftest
from conftest import Mount, check_mount, pattern

pytestmark = [pytest.mark.rrfuse_only,
              pytest.mark.skipif(shutil.which("fstrim") is None, reason="needs fstrim")]


def allocated(path):
    return os.stat(path).st_blocks * 512


def remove_big_file(m, backing):
    """Write /keep and a 48 MiB /gone, delete /gone and sync; the backing
    file's allocated bytes before the delete, and /keep's contents."""
    keep = pattern(1, 8 << 20)
    with open(m.path("keep"), "wb") as f:
        f.write(keep)
    with open(m.path("gone"), "wb") as f:
        for i in range(48):
            f.write(pattern(100 + i, 1 << 20))
        os.fsync(f.fileno())
    os.sync()
    full = allocated(backing)
    os.unlink(m.path("gone"))
    conftest.syncfs(m.mnt)
    return full, keep


def assert_kept(m, keep):
    with open(m.path("keep"), "rb") as f:
        assert f.read() == keep


def fill_and_trim(m, backing):
    full, keep = remove_big_file(m, backing)
    r = subprocess.run(["fstrim", "-v", m.mnt], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "trimmed" in r.stdout, r.stdout
    os.sync()
    assert allocated(backing) < full - (40 << 20), (full, allocated(backing))
    assert_kept(m, keep)


def test_fstrim_image_file(mount_factory, monkeypatch):
    # With the progress interval at 0, the foreground daemon reports every group.
    monkeypatch.setenv("RRFUSE_PROGRESS_MS", "0")
    m = mount_factory(size="256M", mkfs_args=["-g", "8192"])
    fill_and_trim(m, m.image)
    assert "fstrim: block groups: 1 of 8 (12%)" in m.daemon_log, m.daemon_log
    assert "fstrim: block groups: 8 done in" in m.daemon_log, m.daemon_log


def test_fstrim_loop_device(loopdev):
    dev, image = loopdev
    m = Mount(dev, mnt=os.path.join(os.path.dirname(image), "mnt"))
    m.mount()
    try:
        fill_and_trim(m, image)
        check_mount(m)
    finally:
        m.cleanup()


@pytest.mark.opts("allow_other")
def test_fstrim_needs_root(fs, as_user):
    r = as_user(["fstrim", fs.mnt])
    assert r.returncode != 0
    assert "not permitted" in r.stderr or "Permission denied" in r.stderr, r.stderr


def write_and_remove(fs):
    full, keep = remove_big_file(fs, fs.image)
    conftest.wait_for(lambda: allocated(fs.image) < full - (40 << 20), timeout=5)
    assert_kept(fs, keep)
    return full, allocated(fs.image)


@pytest.mark.image(size="256M")
@pytest.mark.opts("discard")
def test_online_discard(fs):
    full, after = write_and_remove(fs)
    assert after < full - (40 << 20), (full, after)


@pytest.mark.image(size="256M")
def test_no_discard_by_default(fs):
    full, after = write_and_remove(fs)
    assert after > full - (8 << 20), (full, after)
