"""Block devices (loop devices here): rrfuse mounts them as it mounts images,
with the size from the device, 512-byte and 4 KiB logical sectors, and
exclusive use: a device the kernel has mounted, or another rrfuse holds,
is refused with a message naming the problem, and nothing is written."""
import hashlib
import os
import subprocess

import pytest

import conftest
from conftest import (RRFUSE, Mount, fsck, kernel_check, loop_works, make_image,
                      pattern, require_mount_backend, snapshot)

pytestmark = pytest.mark.rrfuse_only


def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@pytest.fixture
def loopdev(request):
    """losetup over a fresh 128 MiB image; param: the logical sector size."""
    require_mount_backend()
    if not loop_works():
        pytest.skip("needs root and loop devices")
    sector = getattr(request, "param", 512)
    image = make_image(size="128M")
    r = subprocess.run(["losetup", "-f", "--show", "--sector-size", str(sector), image],
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip("losetup --sector-size %d: %s" % (sector, r.stderr.strip()))
    dev = r.stdout.strip()
    try:
        yield dev, image
    finally:
        subprocess.run(["losetup", "-d", dev])
        if not conftest.KEEP:
            conftest._rm_workdir(os.path.dirname(image))


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
        snap = snapshot(m.mnt)
        m.unmount()
    finally:
        m.cleanup()
    rc, out = fsck(dev)
    assert rc == 0, out
    kernel_check(dev, snap)


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
