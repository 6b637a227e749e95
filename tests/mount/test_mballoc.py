"""The mballoc engine through mounts.

* The seed's interleaved-streams workload (two concurrent ``dd bs=128K
  oflag=direct`` writers, 384 MiB each, in one directory of a 2 GiB image)
  leaves no file more extents than its preallocation windows under the
  regular policy, and under rralloc no more than the seed's 8 MiB extents;
  side by side with the kernel's (whose counts move with the machine's
  load) only on request, RRFUSE_TIMING=1.
* One writer alternating 128 KiB O_DIRECT writes between two files gets
  the kernel's layout block for block: preallocation windows of 32, 32,
  64 ... 1024 blocks, then 2048 (8 MiB) each, the two files' windows side
  by side.  ``max_prealloc_kb=32768`` makes those windows 8192 blocks and
  cuts the files' leaf extents at least 2.5x.
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
    fds = [os.open(os.path.join(mnt, n), os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
           for n in ("a", "b")]
    try:
        for i in range(COUNT):
            for fd in fds:
                assert os.pwrite(fd, buf, i * CHUNK) == CHUNK
        for fd in fds:
            os.fsync(fd)
    finally:
        for fd in fds:
            os.close(fd)


def extents(workload, opts="", kernel=False):
    """The leaf extents of a and b after workload on a fresh 2 GiB image."""
    image = make_image(size="2G")
    try:
        run_mounted(image, workload, opts=opts, kernel=kernel)
        assert os.path.getsize(image) >= 2 * COUNT * CHUNK
        return [leaf_extents(image, n) for n in ("a", "b")]
    finally:
        subprocess.run(["rm", "-rf", os.path.dirname(image)])


def layout(workload, opts="", kernel=False):
    return [len(e) for e in extents(workload, opts, kernel)]


def median(v):
    return sorted(v)[len(v) // 2]


def switches(files):
    """How often the file changes from one extent to the next in physical order."""
    order = sorted((p, k) for k, ex in enumerate(files) for (_, p, _) in ex)
    return sum(1 for x, y in zip(order, order[1:]) if x[1] != y[1])


def windows(max_kb):
    """(logical start, length) of the windows one stream of 128 KiB writes gets
    (ext4_mb_normalize_request): the file's size rounded up to 16 KiB .. 1 MiB
    from block 0, 2 MiB and then 4 MiB aligned to their size while it is under
    4 and 8 MiB, then max_kb on 8 MiB boundaries; each starts where the window
    before it ends."""
    out, pos, end = [], 0, COUNT * CHUNK // 4096
    while pos < end:
        size = (pos + CHUNK // 4096) * 4096
        if size <= MIB:
            start, n = 0, max(4, (1 << (size - 1).bit_length()) >> 12)
        elif size <= 4 * MIB:
            start, n = pos & ~511, 512
        elif size <= 8 * MIB:
            start, n = pos & ~1023, 1024
        else:
            start, n = pos & ~2047, max_kb // 4
        n = min(start + n, end) - pos
        out.append((pos, n))
        pos += n
    return out


def assert_side_by_side(files, max_kb):
    """Each file has one extent per window, and the two files' windows alternate
    in one region: a's, then b's, then a's next ..."""
    want = windows(max_kb)
    for ex in files:
        assert [(lb, n) for (lb, _, n) in ex] == want, (ex, want)
    order = sorted((p, k, n) for k, ex in enumerate(files) for (_, p, n) in ex)
    assert [k for (_, k, _) in order] == [0, 1] * len(want), order
    gaps = [y[0] - x[0] - x[2] for x, y in zip(order, order[1:])]
    # Only what the groups hold of their own (backup superblocks) may sit between them.
    assert sum(gaps) < 32768, gaps


def test_interleaved_streams_like_kernel():
    """Both policies: regular (the kernel's) and rralloc (issue 7 asks for this
    workload too).  Two dd processes write at rates that drift apart by chance,
    and a window whose goal the other stream has not taken yet joins the one
    before it: the kernel's own counts range from about 25 to 53 per file, with
    the machine's load.  So what is asserted holds whatever the timing: no
    file has more extents than its windows (each window one extent at most,
    split at most where a group's metadata cuts it), and rralloc no worse
    than the seed's 8 MiB extents.  The counts against the kernel's, which
    move with the load (under ASan with io_uring rrfuse's were 48 against the
    kernel's 34 once), are printed; RRFUSE_TIMING=1 asserts them too, for a
    quiet machine (rrbench fidelity measures the like with repeats)."""
    runs = [extents(two_dd) for _ in range(3 if os.environ.get("RRFUSE_TIMING") else 1)]
    ours = [median([len(r[k]) for r in runs]) for k in (0, 1)]
    rr = layout(two_dd, opts="rralloc")
    print("interleaved dd, leaf extents per file: rrfuse %s (runs %s), rrfuse rralloc %s"
          % (ours, [[len(e) for e in r] for r in runs], rr))
    groups = 2 * COUNT * CHUNK // (128 * MIB) + 2
    for r in runs:
        assert max(len(e) for e in r) <= len(windows(8192)) + groups, r
    # rralloc places a stream whose goal is taken by first fit after it, as the
    # patch does: the two streams alternate windows, at worst the seed's 8 MiB
    # extents.
    assert max(rr) <= COUNT * CHUNK // (8 * MIB) + 8, rr
    if not os.environ.get("RRFUSE_TIMING"):
        return
    for r in runs:
        assert switches(r) >= min(len(e) for e in r) // 2, r
    if loop_works():
        kruns = [layout(two_dd, kernel=True) for _ in range(3)]
        print("interleaved dd, leaf extents per file: kernel runs %s" % kruns)
    else:
        # The kernel's spread on the machine that wrote this (48 windows and the ramp's 7, less merges).
        kruns = [[25, 25], [53, 53]]
    lo = min(min(r) for r in kruns)
    hi = max(max(r) for r in kruns)
    # Within the kernel's own spread, give or take 25 %: its merges come and go
    # with the machine's load, and both medians can land on a lucky run.
    assert all(0.75 * lo - 2 <= o <= 1.25 * hi + 2 for o in ours), (ours, kruns)


def test_alternating_streams_match_kernel():
    """No timing in it: one writer alternates between the files, so the kernel's
    layout is exact, and rrfuse's must be the same block for block."""
    ours = extents(alternate)
    assert_side_by_side(ours, 8192)
    if loop_works():
        assert ours == extents(alternate, kernel=True)


def test_max_prealloc_kb_cuts_extents():
    default = extents(alternate)
    big = extents(alternate, opts="max_prealloc_kb=32768")
    print("alternating writer, leaf extents per file: default %s, 32 MiB %s"
          % ([len(e) for e in default], [len(e) for e in big]))
    assert_side_by_side(default, 8192)
    assert_side_by_side(big, 32768)
    assert sum(map(len, default)) >= 2.5 * sum(map(len, big))


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
