"""Block devices (loop devices here): rrfuse mounts them as it mounts images,
with the size from the device, 512-byte and 4 KiB logical sectors, and
exclusive use: a device the kernel has mounted, or another rrfuse holds,
is refused with a message naming the problem, and nothing is written."""
import hashlib
import os
import re
import subprocess

import pytest

from conftest import RRCTL, RRFUSE, Mount, check_mount, fsck, image_cachestat, pattern

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
        # The first mount's own writes done and durable, and the device read
        # through its own page cache, not the loop device's backing file,
        # which the kernel's writeback of that cache may change at any time.
        subprocess.run([RRCTL, m.mnt, "sync"], check=True)
        before = digest(dev)
        r = subprocess.run([RRFUSE, dev, other, "-f"], capture_output=True, text=True, timeout=30)
        assert r.returncode != 0
        assert "in use" in r.stderr, r.stderr
        assert digest(dev) == before
        with open(m.path("still"), "w") as f:      # the first mount is unharmed
            f.write("fine\n")
        m.unmount()
    finally:
        m.cleanup()
    rc, out = fsck(dev)
    assert rc == 0, out


O_DIRECT = 0o40000


def direct_fds(m, target):
    """Flags of the daemon's descriptors open on target: how many have O_DIRECT, how many not."""
    d, nd = 0, 0
    real = os.path.realpath(target)
    for fd in os.listdir("/proc/%d/fd" % m.proc.pid):
        try:
            if os.readlink("/proc/%d/fd/%s" % (m.proc.pid, fd)) != real:
                continue
            with open("/proc/%d/fdinfo/%s" % (m.proc.pid, fd)) as f:
                flags = int(re.search(r"flags:\s*(\d+)", f.read()).group(1), 8)
        except FileNotFoundError:
            continue
        if flags & O_DIRECT:
            d += 1
        else:
            nd += 1
    return d, nd


def mixed_io(m, target):
    """Aligned and unaligned writes and reads, checked against a copy in memory.
    Returns the bytes the target's page cache gained by the file's read-back
    (after drop_caches): what the data path read through it."""
    ref = bytearray(pattern(7, 6 << 20))
    with open(m.path("mix"), "wb") as f:
        f.write(ref)
    fd = os.open(m.path("mix"), os.O_RDWR)
    try:
        for i, (off, n) in enumerate([(0, 4096), (511, 1000), (4096 * 3 + 17, 70000),
                                      (1 << 20, 1 << 20), ((5 << 20) - 3, 9000),
                                      (123457, 4096 * 5)]):
            data = pattern(100 + i, n)
            os.pwrite(fd, data, off)
            end = off + n
            if end > len(ref):
                ref.extend(b"\0" * (end - len(ref)))
            ref[off:end] = data
        os.fsync(fd)
    finally:
        os.close(fd)
    subprocess.run(["sh", "-c", "echo 3 > /proc/sys/vm/drop_caches"], check=True)
    cached = image_cachestat(target)[0]
    with open(m.path("mix"), "rb") as f:
        assert f.read() == bytes(ref)
    cached = image_cachestat(target)[0] - cached
    # Unaligned reads through the FUSE cache's misses too.
    fd = os.open(m.path("mix"), os.O_RDONLY)
    try:
        for off, n in [(3, 5000), (4095, 2), (1 << 20, 131072)]:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            assert os.pread(fd, n, off) == bytes(ref[off:off + n])
    finally:
        os.close(fd)
    return cached


def reads_direct(m, target):
    """Whether the data path reads past the target's page cache (-o direct):
    a 6 MiB file read back adds at most metadata's few blocks to it."""
    cached = mixed_io(m, target)
    print("%s: the read-back added %d KiB to its page cache" % (target, cached >> 10))
    assert cached < 2 << 20 or cached > 5 << 20, cached
    return cached < 2 << 20


@pytest.mark.parametrize("loopdev", [512, 4096], indirect=True)
def test_direct_io_on_devices(loopdev):
    """A block device's file data goes through an O_DIRECT descriptor by default,
    bounced through aligned buffers; metadata through the buffered one."""
    dev, image = loopdev
    m = Mount(dev, mnt=os.path.join(os.path.dirname(image), "mnt"))
    m.mount()
    try:
        assert direct_fds(m, dev) == (1, 1)
        assert reads_direct(m, dev)
        check_mount(m)          # unmount, e2fsck -fn, kernel read-back
    finally:
        m.cleanup()


def test_nodirect_on_devices(loopdev):
    dev, image = loopdev
    m = Mount(dev, mnt=os.path.join(os.path.dirname(image), "mnt"), opts="nodirect")
    m.mount()
    try:
        # The O_DIRECT descriptor is there for held data's write-back (dev.c: direct_as_is).
        assert direct_fds(m, dev) == (1, 1)
        assert not reads_direct(m, dev)
        check_mount(m)
    finally:
        m.cleanup()


@pytest.mark.parametrize("opts,want", [("", False), ("direct", True)])
def test_direct_io_on_image_files(mount_factory, opts, want):
    """An image file's data path reads through the page cache unless -o
    direct asks (where the host filesystem allows); either way an O_DIRECT
    descriptor is open beside the buffered one, for held data's write-back."""
    m = mount_factory(opts=opts)
    assert direct_fds(m, m.image) == (1, 1)
    assert reads_direct(m, m.image) == want
