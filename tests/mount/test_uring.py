"""FUSE requests over io_uring (-o io_uring, protocol 7.42, lib/uring.c): the
requests go over the ring (rrctl -s counts them per transport), the files are
what the kernel's ext4 reads back, and an unmount, an abort of the connection
or a SIGKILL of the daemon during ring traffic leave no hung thread or
process and an e2fsck-clean image.  Where the kernel refuses the ring
(enable_uring off) rrfuse says so once in its log and serves /dev/fuse.

The kernel offers the ring only with /sys/module/fuse/parameters/enable_uring
set; as root these tests set it (tools/run-tests.sh does too)."""
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import (RRCTL, Mount, file_digest, fsck, make_image, pattern, require_root,
                      wait_for)

pytestmark = pytest.mark.rrfuse_only

PARAM = "/sys/module/fuse/parameters/enable_uring"


def set_enable_uring(on):
    with open(PARAM, "w") as f:
        f.write("Y" if on else "N")


@pytest.fixture
def uring():
    """enable_uring on for the test (left on: CI sets it for a whole pass)."""
    require_root("setting fuse's enable_uring")
    if not os.path.exists(PARAM):
        pytest.skip("kernel without FUSE over io_uring (CONFIG_FUSE_IO_URING, Linux 6.14)")
    set_enable_uring(True)


def stats(m):
    return subprocess.run([RRCTL, m.mnt, "-s"], capture_output=True, text=True, check=True).stdout


def kept_on_dev_fuse(out):
    """The requests the kernel sends over /dev/fuse even with the ring: INIT,
    FORGETs and their batches, INTERRUPTs (rrctl -s's requests line)."""
    line = [l for l in out.splitlines() if l.startswith("requests:")][0]
    return sum(int(n) for n in re.findall(r", (?:init|forget|batch_forget|interrupt) (\d+)", line))


def transport(m, out=None):
    """rrctl -s's transport line: (name, entries, wanted, queues, over ring, over /dev/fuse)."""
    out = out or stats(m)
    line = [l for l in out.splitlines() if l.startswith("transport:")]
    assert len(line) == 1, out
    r = re.match(r"transport: io_uring, (\d+) of (\d+) entries on (\d+) queues; "
                 r"(\d+) requests over io_uring, (\d+) over /dev/fuse$", line[0])
    if r:
        return ("io_uring",) + tuple(int(x) for x in r.groups())
    r = re.match(r"transport: /dev/fuse; (\d+) requests over /dev/fuse$", line[0])
    assert r, line[0]
    return ("/dev/fuse", 0, 0, 0, 0, int(r.group(1)))


def ring_ready(m):
    """Every entry registered: the kernel then queues requests on the ring."""
    t = transport(m)
    return t[0] == "io_uring" and t[1] == t[2] and t[2] >= t[3] >= 1


def small_files(mnt, n, tag=""):
    """n files of 1-9 KiB in 4 directories, their contents."""
    want = {}
    for d in range(4):
        os.makedirs(os.path.join(mnt, "d%d" % d), exist_ok=True)
    for i in range(n):
        rel = os.path.join("d%d" % (i % 4), "%sf%04d" % (tag, i))
        data = pattern(i, 1024 * (1 + i % 9))
        with open(os.path.join(mnt, rel), "wb") as f:
            f.write(data)
        want[rel] = data
    return want


@pytest.mark.opts("io_uring")
def test_requests_go_over_the_ring(uring, fs):
    wait_for(lambda: ring_ready(fs), timeout=10)
    out = stats(fs)
    before, kept_before = transport(fs, out), kept_on_dev_fuse(out)
    want = small_files(fs.mnt, 300)
    big = pattern(7, (8 << 20) + 123)
    with open(fs.path("big"), "wb") as f:
        f.write(big)
        os.fsync(f.fileno())
    os.rename(fs.path("d0", "f0000"), fs.path("d1", "renamed"))
    want[os.path.join("d1", "renamed")] = want.pop(os.path.join("d0", "f0000"))
    for i in range(1, 300, 10):
        rel = os.path.join("d%d" % (i % 4), "f%04d" % i)
        os.unlink(fs.path(rel))
        del want[rel]
    os.setxattr(fs.path("big"), "user.k", b"v" * 300)
    subprocess.run(["stat", "-c", "%w", fs.path("big")], check=True, capture_output=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    for rel, data in want.items():
        with open(fs.path(rel), "rb") as f:
            assert f.read() == data, rel
    with open(fs.path("big"), "rb") as f:
        assert f.read() == big
    assert os.getxattr(fs.path("big"), "user.k") == b"v" * 300
    out = stats(fs)
    after = transport(fs, out)
    ring = after[4] - before[4]
    dev = after[5] - before[5]
    # Each of the 300 creates alone is a CREATE, a WRITE (at close) and a RELEASE.
    assert ring >= 3 * 300, (before, after)
    # What stays on /dev/fuse: FORGETs (and batches of them) only.
    assert dev == kept_on_dev_fuse(out) - kept_before, out
    assert "io_uring:" not in fs.daemon_log, fs.daemon_log


# What rrctl -s itself asks, on the mount's root: not counted.
RRCTL_OWN = {"opendir", "ioctl", "releasedir"}


def request_counts(m):
    """rrctl -s's requests line: {kind: count}."""
    line = [l for l in stats(m).splitlines() if l.startswith("requests:")][0]
    return {k: int(v) for k, v in re.findall(r"([a-z_]+) (\d+)", line)}


def small_file_requests(m, n=200):
    """The requests of n small files made, written (two write()s each) and
    closed, then removed, through a directory descriptor so that no path
    walk revalidates the directory: the kernel's least for each, as W5
    (rrbench) pays it; more than that is a round trip rrfuse should not
    cause."""
    os.mkdir(m.path("d"))
    dfd = os.open(m.path("d"), os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(2):	# the directory's own requests, and those of the first FLUSH (ENOSYS)
            fd = os.open("warm", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=dfd)
            os.close(fd)
        os.unlink("warm", dir_fd=dfd)
        wait_for(lambda: request_counts(m).get("release", 0) >= 2, timeout=10)
        before = request_counts(m)
        for i in range(n):
            fd = os.open("f%04d" % i, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=dfd)
            os.write(fd, b"a" * 2048)
            os.write(fd, b"b" * 2048)
            os.close(fd)
        # RELEASE is asynchronous: count once all have come.
        assert wait_for(lambda: request_counts(m).get("release", 0) - before.get("release", 0) >= n,
                        timeout=30)
        made = request_counts(m)
        for i in range(n):
            os.unlink("f%04d" % i, dir_fd=dfd)
        removed = request_counts(m)
    finally:
        os.close(dfd)
    diff = lambda a, b: {k: a.get(k, 0) - b.get(k, 0) for k in a if a.get(k, 0) != b.get(k, 0)}
    return diff(made, before), diff(removed, made)


def assert_small_file_budget(m, n=200):
    made, removed = small_file_requests(m, n)
    # A create: LOOKUP of the new name, CREATE, GETATTR of the parent (the
    # kernel drops its attributes on every change and default_permissions
    # needs its mode), GETXATTR security.capability at the first write only
    # (KILLPRIV_V2: not at every write), one WRITE at close (the writeback
    # cache), RELEASE.  No OPEN, no FLUSH (ENOSYS once), no GETATTR of the
    # new file (its attributes came with CREATE), no LISTXATTR, no ACCESS.
    assert made.get("create") == n and made.get("release") == n, made
    for kind in ("lookup", "getattr", "getxattr"):
        assert made.get(kind, 0) <= n, (kind, made)
    # At close the kernel writes back the times a write() changed (the
    # writeback cache keeps them): a SETATTR, when the clock ticked since
    # CREATE.  A page written back by the flusher meanwhile is a WRITE more.
    assert made.get("setattr", 0) <= n and made.get("write", 0) <= n + n // 10, made
    extra = set(made) - {"lookup", "create", "getattr", "getxattr", "write", "release", "setattr",
                         "forget", "batch_forget"} - RRCTL_OWN
    assert not extra, made
    # An unlink: UNLINK, SETATTR (the kernel writes the new ctime back at
    # once under the writeback cache), GETATTR of the parent, and a LOOKUP
    # only where the name's one-second entry ran out meanwhile.
    assert removed.get("unlink") == n, removed
    for kind in ("setattr", "getattr", "lookup"):
        assert removed.get(kind, 0) <= n, (kind, removed)
    extra = set(removed) - {"unlink", "setattr", "getattr", "lookup", "forget", "batch_forget"} - RRCTL_OWN
    assert not extra, removed


@pytest.mark.opts("io_uring")
def test_small_file_requests_over_the_ring(uring, fs):
    wait_for(lambda: ring_ready(fs), timeout=10)
    assert_small_file_budget(fs)
    assert transport(fs)[0] == "io_uring"


def test_small_file_requests_over_dev_fuse(fs):
    assert_small_file_budget(fs)


def test_refused_ring_serves_dev_fuse(uring):
    set_enable_uring(False)
    m = Mount(make_image(size="64M"), opts="io_uring")
    try:
        m.mount()
        want = small_files(m.mnt, 20)
        t = transport(m)
        assert t[0] == "/dev/fuse" and t[5] > 20, t
        for rel, data in want.items():
            with open(m.path(rel), "rb") as f:
                assert f.read() == data
        m.unmount()
    finally:
        set_enable_uring(True)
        m.cleanup()
    said = [l for l in m.daemon_log.splitlines() if "io_uring" in l]
    assert len(said) == 1 and "requests stay on /dev/fuse" in said[0], m.daemon_log
    rc, out = fsck(m.image)
    assert rc == 0, out


# Creates, writes, reads, renames and unlinks until it fails (ENOTCONN, ENOENT after the unmount).
TRAFFIC = r"""
import os, sys
mnt, k = sys.argv[1], int(sys.argv[2])
d = os.path.join(mnt, "t%d" % k)
os.makedirs(d, exist_ok=True)
i = 0
while True:
    p = os.path.join(d, "f%d" % (i % 200))
    with open(p, "wb") as f:
        f.write(bytes([i & 255]) * (4096 * (1 + i % 5)))
    with open(p, "rb") as f:
        f.read()
    if i % 7 == 0:
        os.rename(p, p + ".r")
        os.unlink(p + ".r")
    if i % 50 == 0:
        print(i, flush=True)
    i += 1
"""


def start_traffic(m, n=4):
    """n writers over the ring; returns once each has done some work."""
    procs = [subprocess.Popen([sys.executable, "-c", TRAFFIC, m.mnt, str(k)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL) for k in range(n)]
    for p in procs:
        assert p.stdout.readline(), "the writer failed at once"
    return procs


def traffic_ends(procs, timeout=30):
    """Every writer exits (an error: the mount is gone) within timeout: none hangs."""
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("a writer hung after the connection ended")
        p.stdout.close()


def daemon_exits(m, timeout=30):
    try:
        rc = m.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        m.proc.kill()
        pytest.fail("the daemon did not exit: a ring thread hung\n" + m.daemon_log)
    m.proc = None
    return rc


def replayed_and_clean(image):
    """rrfuse replays what the journal holds and unmounts; e2fsck -fn then passes."""
    m = Mount(image)
    try:
        m.mount()
        m.unmount()
    finally:
        m.cleanup()
    rc, out = fsck(image)
    assert rc == 0, out


def ring_mount():
    m = Mount(make_image(size="256M"), opts="io_uring")
    m.mount()
    wait_for(lambda: ring_ready(m), timeout=10)
    return m


def test_unmount_during_ring_traffic(uring):
    m = ring_mount()
    try:
        procs = start_traffic(m)
        time.sleep(0.5)
        # Lazy: the writers' open files keep the superblock until they fail.
        subprocess.run(["fusermount3", "-uz", m.mnt], check=True)
        m.mounted = False
        traffic_ends(procs)
        assert daemon_exits(m) == 0, m.daemon_log
    finally:
        m.cleanup()
    rc, out = fsck(m.image)
    assert rc == 0, out


def test_abort_during_ring_traffic(uring):
    m = ring_mount()
    try:
        procs = start_traffic(m)
        time.sleep(0.5)
        major, minor = (int(x) for x in m._conn.split(":"))
        conn = "/sys/fs/fuse/connections/%d" % ((major << 20) | minor)
        if not os.path.exists(conn):
            subprocess.run(["mount", "-t", "fusectl", "none", "/sys/fs/fuse/connections"])
        with open(os.path.join(conn, "abort"), "w") as f:
            f.write("1")
        traffic_ends(procs)
        daemon_exits(m)
        subprocess.run(["fusermount3", "-uz", m.mnt])
        m.mounted = False
    finally:
        m.cleanup()
    replayed_and_clean(m.image)


def test_sigkill_during_ring_traffic(uring):
    m = ring_mount()
    try:
        procs = start_traffic(m)
        time.sleep(0.5)
        m.proc.send_signal(signal.SIGKILL)
        assert daemon_exits(m) == -signal.SIGKILL
        traffic_ends(procs)
        subprocess.run(["fusermount3", "-uz", m.mnt])
        m.mounted = False
    finally:
        m.cleanup()
    replayed_and_clean(m.image)
