"""Running out of space and inodes through the mount.

rrfuse uses the kernel's FUSE writeback cache, so ENOSPC from a data write
may surface at write(), fsync() or close() (POSIX allows all three).  What
must hold whatever the stage: a file whose fsync() and close() both
succeeded reads back intact, the filesystem really fills up to what statvfs
promised (and not beyond: the root reserve, mke2fs -m, is kept back from
unprivileged openers, the metadata reserve, 2 % of the blocks but at most
4096, from everybody's data), freed space and inodes come back, and the
image stays e2fsck-clean (the fs fixture checks that at teardown).

Bounds are derived from statvfs taken before writing:
  f_bavail            what an unprivileged user may fill with data
  f_bavail + r_blocks what root may fill (= f_bfree - metadata reserve)
"""
import errno
import hashlib
import os
import random
import re
import subprocess
import sys
import threading
import time

import pytest

from conftest import pattern, syncfs, wait_for, fallocate

BS = 4096
KiB = 1024
MiB = 1024 * KiB
NWRITERS = 4
MAX_FILE = 8 * MiB
CHUNK = 1 * MiB



# ----------------------------------------------------------------- helpers

def reserved_blocks(image):
    """The superblock's root reserve (mke2fs -m), read from the image."""
    r = subprocess.run(["dumpe2fs", "-h", image], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    assert r.returncode == 0
    for line in r.stdout.splitlines():
        k, _, v = line.partition(":")
        if k.strip() == "Reserved block count":
            return int(v)
    raise AssertionError("no reserved block count in dumpe2fs -h output")


def _syncfs_quiet(path):
    try:
        syncfs(path)
    except OSError as e:
        # a writeback error already reported to a writer may be reported
        # once more to syncfs
        assert e.errno == errno.ENOSPC, e


def settled_statvfs(path, timeout=10.0):
    """statvfs once the counters stopped moving (FUSE sends RELEASE and
    FORGET asynchronously, so freed space may show up a little late)."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        _syncfs_quiet(path)
        sv = os.statvfs(path)
        cur = (sv.f_bfree, sv.f_bavail, sv.f_ffree)
        if cur == last or time.monotonic() > deadline:
            return sv
        last = cur
        time.sleep(0.1)


def digest(data):
    return hashlib.sha256(data).hexdigest()


def read_digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(CHUNK)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def write_file(path, data):
    """Create path and write data + fsync + close.

    Returns None when everything succeeded, else (stage, errno) of the first
    failure; the stage is "open", "write", "fsync" or "close".
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as e:
        return ("open", e.errno)
    err = None
    stage = "write"
    try:
        mv = memoryview(data)
        off = 0
        while off < len(data):
            n = os.write(fd, mv[off:off + CHUNK])
            assert n > 0, "write returned %d" % n
            off += n
        stage = "fsync"
        os.fsync(fd)
    except OSError as e:
        err = (stage, e.errno)
    try:
        os.close(fd)
    except OSError as e:
        if err is None:
            err = ("close", e.errno)
    return err


def _fill_worker(base, wid, out):
    """Write files of mixed sizes (4 KiB .. 8 MiB, many not block aligned)
    with fsync until even 4 KiB files fail three times in a row.  A failed
    file is deleted and the writer goes on with smaller files, so the
    filesystem really fills up.  out gets (ok files, problems)."""
    rnd = random.Random("writer-%d" % wid)
    d = os.path.join(base, "w%d" % wid)
    os.mkdir(d)
    ok, problems = [], []
    cap = MAX_FILE
    small_failures = 0
    attempts = 0
    written = 0
    i = 0
    while small_failures < 3:
        attempts += 1
        if attempts > 5000 or written > 4 * 64 * MiB:
            problems.append("writer %d: no ENOSPC after %d files, %d bytes"
                            % (wid, attempts, written))
            break
        if cap <= 4 * KiB:
            size = 4 * KiB
        else:
            # log-uniform between 4 KiB and cap; half of them unaligned
            size = int(4 * KiB * 2 ** rnd.uniform(0, (cap // (4 * KiB))
                                                  .bit_length() - 1))
            size = max(4 * KiB, min(cap, size))
            if rnd.random() < 0.5 and size > 4 * KiB:
                size -= rnd.randrange(1, 4 * KiB)
        seed = "w%d-%d" % (wid, i)
        name = os.path.join(d, "f%05d" % i)
        i += 1
        data = pattern(seed, size)
        err = write_file(name, data)
        written += size
        if err is None:
            ok.append((name, size, digest(data)))
            small_failures = 0
            continue
        stage, eno = err
        if eno != errno.ENOSPC:
            problems.append("%s: %s failed with %s, expected ENOSPC"
                            % (name, stage, errno.errorcode.get(eno, eno)))
        if stage == "open":
            if os.path.lexists(name):
                problems.append("%s: create failed (%s) but the name exists"
                                % (name, errno.errorcode.get(eno, eno)))
        else:
            try:
                os.unlink(name)
            except OSError as e:
                problems.append("unlink %s after ENOSPC: %s" % (name, e))
        if size <= 4 * KiB:
            small_failures += 1
            time.sleep(0.05)    # let released space of failed files return
        cap = max(4 * KiB, size // 4)
    out[wid] = (ok, problems)


def fill_concurrently(base, nwriters=NWRITERS):
    """Run nwriters threads of _fill_worker under base; return
    (ok files [(path, size, digest)], problems)."""
    out = {}
    threads = [threading.Thread(target=_fill_worker, args=(base, w, out))
               for w in range(nwriters)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    ok, problems = [], []
    for w in range(nwriters):
        if w not in out:
            problems.append("writer %d died or hung" % w)
            continue
        ok += out[w][0]
        problems += out[w][1]
    return ok, problems


def verify_files(files):
    bad = []
    for path, size, dg in files:
        try:
            st = os.stat(path)
            if st.st_size != size:
                bad.append("%s: size %d, expected %d" % (path, st.st_size, size))
            elif read_digest(path) != dg:
                bad.append("%s: content differs" % path)
        except OSError as e:
            bad.append("%s: %s" % (path, e))
    return bad


def remove_tree(top):
    for dirpath, dirnames, filenames in os.walk(top, topdown=False):
        for n in filenames:
            os.unlink(os.path.join(dirpath, n))
        for n in dirnames:
            os.rmdir(os.path.join(dirpath, n))


def space_comes_back(mnt, sv0, tolerance=4):
    """After everything written was deleted, f_bfree and f_ffree return to
    their values before (f_bfree within a few blocks)."""
    def back():
        _syncfs_quiet(mnt)
        sv = os.statvfs(mnt)
        return (abs(sv.f_bfree - sv0.f_bfree) <= tolerance
                and sv.f_ffree == sv0.f_ffree)
    wait_for(back, timeout=10)
    sv = settled_statvfs(mnt)
    assert abs(sv.f_bfree - sv0.f_bfree) <= tolerance, \
        ("space not given back: f_bfree %d before, %d after deleting all"
         % (sv0.f_bfree, sv.f_bfree))
    assert sv.f_ffree == sv0.f_ffree, \
        ("inodes not given back: f_ffree %d before, %d after deleting all"
         % (sv0.f_ffree, sv.f_ffree))
    return sv


def check_fill_bound(total, bound_blocks, what):
    """total bytes completed vs the statvfs bound (blocks) for this user:
    at most the bound (plus slack for metadata), at least 90 % of it."""
    slack = bound_blocks // 100 + 64
    assert total <= (bound_blocks + slack) * BS, \
        ("%s wrote %d bytes (%d blocks), more than the %d blocks statvfs "
         "allowed (+%d slack)" % (what, total, -(-total // BS), bound_blocks,
                                   slack))
    assert total >= 0.9 * bound_blocks * BS, \
        ("%s got ENOSPC after only %d bytes (%d blocks) of %d available "
         "blocks (< 90 %%)" % (what, total, -(-total // BS), bound_blocks))


# ------------------------------------------------------------------- tests

@pytest.mark.parametrize("mkfs_args", [
    pytest.param(["-m", "5"], id="m5"),
    pytest.param(["-m", "0"], id="m0"),
])
def test_concurrent_writers_fill_as_root(mount_factory, mkfs_args):
    m = mount_factory(size="64M", mkfs_args=mkfs_args)
    resv = reserved_blocks(m.image)
    assert (resv > 0) == (mkfs_args[1] != "0")
    sv0 = settled_statvfs(m.mnt)
    assert sv0.f_frsize == BS
    meta = sv0.f_bfree - sv0.f_bavail - resv      # metadata reserve
    assert 0 <= meta <= 4096
    root_avail = sv0.f_bavail + resv              # = f_bfree - metadata rsv

    base = m.path("fill")
    os.mkdir(base)
    files, problems = fill_concurrently(base)
    assert not problems, "\n".join(problems)
    total = sum(size for _, size, _ in files)
    check_fill_bound(total, root_avail, "root")

    sv1 = settled_statvfs(m.mnt)
    # the filesystem is full for root: what is left is the metadata
    # reserve, which data may not use
    assert sv1.f_bavail <= 8, (sv0, sv1)
    assert sv1.f_bfree <= meta + 64, \
        ("root stopped with %d blocks free, metadata reserve %d"
         % (sv1.f_bfree, meta))
    assert sv1.f_bfree + 64 >= meta, \
        ("data ate the metadata reserve: %d blocks free, reserve %d"
         % (sv1.f_bfree, meta))

    # every completed file is intact, also from the image (not only from
    # the page cache)
    bad = verify_files(files)
    assert not bad, "\n".join(bad[:20])
    m.remount()
    bad = verify_files(files)
    assert not bad, "after remount:\n" + "\n".join(bad[:20])

    remove_tree(base)
    os.rmdir(base)
    space_comes_back(m.mnt, sv0)


@pytest.mark.image(size="64M", mkfs_args=["-m", "5"])
@pytest.mark.opts("allow_other,default_permissions")
def test_unprivileged_writers_stop_at_root_reserve(fs, as_user):
    resv = reserved_blocks(fs.image)
    assert resv > 0
    pub = fs.path("pub")
    os.mkdir(pub)
    os.chmod(pub, 0o1777)
    sv0 = settled_statvfs(fs.mnt)
    user_avail = sv0.f_bavail
    meta = sv0.f_bfree - sv0.f_bavail - resv
    assert 0 <= meta <= 4096

    files, problems = as_user(lambda: fill_concurrently(pub))
    assert not problems, "\n".join(problems)
    total = sum(size for _, size, _ in files)
    check_fill_bound(total, user_avail, "uid 65534")

    sv1 = settled_statvfs(fs.mnt)
    assert sv1.f_bavail <= 8, \
        "user stopped with f_bavail = %d blocks" % sv1.f_bavail
    assert sv1.f_bfree >= resv, \
        ("an unprivileged writer used the root reserve: f_bfree %d < "
         "reserved %d" % (sv1.f_bfree, resv))

    # the user still cannot write even one block ...
    err = as_user(lambda: write_file(os.path.join(pub, "one-more"),
                                     pattern("one-more", BS)))
    assert err is not None and err[1] == errno.ENOSPC, err
    if os.path.exists(os.path.join(pub, "one-more")):
        os.unlink(os.path.join(pub, "one-more"))

    # ... but root can, from the reserve
    rootfile = fs.path("root-file")
    data = pattern("root-file", 5 * BS + 123)
    assert write_file(rootfile, data) is None
    sv2 = settled_statvfs(fs.mnt)
    assert sv2.f_bfree <= sv1.f_bfree - 6
    assert read_digest(rootfile) == digest(data)

    bad = verify_files(files)
    assert not bad, "\n".join(bad[:20])
    fs.remount()
    bad = verify_files(files + [(rootfile, len(data), digest(data))])
    assert not bad, "after remount:\n" + "\n".join(bad[:20])

    os.unlink(rootfile)
    remove_tree(pub)
    space_comes_back(fs.mnt, sv0)


@pytest.mark.image(size="64M", mkfs_args=["-N", "256"])
def test_inodes_run_out_before_blocks(fs):
    sv0 = settled_statvfs(fs.mnt)
    assert sv0.f_files <= 512
    d = fs.path("many")
    os.mkdir(d)
    made = []
    err = None
    for i in range(2 * sv0.f_files):
        name = os.path.join(d, "f%04d" % i)
        data = pattern(name, 100 + 37 * i)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as e:
            err = e
            break
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        made.append((name, len(data), digest(data)))
    assert err is not None, "created %d files without ENOSPC" % len(made)
    assert err.errno == errno.ENOSPC, err
    failed = err.filename
    assert not os.path.lexists(failed), "failed create left a name behind"
    assert len(made) >= sv0.f_ffree - 2        # really ran out (dir = 1)
    sv1 = settled_statvfs(fs.mnt)
    assert sv1.f_ffree == 0
    assert sv1.f_favail == 0
    assert sv1.f_bavail > 1000                 # blocks are plentiful

    # every inode-allocating operation fails cleanly ...
    for op, args in [(os.mkdir, (os.path.join(d, "dir"),)),
                     (os.symlink, ("target", os.path.join(d, "sym"))),
                     (os.symlink, ("t" * 200, os.path.join(d, "slowsym"))),
                     (os.mkfifo, (os.path.join(d, "fifo"),)),
                     (os.open, (failed, os.O_WRONLY | os.O_CREAT, 0o644))]:
        with pytest.raises(OSError) as ei:
            op(*args)
        assert ei.value.errno == errno.ENOSPC, (op, ei.value)
        assert not os.path.lexists(args[-1] if op is os.symlink else args[0])
    # ... while operations that need no inode still work
    os.link(made[0][0], os.path.join(d, "hardlink"))
    os.rename(made[1][0], os.path.join(d, "renamed"))
    made[1] = (os.path.join(d, "renamed"),) + made[1][1:]
    os.unlink(os.path.join(d, "hardlink"))
    sv2 = settled_statvfs(fs.mnt)
    assert sv2.f_ffree == 0
    assert sorted(os.listdir(d)) == sorted(os.path.basename(p)
                                          for p, _, _ in made)

    bad = verify_files(made)
    assert not bad, "\n".join(bad[:20])
    fs.remount()
    bad = verify_files(made)
    assert not bad, "after remount:\n" + "\n".join(bad[:20])

    # one inode back: one create works, and the next fails again
    os.unlink(made.pop()[0])
    assert wait_for(lambda: os.statvfs(fs.mnt).f_ffree == 1)
    assert write_file(failed, b"x" * 10) is None
    with pytest.raises(OSError) as ei:
        os.mkdir(os.path.join(d, "dir"))
    assert ei.value.errno == errno.ENOSPC
    os.unlink(failed)

    remove_tree(d)
    os.rmdir(d)
    space_comes_back(fs.mnt, sv0)
    # and the inodes are usable again
    d2 = fs.path("again")
    os.mkdir(d2)
    for i in range(50):
        assert write_file(os.path.join(d2, "g%d" % i), b"y" * i) is None


@pytest.mark.rrfuse_only      # kernel ext4 may allocate part of the range
@pytest.mark.image(size="64M", mkfs_args=["-m", "5"])
def test_fallocate_enospc(fs):
    resv = reserved_blocks(fs.image)
    p = fs.path("f")
    head = pattern("head", 10000)
    assert write_file(p, head) is None
    sv0 = settled_statvfs(fs.mnt)
    root_avail = sv0.f_bavail + resv          # f_bfree - metadata reserve
    fd = os.open(p, os.O_RDWR)
    try:
        st0 = os.fstat(fd)

        def unchanged(why):
            sv = settled_statvfs(fs.mnt)
            st = os.fstat(fd)
            assert st.st_size == st0.st_size, \
                "%s: size %d -> %d" % (why, st0.st_size, st.st_size)
            assert st.st_blocks == st0.st_blocks, \
                ("%s: st_blocks %d -> %d (partial allocation left behind)"
                 % (why, st0.st_blocks, st.st_blocks))
            assert sv.f_bfree == sv0.f_bfree, \
                ("%s: f_bfree %d -> %d (partial allocation left behind)"
                 % (why, sv0.f_bfree, sv.f_bfree))
            assert os.pread(fd, 20000, 0) == head, why
            assert os.lseek(fd, 0, os.SEEK_HOLE) == len(head), why

        cases = [
            ("more than all free blocks", 0, (sv0.f_bfree + 256) * BS),
            ("more than all free blocks, past EOF", 1 * MiB,
             (sv0.f_bfree + 256) * BS),
            ("free blocks + 1 (metadata reserve is not for data)", 0,
             (sv0.f_bfree + 1) * BS),
            ("root's share + 1 block", 3 * BS, (root_avail + 1) * BS),
        ]
        for why, off, length in cases:
            with pytest.raises(OSError) as ei:
                fallocate(fd, 0, off, length)
            assert ei.value.errno == errno.ENOSPC, (why, ei.value)
            unchanged(why)

        # what statvfs promises root can be preallocated (minus a little
        # for the extent tree) ...
        big = (root_avail - 32) * BS
        fallocate(fd, 0, 0, big)
        st1 = os.fstat(fd)
        assert st1.st_size == big
        assert os.pread(fd, len(head), 0) == head
        assert os.pread(fd, 8192, big - 8192) == bytes(8192)
        sv1 = settled_statvfs(fs.mnt)
        assert sv1.f_bfree <= sv0.f_bfree - (root_avail - 32 - 3)
        # ... and then the fs is full for data: all-or-nothing again
        with pytest.raises(OSError) as ei:
            fallocate(fd, 0, big, 64 * BS)
        assert ei.value.errno == errno.ENOSPC
        st2 = os.fstat(fd)
        assert (st2.st_size, st2.st_blocks) == (st1.st_size, st1.st_blocks)
        assert settled_statvfs(fs.mnt).f_bfree == sv1.f_bfree
        err = write_file(fs.path("other"), pattern("other", 256 * BS))
        assert err is not None and err[1] == errno.ENOSPC, err
        if os.path.exists(fs.path("other")):
            os.unlink(fs.path("other"))

        # writing into the preallocated range must not fail for lack of
        # space even though the fs is full: scattered 64 KiB pieces split
        # the unwritten extents (the extent tree may need new blocks)
        pieces = {}
        for k, off in enumerate(range(64 * KiB, big - 64 * KiB, 1 * MiB + 4 * KiB)):
            pieces[off] = pattern("piece%d" % k, 64 * KiB)
            os.pwrite(fd, pieces[off], off)
        os.fsync(fd)
    finally:
        os.close(fd)

    fs.remount()
    with open(p, "rb") as f:
        assert os.fstat(f.fileno()).st_size == big
        assert f.read(len(head)) == head
        for off, data in pieces.items():
            f.seek(off)
            assert f.read(len(data)) == data, "piece at %d" % off
            assert f.read(4096) == bytes(4096), "after piece at %d" % off
    os.unlink(p)
    # the file's 3 blocks from before come back too
    assert wait_for(lambda: settled_statvfs(fs.mnt).f_bfree >= sv0.f_bfree + 3)


# ------------------------------------------------ mixed workload to ENOSPC

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "stress"))
import rrmix  # noqa: E402  (tests/stress/rrmix.py, also run by tools/soak.sh)


@pytest.mark.rrfuse_only
@pytest.mark.parametrize("opts", ["", "nodelalloc", "no_writeback_cache"])
@pytest.mark.parametrize("seed", [1, 2])
def test_mixed_fallocate_workload_at_enospc_leaves_a_clean_image(mount_factory, opts, seed):
    """An operation that fails with ENOSPC leaves the filesystem as
    consistent as one that succeeds: every block it took accounted or given
    back (before: "i_blocks is 20784, should be 26576"), and nothing left on
    the orphan list by a clean unmount (before: "corrupted orphan linked
    list").  The teardown unmounts and runs e2fsck -fn."""
    m = mount_factory(size="64M", opts=opts)
    errs = rrmix.run(m.mnt, seed=seed)
    assert errs.get(errno.ENOSPC, 0) > 0, "the workload never filled the filesystem: %r" % errs
    assert set(errs) <= {errno.ENOSPC, errno.ENOENT, errno.EFBIG}, errs
    m.unmount()
    out = subprocess.run(["dumpe2fs", "-h", m.image], capture_output=True, text=True).stdout
    assert "First orphan inode" not in out, out
    assert re.search(r"^Filesystem state:\s+clean$", out, re.M), out


@pytest.mark.rrfuse_only
@pytest.mark.parametrize("opts", ["", "nodelalloc"])
def test_writer_that_never_stops_hears_enospc_at_write(mount_factory, opts):
    """With the writeback cache, write() only fills the kernel's cache;
    before, `dd if=/dev/zero of=MNT/f bs=1M` on a full image ran on (250 GB
    in 14 minutes, dropped) with stat showing that size.  Now a refused
    write-back fails the writer's next write() (GETATTR with its file), and
    the image keeps the size the kernel showed."""
    m = mount_factory(size="96M", opts=opts)
    r = subprocess.run(["dd", "if=/dev/zero", "of=" + m.path("f"), "bs=1M"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert "No space left on device" in r.stderr, r.stderr
    shown = os.stat(m.path("f")).st_size
    assert shown < 2 * 96 * MiB, shown
    m.unmount()
    out = subprocess.run(["debugfs", "-R", "stat /f", m.image], capture_output=True,
                         text=True).stdout
    assert re.search(r"Size: (\d+)", out).group(1) == str(shown), out
    m.mount()


def test_largest_file_ends_where_ext4s_does(fs):
    """The last block ext4 allows ends at (2^32 - 1) blocks; its i_size passes
    e2fsck (the teardown) and the kernel reads it back.  A truncate one byte
    further fails with EFBIG, as on ext4."""
    blksz = os.statvfs(fs.mnt).f_bsize
    limit = ((1 << 32) - 1) * blksz
    fd = os.open(fs.path("edge"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        assert os.pwrite(fd, b"e" * blksz, limit - blksz) == blksz
        os.fsync(fd)
        assert os.fstat(fd).st_size == limit
        with pytest.raises(OSError) as e:
            os.ftruncate(fd, limit + 1)
        assert e.value.errno == errno.EFBIG
    finally:
        os.close(fd)
    assert os.path.getsize(fs.path("edge")) == limit


@pytest.mark.rrfuse_only
def test_write_past_the_largest_file_fails_the_next_write(fs):
    """ext4's largest file is 2^32 - 1 blocks.  FUSE gives no way to tell the
    kernel that limit (its s_maxbytes is fixed), so with the writeback cache
    a write() past it lands in the page cache and fails only when written
    back (fstests generic/285's huge-file cases).  The write-back error
    reaches fsync and then the writer's next write(), never the image.
    The kernel keeps the size it gave the file (under the writeback cache
    it trusts its own i_size) until the file is truncated."""
    blksz = os.statvfs(fs.mnt).f_bsize
    limit = ((1 << 32) - 1) * blksz
    fd = os.open(fs.path("huge"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, b"a" * 4096, 0)
        try:
            os.pwrite(fd, b"b" * 4096, limit + (1 << 20))
        except OSError as e:
            assert e.errno == errno.EFBIG
        else:
            with pytest.raises(OSError) as e:
                os.fsync(fd)
            assert e.value.errno == errno.EFBIG
            with pytest.raises(OSError) as e:
                os.pwrite(fd, b"c", 1)
            assert e.value.errno == errno.EFBIG
        os.pwrite(fd, b"d", 2)
        os.ftruncate(fd, 4096)
        os.fsync(fd)
        assert os.pread(fd, 4, 0) == b"aad" + b"a"
    finally:
        os.close(fd)
