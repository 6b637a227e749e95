"""Block devices (loop devices here): rrfuse mounts them as it mounts images,
with the size from the device, 512-byte and 4 KiB logical sectors, and
exclusive use: a device the kernel has mounted, or another rrfuse holds,
is refused with a message naming the problem, and nothing is written."""
import hashlib
import os
import subprocess

import pytest

from conftest import RRFUSE, Mount, check_mount, fsck, pattern

pytestmark = pytest.mark.rrfuse_only


def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@pytest.mark.parametrize("loopdev", [512, 4096], indirect=True)
def test_mount_loop_device(loopdev):
    dev, image = loopdev
    m = Mount(dev, mnt=os.path.join(os.path.dirname(image), "mnt"))
    m.mount()
    try:
        data = pattern(3, 5 << 20)
        with open(m.path("big"), "wb") as f:
            f.write(data)
            os.fsync(f.fileno())
        os.mkdir(m.path("d"))
        with open(m.path("d", "small"), "w") as f:
            f.write("on a block device\n")
        st = os.statvfs(m.mnt)
        assert st.f_blocks * st.f_frsize > 100 << 20      # the device's size, not 0
        check_mount(m)          # unmount, e2fsck -fn, kernel read-back
    finally:
        m.cleanup()


def test_device_mounted_by_kernel_is_refused(loopdev):
    dev, image = loopdev
    d = os.path.dirname(image)
    kmnt = os.path.join(d, "kmnt")
    mnt = os.path.join(d, "mnt")
    os.makedirs(kmnt)
    os.makedirs(mnt, exist_ok=True)
    subprocess.run(["mount", "-t", "ext4", dev, kmnt], check=True)
    try:
        r = subprocess.run([RRFUSE, dev, mnt, "-f"], capture_output=True, text=True, timeout=30)
        assert r.returncode != 0
        assert r.stderr.count("\n") == 1 and "in use" in r.stderr, r.stderr
    finally:
        subprocess.run(["umount", kmnt], check=True)
    rc, out = fsck(dev)
    assert rc == 0, out


def test_device_held_by_another_rrfuse_is_refused(loopdev):
    dev, image = loopdev
    m = Mount(dev, mnt=os.path.join(os.path.dirname(image), "mnt"))
    m.mount()
    try:
        other = os.path.join(os.path.dirname(image), "mnt2")
        os.mkdir(other)
        before = digest(image)
        r = subprocess.run([RRFUSE, dev, other, "-f"], capture_output=True, text=True, timeout=30)
        assert r.returncode != 0
        assert "in use" in r.stderr, r.stderr
        assert digest(image) == before
        with open(m.path("still"), "w") as f:      # the first mount is unharmed
            f.write("fine\n")
        m.unmount()
    finally:
        m.cleanup()
    rc, out = fsck(dev)
    assert rc == 0, out
