"""rrfuse writes the jbd2 journal (issue 16, second increment): every
commit is a transaction that the kernel, e2fsck and rrfuse replay.

The daemon is stopped at a named point of a commit with
RRFUSE_JOURNAL_CRASH (src/journal/writer.h): "commit:N" kills it once the
Nth transaction's commit block is durable and before any of its blocks is
written home, so the image holds a committed, un-checkpointed transaction,
as a power cut there would leave it.  Mounts use commit=600 so that only
the mount's own superblock update (the first transaction) and the test's
fsyncs make transactions, and N counts them.
"""

import hashlib
import os
import random
import re
import shutil
import subprocess
import sys
import time

import pytest

import conftest
from conftest import (Mount, fsck, kernel_check, kill_daemon, loop_works, make_image,
                      pattern, require_binary, require_fuse, require_root,
                      require_tools, snapshot)

pytestmark = pytest.mark.rrfuse_only

CRASH_ENV = "RRFUSE_JOURNAL_CRASH"
QUIET = "commit=600"                    # transactions only at the test's fsyncs

CSUM_V3 = []                            # mke2fs defaults: metadata_csum, 64bit
NO_CSUM = ["-O", "^metadata_csum,^64bit"]
ONE_K = ["-b", "1024"]
TINY = ["-b", "1024", "-J", "size=1"]   # 1024 journal blocks: a transaction holds ~1000


@pytest.fixture(autouse=True)
def _requirements():
    require_tools()
    require_binary()
    require_fuse()
    require_root("mounting")


def mount(image, opts=QUIET, crash=None):
    m = Mount(image, opts=opts)
    old = os.environ.pop(CRASH_ENV, None)
    if crash:
        os.environ[CRASH_ENV] = crash
    try:
        m.mount()
    finally:
        os.environ.pop(CRASH_ENV, None)
        if old is not None:
            os.environ[CRASH_ENV] = old
    return m


def crashed(m):
    """The daemon stopped itself at its crash point: clear the dead mount."""
    deadline = time.monotonic() + 10
    while m.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert m.proc.poll() is not None, "the daemon did not stop at its crash point"
    log = m.daemon_log
    kill_daemon(m)
    m.cleanup()
    assert "crash point" in log, log


def fsync_file(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def dumpe2fs(image, field):
    out = subprocess.run(["dumpe2fs", "-h", image], capture_output=True, text=True).stdout
    m = re.search(r"^%s:\s+(.*)$" % re.escape(field), out, re.M)
    return m.group(1).strip() if m else None


def features(image):
    return (dumpe2fs(image, "Filesystem features") or "").split()


def logdump(image):
    out = subprocess.run(["debugfs", "-R", "logdump", image], capture_output=True, text=True).stdout
    return [(int(s), int(t), int(b)) for s, t, b in
            re.findall(r"Found expected sequence (\d+), type (\d+) \(.*?\) at block (\d+)", out)], out


def copy(image, name):
    dst = os.path.join(os.path.dirname(image), name)
    shutil.copyfile(image, dst)
    return dst


def rrfuse_replay(image):
    """Mount (rrfuse replays), snapshot, unmount; the daemon's log and the tree."""
    m = mount(image, opts="")
    try:
        snap = snapshot(m.mnt)
        m.unmount()
    finally:
        m.cleanup()
    return m.daemon_log, snap


def kernel_replay(image):
    d = os.path.join(os.path.dirname(image), "kmnt")
    os.makedirs(d, exist_ok=True)
    subprocess.run(["mount", "-t", "ext4", "-o", "loop", image, d], check=True)
    try:
        snap = snapshot(d)
    finally:
        subprocess.run(["umount", d], check=True)
    return snap


def crash_after_commit(mkfs_args, nfiles=6, size="64M"):
    """Files each fsync'd (one transaction each); the daemon stops after
    the last one's commit block.  The image and {name: bytes}."""
    image = make_image(size=size, mkfs_args=mkfs_args)
    m = mount(image, crash="commit:%d" % (nfiles + 1))
    want = {}
    try:
        for i in range(nfiles):
            name = "d%d/f%d" % (i % 2, i)
            os.makedirs(m.path("d%d" % (i % 2)), exist_ok=True)
            data = pattern(i, 1000 + 3000 * i)
            want[name] = data
            try:
                fsync_file(m.path(name), data)
            except OSError:
                assert i == nfiles - 1, "the daemon stopped before transaction %d" % nfiles
    finally:
        crashed(m)
    return image, want


def check_files(snap_root_files, want):
    for name, data in want.items():
        assert snap_root_files.get(name) == data, "%s lost or wrong after the replay" % name


def read_tree(image, kernel=False):
    """{relative path: bytes} of the regular files, read by a mount."""
    m = Mount(image, opts="ro" if not kernel else "ro,norecovery", kernel=kernel)
    m.mount()
    try:
        out = {}
        for root, _, files in os.walk(m.mnt):
            for f in files:
                p = os.path.join(root, f)
                with open(p, "rb") as fh:
                    out[os.path.relpath(p, m.mnt)] = fh.read()
        m.unmount()
    finally:
        m.cleanup()
    return out


# ------------------------------------------------------------------ format

@pytest.mark.parametrize("mkfs_args,jfeatures", [
    (CSUM_V3, "journal_incompat_revoke journal_64bit journal_checksum_v3"),
    (NO_CSUM, "journal_incompat_revoke"), (ONE_K, None)],
    ids=["csum_v3", "no_csum_32bit", "1k_blocks"])
def test_transaction_format(mkfs_args, jfeatures):
    """The committed transaction is what debugfs logdump reads: a
    descriptor and a commit block of the expected id, the journal's
    features set as the kernel's are once it has revoked a block; e2fsck
    -n sees only a journal to recover."""
    image, _ = crash_after_commit(mkfs_args, nfiles=3)
    assert "needs_recovery" in features(image)
    if jfeatures:
        assert dumpe2fs(image, "Journal features") == jfeatures
    seq = int(dumpe2fs(image, "Journal sequence"), 16)
    assert int(dumpe2fs(image, "Journal start")) >= 1
    blocks, out = logdump(image)
    types = [(s, t) for s, t, _ in blocks]
    assert types and types[0] == (seq, 1) and types[-1] == (seq, 2), out
    assert all(s == seq for s, _ in types), out
    assert "checksum" not in out.lower() or "bad" not in out.lower(), out
    r = subprocess.run(["e2fsck", "-fn", image], capture_output=True, text=True)
    assert "skipping journal recovery" in r.stdout + r.stderr, r.stdout + r.stderr


def test_freed_metadata_is_revoked():
    """A transaction that frees blocks the live one logged revokes them, as
    jbd2 does: a directory's blocks, logged when it was filled, revoked by
    the commit of its removal; e2fsck, the kernel and rrfuse replay the
    crashed image clean."""
    image = make_image(size="64M", mkfs_args=CSUM_V3)
    m = mount(image, crash="commit:3")
    try:
        os.mkdir(m.path("d"))
        for i in range(300):
            open(m.path("d/a-rather-long-file-name-%04d" % i), "w").close()
        fd = os.open(m.path("d"), os.O_RDONLY)
        os.fsync(fd)                                 # transaction 2 logs d's blocks
        os.close(fd)
        out = subprocess.run(["debugfs", "-R", "blocks /d", image], capture_output=True,
                             text=True).stdout
        dblocks = {int(b) for b in out.split()}
        assert len(dblocks) >= 2, out
        shutil.rmtree(m.path("d"))
        fd = os.open(m.mnt, os.O_RDONLY)
        try:
            os.fsync(fd)                             # transaction 3 frees them
        except OSError:
            pass
        os.close(fd)
    finally:
        crashed(m)
    blocks, out = logdump(image)
    seq = int(dumpe2fs(image, "Journal sequence"), 16)
    assert (seq, 5) in [(s, t) for s, t, _ in blocks], out
    full = subprocess.run(["debugfs", "-R", "logdump -a", image], capture_output=True, text=True).stdout
    revoked = {int(b) for b in re.findall(r"Revoke FS block (\d+)", full)}
    assert dblocks <= revoked, (sorted(dblocks), sorted(revoked), full[-3000:])
    bad, _ = other_replays(image, "e2fsck and the kernel")
    assert not bad, "\n".join(bad)
    log, snap = rrfuse_replay(image)
    assert "d" not in snap, log
    rc, fout = fsck(image)
    assert rc == 0, fout


def test_crash_needs_a_replay_only():
    """As on the kernel's ext4, a crashed journaled image is marked
    needs_recovery with its state still clean: the replay is all it takes,
    e2fsck -p replays and checks no further, and no mount warns that the
    filesystem is unchecked."""
    image, want = crash_after_commit(CSUM_V3, nfiles=2)
    assert dumpe2fs(image, "Filesystem state") == "clean"
    assert "needs_recovery" in features(image)
    p = copy(image, "preen.img")
    r = subprocess.run(["e2fsck", "-p", p], capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    assert "recovering journal" in r.stdout + r.stderr, r.stdout + r.stderr
    assert "clean" in r.stdout, r.stdout
    log, _ = rrfuse_replay(image)
    assert "unchecked" not in log, log
    rc, out = fsck(image)
    assert rc == 0, out
    check_files(read_tree(image), want)


def test_fsync_costs_two_flushes():
    """A commit is two flushes, as the kernel's (before the commit block and
    after it): the home writes of one transaction become durable at the
    next one's first flush, the log keeping it till then.  Over 40 fsyncs
    of 4 KiB appends, at most one more now and then, when the log is
    emptied for want of room after the live transaction."""
    image = make_image(size="64M")
    m = mount(image)
    try:
        fd = os.open(m.path("f"), os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            os.write(fd, pattern(0, 4096))
            os.fsync(fd)
            before = conftest.device_io(m)
            for i in range(40):
                os.write(fd, pattern(i + 1, 4096))  # a new block: a transaction each
                os.fsync(fd)
            after = conftest.device_io(m)
        finally:
            os.close(fd)
        m.unmount()
    finally:
        m.cleanup()
    flushes = after["flushes"] - before["flushes"]
    assert 80 <= flushes <= 84, "%d flushes for 40 fsyncs" % flushes
    rc, out = fsck(image)
    assert rc == 0, out


@pytest.mark.parametrize("mode", ["ordered", "writeback"])
def test_data_modes_keep_fsynced_data(mode):
    """-o data=ordered and data=writeback mount and both keep file data
    ahead of the commit that maps it: a crash after the commit of files
    written and fsync'd leaves every one intact after the replay."""
    image = make_image(size="64M")
    m = mount(image, opts=QUIET + ",data=" + mode, crash="commit:4")
    want = {}
    try:
        for i in range(3):
            want["f%d" % i] = pattern(i, 20000 + i)
            try:
                fsync_file(m.path("f%d" % i), want["f%d" % i])
            except OSError:
                assert i == 2
    finally:
        crashed(m)
    rrfuse_replay(image)
    rc, out = fsck(image)
    assert rc == 0, out
    check_files(read_tree(image), want)


def test_log_wraps_round_the_ring():
    """A 1 MiB journal (1023 log blocks) and 300 fsync'd appends, about
    seven log blocks each: the log goes round the ring twice, transactions
    wrapping from its last block to its first, and is never emptied for
    room (two flushes a commit, none more).  Then a crash after the 301st
    commit: the kernel, e2fsck and rrfuse replay the wrapped log alike."""
    image = make_image(size="64M", mkfs_args=TINY)
    m = mount(image)
    data = b""
    try:
        fd = os.open(m.path("f"), os.O_CREAT | os.O_WRONLY, 0o644)
        before = conftest.device_io(m)
        for i in range(300):
            chunk = pattern(i, 4096)
            os.write(fd, chunk)
            os.fsync(fd)
            data += chunk
        after = conftest.device_io(m)
        os.close(fd)
        m.unmount()
    finally:
        m.cleanup()
    assert after["flushes"] - before["flushes"] == 600, (before, after)
    # again from where the log is now, to a crash after a wrapped commit
    m = mount(image, crash="commit:302")
    try:
        fd = os.open(m.path("f"), os.O_WRONLY | os.O_APPEND)
        try:
            for i in range(300, 601):
                chunk = pattern(i, 4096)
                os.write(fd, chunk)
                os.fsync(fd)
                data += chunk
        except OSError:
            assert i == 600, "the daemon stopped before transaction 302"
            data += chunk               # its commit block is durable: replayed
        try:
            os.close(fd)
        except OSError:
            pass
    finally:
        crashed(m)
    e2 = copy(image, "e2.img")
    k = copy(image, "k.img")
    # Not -f: with it journal_only goes on to check and repair, hiding what the replay left.
    r = subprocess.run(["e2fsck", "-y", "-E", "journal_only", e2], capture_output=True, text=True)
    assert r.returncode <= 1, r.stdout + r.stderr
    log, _ = rrfuse_replay(image)
    assert "replayed 1 transaction" in log, log
    replayed = [image, e2]
    if loop_works():
        kernel_replay(k)
        replayed.append(k)
    for img in replayed:
        rc, out = fsck(img)
        assert rc == 0, "%s: %s" % (img, out)
        assert read_tree(img)["f"] == data, img


# ------------------------------------------------------------- interchange

@pytest.mark.parametrize("mkfs_args", [CSUM_V3, NO_CSUM, TINY], ids=["csum_v3", "no_csum_32bit", "tiny_1k"])
def test_interchange(mkfs_args):
    """A crash after a commit block: e2fsck -fy, the kernel and rrfuse each
    replay a copy; each is then e2fsck -fn clean, holds every file fsync'd
    before the crash, and the three trees are equal."""
    if not loop_works():
        pytest.skip("needs working loop devices")
    image, want = crash_after_commit(mkfs_args)
    a = copy(image, "a.img")
    k = copy(image, "k.img")
    r = subprocess.run(["e2fsck", "-fy", a], capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    ksnap = kernel_replay(k)
    log, rsnap = rrfuse_replay(image)
    assert "replayed 1 transaction" in log, log
    for img in (a, k, image):
        rc, out = fsck(img)
        assert rc == 0, "%s: %s" % (img, out)
        assert "needs_recovery" not in features(img)
    diffs = conftest.compare_snapshots(rsnap, ksnap)
    assert not diffs, "rrfuse's replay and the kernel's differ:\n" + "\n".join(diffs)
    kernel_check(a, rsnap)              # e2fsck's replay gives the same tree
    files = read_tree(image)
    check_files(files, want)


# ------------------------------------------------------ old transactions

def test_old_transactions_never_replayed():
    """Many transactions, a remount, a few more, a crash: the replay
    applies the last one only, and ids grow across mounts."""
    image = make_image(size="64M")
    m = mount(image)
    try:
        for i in range(30):
            fsync_file(m.path("old%d" % i), pattern(i, 5000))
        m.unmount()
    finally:
        m.cleanup()
    seq1 = int(dumpe2fs(image, "Journal sequence"), 16)
    assert seq1 >= 31
    assert "needs_recovery" not in features(image)
    m = mount(image, crash="commit:4")
    try:
        for i in range(3):
            try:
                fsync_file(m.path("new%d" % i), pattern(100 + i, 7000))
            except OSError:
                assert i == 2
    finally:
        crashed(m)
    seq2 = int(dumpe2fs(image, "Journal sequence"), 16)
    assert seq2 == seq1 + 3
    log, _ = rrfuse_replay(image)
    assert "replayed 1 transaction (%d to %d)" % (seq2, seq2) in log, log
    rc, out = fsck(image)
    assert rc == 0, out
    files = read_tree(image)
    for i in range(30):
        assert files["old%d" % i] == pattern(i, 5000)
    for i in range(3):
        assert files["new%d" % i] == pattern(100 + i, 7000)


def test_crash_points_before_commit_and_after_home():
    """Stopped before the commit block, the transaction is not replayed
    (the state before it stands); stopped after its home writes, the
    replay rewrites what is home already.  Both e2fsck -fn clean."""
    for point, present in (("log:3", False), ("home:3", True)):
        image = make_image(size="64M")
        m = mount(image, crash=point)
        try:
            fsync_file(m.path("first"), pattern(1, 9000))
            try:
                fsync_file(m.path("second"), pattern(2, 9000))
            except OSError:
                pass
        finally:
            crashed(m)
        log, _ = rrfuse_replay(image)
        rc, out = fsck(image)
        assert rc == 0, point + out
        files = read_tree(image)
        assert files["first"] == pattern(1, 9000), point
        assert ("second" in files) == present, (point, log)


# ------------------------------------------------------- a tiny journal

def test_tiny_journal_big_operations():
    """A 1 MiB journal (1024 blocks of 1 KiB) and operations that dirty
    many blocks at once: thousands of creates, a big truncate, a big
    rm -rf.  Transactions are committed as they fill; the image is clean
    and the kernel reads it back."""
    image = make_image(size="256M", mkfs_args=TINY)
    m = mount(image, opts="")
    try:
        os.makedirs(m.path("many"))
        for i in range(3000):
            with open(m.path("many", "f%05d" % i), "wb") as f:
                f.write(b"x" * (i % 3000))
        with open(m.path("big"), "wb") as f:
            for i in range(96):
                f.write(pattern(i, 1 << 20))
        os.sync()
        os.truncate(m.path("big"), 4096)
        subprocess.run(["rm", "-rf", m.path("many")], check=True)
        snap = snapshot(m.mnt)
        m.unmount()
    finally:
        m.cleanup()
    assert "did not fit" not in m.daemon_log, m.daemon_log
    rc, out = fsck(image)
    assert rc == 0, out
    if loop_works():
        kernel_check(image, snap)


# ------------------------------------------------------- crash anywhere

WORKLOAD = r'''
import ctypes, hashlib, os, random, sys
root, log, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
# the write recorder's log (test_power_loss.py): its size when an fsync has returned
rec = sys.argv[4] if len(sys.argv) > 4 else None
rnd = random.Random(seed)
lf = open(log, "a", buffering=1)
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
KEEP_SIZE = 1
KEEP_MAX = 300          # about 25 MiB of kept files at most, with the churn's well inside 128 MiB
def note(*a):
    lf.write(" ".join(a) + "\n"); lf.flush(); os.fsync(lf.fileno())
def prealloc(fd, off, n):
    # blocks past EOF, unwritten, the size unchanged (as a database or a log preallocates)
    libc.fallocate(fd, KEEP_SIZE, off, n)
def churn():
    return os.path.join(root, "churn", "c%d" % rnd.randrange(200))
def kept(name):
    # a kept file: written, fsync'd, then only ever renamed whole.  Some are
    # preallocated past their end and written out of order: the blocks past
    # EOF first, a hole below them filled last.
    data = os.urandom(rnd.choice([100, 5000, 70000, 200000]))
    fd = os.open(os.path.join(root, name), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    if len(data) > 5000 and rnd.random() < 0.5:
        cut = rnd.randrange(1, len(data) // 4096 + 1) * 4096 // 2
        os.write(fd, data[:100])
        prealloc(fd, 100, len(data) + rnd.randrange(0, 65536))
        os.pwrite(fd, data[cut:], cut)
        os.pwrite(fd, data[100:cut], 100)
    else:
        os.write(fd, data)
    os.fsync(fd); os.close(fd)
    note("F", name, hashlib.sha256(data).hexdigest(), str(os.path.getsize(rec) if rec else 0))
    if rnd.random() < 0.5:
        note("R", name, name + ".r")
        os.rename(os.path.join(root, name), os.path.join(root, name + ".r"))
def forget_one():
    # Kept files accumulate over the rounds (a fast build fills 128 MiB in
    # ten): past KEEP_MAX one goes, noted first, so a crash between the note
    # and the unlink leaves a file the checks no longer ask for.
    names = os.listdir(os.path.join(root, "keep"))
    if len(names) < KEEP_MAX:
        return
    victim = rnd.choice(names)
    # its name now and the one it was kept under (a round's log starts with the names as they are)
    note("D", "keep/" + victim, "keep/" + (victim[:-2] if victim.endswith(".r") else victim))
    os.unlink(os.path.join(root, "keep", victim))
def step(n):
    op = rnd.random()
    if op < 0.2:
        forget_one()
        kept("keep/k%d_%d" % (seed, n))
    elif op < 0.4:
        with open(churn(), "ab") as f:
            f.write(os.urandom(rnd.randrange(1, 20000)))
    elif op < 0.5:
        # preallocated past EOF, written into, a hole below filled late or never; left open a while
        fd = os.open(churn(), os.O_CREAT | os.O_RDWR, 0o644)
        size = os.fstat(fd).st_size
        prealloc(fd, size + 8192, rnd.randrange(1, 40) * 4096)
        os.pwrite(fd, os.urandom(rnd.randrange(1, 60000)), size + 8192 + rnd.randrange(0, 8192))
        if rnd.random() < 0.5:
            os.pwrite(fd, os.urandom(8192), size)
        os.close(fd)
    elif op < 0.6:
        # a write far past EOF (a hole), the hole filled by a later write
        p = churn()
        with open(p, "ab") as f:
            end = f.tell()
            f.seek(end + rnd.randrange(1, 20) * 4096)
            f.write(os.urandom(rnd.randrange(1, 9000)))
            f.seek(end)
            if rnd.random() < 0.7:
                f.write(os.urandom(rnd.randrange(1, 9000)))
    elif op < 0.7:
        p = churn()
        if os.path.exists(p):
            os.truncate(p, rnd.randrange(0, 10000))
    elif op < 0.8:
        p = churn()
        if os.path.exists(p):
            os.unlink(p)
    elif op < 0.93:
        d = os.path.join(root, "churn", "d%d" % rnd.randrange(20))
        if os.path.isdir(d):
            for e in os.listdir(d):
                os.unlink(os.path.join(d, e))
            os.rmdir(d)
        else:
            os.makedirs(d)
            for i in range(rnd.randrange(1, 30)):
                open(os.path.join(d, "e%d" % i), "wb").write(b"y" * i)
    else:
        a, b = churn(), churn()
        if os.path.exists(a):
            os.rename(a, b)
n = 0
os.makedirs(os.path.join(root, "keep"), exist_ok=True)
os.makedirs(os.path.join(root, "churn"), exist_ok=True)
while True:
    n += 1
    try:
        step(n)
    except FileNotFoundError:
        pass            # another writer took the file or directory away
    except OSError as e:
        if e.errno not in (39, 17, 2):  # ENOTEMPTY, EEXIST, ENOENT: the other writer again
            raise
'''

# Writers of the workload at once, each with its own seed.
WRITERS = 2


def start_workload(work, mnt, log, seed, reclog=None):
    """WRITERS processes of WORKLOAD on mnt (already written to work), their
    errors in work + ".errN"."""
    extra = [reclog] if reclog else []
    procs = []
    for i in range(WRITERS):
        with open("%s.err%d" % (work, i), "wb") as err:
            procs.append(subprocess.Popen([sys.executable, work, mnt, log, str(seed + i)] + extra,
                                          stdout=subprocess.DEVNULL, stderr=err))
    return procs


def workload_running(work, procs):
    """Before the crash: a writer that stopped by itself stopped on an error of the mount's."""
    for i, p in enumerate(procs):
        if p.poll() is not None:
            with open("%s.err%d" % (work, i)) as f:
                raise AssertionError("a writer of the workload stopped: " + f.read()[-2000:])


def stop_workload(procs):
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def keep_digests(root):
    files = {}
    for d, _, names in os.walk(os.path.join(root, "keep")):
        for n in names:
            with open(os.path.join(d, n), "rb") as fh:
                files["keep/" + n] = hashlib.sha256(fh.read()).hexdigest()
    return files


def kernel_keep(image, opts, bad, what):
    """Loop-mount image with the kernel (a read-write mount replays the
    journal), read keep/, unmount: the digests, or None if it refused."""
    d = os.path.join(os.path.dirname(image), "kmnt")
    os.makedirs(d, exist_ok=True)
    r = subprocess.run(["mount", "-t", "ext4", "-o", opts, image, d], capture_output=True, text=True)
    if r.returncode:
        bad.append("%s: the kernel refused the image: %s" % (what, r.stderr))
        return None
    try:
        return keep_digests(d)
    finally:
        subprocess.run(["umount", d], check=True)


def other_replays(image, what, kernel=True):
    """e2fsck (-E journal_only) and, with kernel and where loop devices
    work, the kernel replay copies of a crashed image: each must then be
    e2fsck -fn clean.  What was wrong (each line starting with what), and
    the trees of keep/ they leave ({name: digest}, read by the kernel)."""
    bad, trees = [], []
    e2 = copy(image, "e2fsck-replay.img")
    # Not -f: with it journal_only goes on to check and repair, hiding what the replay left.
    r = subprocess.run(["e2fsck", "-y", "-E", "journal_only", e2], capture_output=True, text=True)
    rc, out = fsck(e2)
    if r.returncode > 1 or rc:
        bad.append("%s: after e2fsck's replay (rc %d):\n%s" % (what, r.returncode, out))
    if kernel and loop_works():
        k = copy(image, "kernel-replay.img")
        for img, o, who in ((e2, "loop,ro", "e2fsck"), (k, "loop", "the kernel")):
            t = kernel_keep(img, o, bad, "%s, replayed by %s" % (what, who))
            if t is not None:
                trees.append((who, t))
        rc, out = fsck(k)
        if rc:
            bad.append("%s: after the kernel's replay:\n%s" % (what, out))
        os.unlink(k)
    os.unlink(e2)
    return bad, trees


def trees_differ(trees, files, what):
    """Each of other_replays' keep/ trees must equal rrfuse's (files)."""
    bad = []
    for who, t in trees:
        if t != files:
            diff = sorted(n for n in set(t) | set(files) if t.get(n) != files.get(n))
            bad.append("%s: keep/ replayed by %s differs from rrfuse's replay: %s" % (what, who, diff[:10]))
    return bad


def crash_rounds(rounds, opts="", mkfs_args=(), seconds=(0.5, 2.5), seed=None, until_bad=False):
    """SIGKILL rrfuse at a random moment of a busy workload, round after
    round on one image; after each, the replays of e2fsck and the kernel
    (on copies) and rrfuse's must leave an image e2fsck -fn finds clean;
    rrfuse's must also keep every fsync'd file intact and every rename
    atomic.  Returns what was not: e2fsck's reports, files lost or
    changed, renames seen twice or not at all; with until_bad, stops at
    the first round that leaves any."""
    rnd = random.Random(seed)
    image = make_image(size="128M", mkfs_args=mkfs_args)
    work = os.path.join(os.path.dirname(image), "workload.py")
    with open(work, "w") as f:
        f.write(WORKLOAD)
    log = os.path.join(os.path.dirname(image), "fsynced.log")
    bad = []
    for rnd_i in range(rounds):
        m = mount(image, opts=opts)
        procs = start_workload(work, m.mnt, log, rnd.randrange(1 << 30))
        time.sleep(rnd.uniform(*seconds))
        workload_running(work, procs)
        kill_daemon(m)
        m.cleanup()
        stop_workload(procs)
        trees = []
        if "nojournal" not in opts:
            more, trees = other_replays(image, "round %d" % rnd_i)
            bad += more
        # rrfuse replays at mount and unmounts clean: an image it cannot
        # mount (refused, as the kernel refuses a wrong descriptor checksum,
        # or a root it cannot read) is damage too
        try:
            mm = mount(image, opts=opts)
        except (conftest.MountError, OSError) as e:
            bad.append("round %d: rrfuse cannot mount the crashed image: %s" % (rnd_i, e))
            break
        try:
            files = keep_digests(mm.mnt)
            mm.unmount()
        finally:
            mm.cleanup()
        rc, out = fsck(image)
        if rc != 0:
            bad.append(out)
        bad += trees_differ(trees, files, "round %d" % rnd_i)
        renamed, kept, gone = {}, {}, set()
        with open(log) as f:
            for line in f:
                w = line.split()
                if w[0] == "F":
                    kept[w[1]] = w[2]
                elif w[0] == "R":
                    renamed[w[1]] = w[2]
                elif w[0] == "D":
                    gone.update(w[1:])
        now = {}
        for name, digest in kept.items():
            if name in gone:
                continue        # its writer deleted it (noted just before, maybe before its "F")
            here = [n for n in (name, renamed.get(name)) if n and n in files]
            if len(here) != 1:
                bad.append("round %d: %s: %s after the crash" % (
                    rnd_i, name, "both names" if here else "lost"))
            elif files[here[0]] != digest:
                bad.append("round %d: %s changed" % (rnd_i, here[0]))
            else:
                now[here[0]] = digest
        # what the next round starts from: the names as they are now
        with open(log, "w") as f:
            for name, digest in now.items():
                f.write("F %s %s\n" % (name, digest))
        if bad and until_bad:
            break
    return bad


@pytest.mark.parametrize("mkfs_args,opts", [(CSUM_V3, ""), (TINY, ""), (CSUM_V3, "delalloc=close")],
                         ids=["csum_v3", "tiny_1k", "csum_v3_close"])
def test_crash_anywhere(mkfs_args, opts):
    rounds = int(os.environ.get("RRFUSE_CRASH_ROUNDS", "4"))
    bad = crash_rounds(rounds, opts=opts, mkfs_args=mkfs_args)
    assert not bad, "damage after a crash:\n" + "\n----\n".join(bad)


def test_crash_test_sees_damage_without_journal():
    """The crash test's control: with the journal off and no cache
    (cache_mb=0: every metadata write straight home, as rrfuse wrote
    before either), the same kills leave images e2fsck must repair.  A
    kill can land between operations, the more often the slower the build
    (under ASan three in a row did): up to ten rounds, until one is damaged."""
    bad = crash_rounds(10, opts="nojournal,cache_mb=0", seed=1, until_bad=True)
    assert bad, "ten kills without a journal left clean images: the crash test tests nothing"
