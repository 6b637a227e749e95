"""The mballoc engine through mounts.

* The seed's interleaved-streams workload (two concurrent ``dd bs=128K
  oflag=direct`` writers, 384 MiB each, on a 2 GiB image) leaves files no
  more fragmented than the kernel's ext4 leaves them in the same test
  (when loop devices work), under the regular policy and under rralloc.
* ``max_prealloc_kb=32768`` cuts the leaf extents of physically interleaved
  files at least 2.5x.  The streams are made to interleave as in the seed:
  one writer alternates 128 KiB O_DIRECT writes between the two files,
  whose inode numbers (12 apart) share one stream-goal slot, so they take
  their preallocation windows from the same groups one after the other.
* 16 writer threads at once lose no data; mixed sizes to ENOSPC and back.

Every image ends with ``e2fsck -fn``; the suite's ``RRFUSE_OPTS=check``
also has the engine verify buddy == bitmap + preallocations after every
change (a mismatch aborts the daemon, which these tests notice).
"""

import mmap
import os
import random
import subprocess
import threading

import pytest

from conftest import (file_digest, leaf_extents, loop_works, make_image,
                      pattern, run_mounted)

pytestmark = pytest.mark.rrfuse_only

MIB = 1 << 20
CHUNK = 128 * 1024
COUNT = 3072                # 384 MiB per file, as the seed


def two_dd(mnt):
    procs = [subprocess.Popen(["dd", "if=/dev/zero", "of=" + os.path.join(mnt, n), "bs=128K",
                               "count=%d" % COUNT, "oflag=direct", "status=none"])
             for n in ("a", "b")]
    for p in procs:
        assert p.wait() == 0


def alternate(mnt):
    """One writer, 128 KiB O_DIRECT writes alternating between a and b."""
    buf = mmap.mmap(-1, CHUNK)          # page aligned, as O_DIRECT wants
    buf.write(b"\x5a" * CHUNK)
    fa = os.open(os.path.join(mnt, "a"), os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
    for i in range(11):                 # inode numbers 12 apart: the same stream slot
        open(os.path.join(mnt, "pad%d" % i), "w").close()
    fb = os.open(os.path.join(mnt, "b"), os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
    try:
        for i in range(COUNT):
            for fd in (fa, fb):
                assert os.pwrite(fd, buf, i * CHUNK) == CHUNK
        os.fsync(fa)
        os.fsync(fb)
    finally:
        os.close(fa)
        os.close(fb)


def layout(workload, opts="", kernel=False):
    image = make_image(size="2G")
    try:
        run_mounted(image, workload, opts=opts, kernel=kernel)
        assert os.path.getsize(image) >= 2 * COUNT * CHUNK
        return [len(leaf_extents(image, n)) for n in ("a", "b")]
    finally:
        subprocess.run(["rm", "-rf", os.path.dirname(image)])


def test_interleaved_streams_no_worse_than_kernel():
    """Both policies: regular (the kernel's) and rralloc (issue 7 asks for this workload too)."""
    ours = layout(two_dd)
    rr = layout(two_dd, opts="rralloc")
    print("interleaved dd, leaf extents per file: rrfuse %s, rrfuse rralloc %s" % (ours, rr))
    if not loop_works():
        # Without the kernel to compare with: no worse than the seed's 8 MiB extents.
        assert max(ours + rr) <= COUNT * CHUNK // (8 * MIB) + 8, (ours, rr)
        return
    kernel = layout(two_dd, kernel=True)
    print("interleaved dd, leaf extents per file: kernel %s" % kernel)
    assert sum(ours) <= sum(kernel), (ours, kernel)
    # rralloc places a stream whose goal is taken by first fit after it, as the
    # patch does: the two streams alternate windows, at worst the seed's 8 MiB
    # extents (the kernel gave 26 to 53 here, depending on the machine's load).
    assert max(rr) <= COUNT * CHUNK // (8 * MIB) + 8, rr


def test_max_prealloc_kb_cuts_extents():
    default = layout(alternate)
    big = layout(alternate, opts="max_prealloc_kb=32768")
    print("alternating writer, leaf extents per file: default %s, 32 MiB %s" % (default, big))
    # 8 MiB windows: at least 384/8 extents per file, less the ramp's merges.
    assert min(default) >= 40, default
    assert sum(default) >= 2.5 * sum(big), (default, big)


def _writer(root, k, sizes, errors):
    rnd = random.Random(k)
    try:
        for j, size in enumerate(sizes):
            data = pattern(k * 100 + j, size)
            path = os.path.join(root, "w%d_%d" % (k, j))
            with open(path, "wb") as f:
                pos = 0
                while pos < size:
                    n = rnd.choice((4096, 12288, 65536, 131072, 1 << 20))
                    f.write(data[pos:pos + n])
                    pos += n
            if j % 3 == 2:                  # some die young, freeing their blocks
                os.unlink(path)
    except Exception as e:                  # noqa: BLE001 - reported below
        errors.append((k, repr(e)))


@pytest.mark.image(size="1G")
def test_sixteen_writers(fs):
    rnd = random.Random(16)
    plan = [[rnd.choice((5000, 70000, 700000, 3 * MIB, 9 * MIB)) for _ in range(6)]
            for _ in range(16)]
    errors = []
    threads = [threading.Thread(target=_writer, args=(fs.mnt, k, plan[k], errors))
               for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for k in range(16):
        for j, size in enumerate(plan[k]):
            path = os.path.join(fs.mnt, "w%d_%d" % (k, j))
            if j % 3 == 2:
                assert not os.path.exists(path)
                continue
            assert os.path.getsize(path) == size
            with open(path, "rb") as f:
                assert f.read() == pattern(k * 100 + j, size), path


@pytest.mark.image(size="96M")
def test_mixed_sizes_to_enospc_and_back(fs):
    rnd = random.Random(5)
    kept = {}
    for rnd_pass in range(2):
        i = 0
        while True:
            size = rnd.choice((1000, 9000, 70000, 400000, 2 * MIB, 7 * MIB))
            path = os.path.join(fs.mnt, "p%d_%d" % (rnd_pass, i))
            data = pattern(rnd_pass * 10000 + i, size)
            try:
                with open(path, "wb") as f:
                    f.write(data)
            except OSError as e:
                assert e.errno == 28, e         # ENOSPC, nothing else
                if os.path.exists(path):
                    os.unlink(path)
                break
            kept[path] = file_digest(path)
            i += 1
        assert i > 5
        # Free every other file, and fill again.
        for n, path in enumerate(sorted(kept)):
            if n % 2:
                os.unlink(path)
                del kept[path]
    for path, digest in kept.items():
        assert file_digest(path) == digest, path
    # Growing a file in place after ENOSPC pressure still works once space is back.
    for path in list(kept)[: len(kept) // 2]:
        os.unlink(path)
    with open(os.path.join(fs.mnt, "tail"), "wb") as f:
        for i in range(64):
            f.write(pattern(i, 65536))
    assert os.path.getsize(os.path.join(fs.mnt, "tail")) == 64 * 65536


def test_truncate_and_rewrite_in_windows(fs):
    """Preallocated windows are dropped by truncate and punch; data stays right."""
    path = os.path.join(fs.mnt, "f")
    with open(path, "wb") as f:
        for i in range(40):
            f.write(pattern(i, 50000))
        f.flush()
        os.truncate(path, 300000)
        f.seek(0, 2)
        for i in range(40, 60):
            f.write(pattern(i, 50000))
    fd = os.open(path, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 5 * MIB, MIB)
    finally:
        os.close(fd)
    with open(path, "rb") as f:
        got = f.read()
    want = (b"".join(pattern(i, 50000) for i in range(40))[:300000] +
            b"".join(pattern(i, 50000) for i in range(40, 60)))
    assert got[: len(want)] == want


@pytest.mark.opts("max_prealloc_kb=100,mb_stats=1,mb_optimize_scan=0,mb_max_to_scan=5,"
                  "mb_min_to_scan=1,mb_stream_req=1,mb_order2_req=20,allocator=regular")
def test_tunables_accepted(fs):
    """Every tunable mounts with an unusual value (100 KiB clamps to 8 MiB) and still writes."""
    data = pattern(3, 3 * MIB + 5)
    with open(os.path.join(fs.mnt, "t"), "wb") as f:
        f.write(data)
    with open(os.path.join(fs.mnt, "t"), "rb") as f:
        assert f.read() == data


def _blocks(image, name):
    return {p + i for _, p, n in leaf_extents(image, name) for i in range(n)}


def test_first_free_after_mount_waits_for_its_commit(mount_factory):
    """The first blocks freed in a group after a mount: libext2fs frees them
    before the engine has loaded the group, which then loaded them free, so
    they could be taken again before the commit that freed them (the
    journal's rule: not written before that commit is on disk) and the
    engine reported them 'freed that were free (corrupt filesystem?)'.  Now
    they wait for their commit, and nothing is reported (the teardown fails
    on any such message)."""
    m = mount_factory(opts="commit=0", size="128M")
    os.mkdir(m.path("d"))
    with open(m.path("d", "a"), "wb") as f:
        f.write(b"a" * (4 * MIB))
    m.unmount()
    old = _blocks(m.image, "d/a") | _blocks(m.image, "d")
    assert len(old) == 1025
    m.mount()
    os.unlink(m.path("d", "a"))
    os.rmdir(m.path("d"))
    os.mkdir(m.path("e"))
    for i in range(8):
        with open(m.path("e", str(i)), "wb") as f:
            f.write(b"s" * 4096)
    with open(m.path("b"), "wb") as f:
        f.write(b"b" * (4 * MIB))
        f.flush()
        os.fsync(f.fileno())
    m.unmount()
    new = _blocks(m.image, "b") | _blocks(m.image, "e")
    for i in range(8):
        new |= _blocks(m.image, "e/%d" % i)
    assert len(new) == 1024 + 1 + 8
    assert not old & new, "%d blocks freed and reused in one commit" % len(old & new)
    m.mount()
