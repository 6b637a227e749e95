"""Power loss, which SIGKILL cannot show (the host's page cache keeps every
write the daemon made): the write recorder (RRFUSE_IO_RECORD, src/io/
record.h) logs every write and flush that reaches the device during a busy
mixed workload; the device state a power cut could leave is rebuilt from a
copy of the image taken before the mount: everything before a flush, plus
a random subset of the writes that followed it.  Each state must then be
replayed to an image e2fsck -fn finds clean, by rrfuse, by e2fsck and (some
of them) by the kernel, with every file fsync'd before the flush intact and
every rename atomic.

tests/mount/crashloop.py --power runs it longer by hand.
"""

import hashlib
import mmap
import os
import random
import shutil
import struct
import subprocess
import sys
import time

import pytest

import conftest
from conftest import Mount, fsck, loop_works, make_image
import test_journal_write as jw

pytestmark = pytest.mark.rrfuse_only

RECORD_ENV = "RRFUSE_IO_RECORD"
REC = struct.Struct("<IIQQQ")           # struct rr_rec: type, pad, off, len, arg
MAGIC = b"RRWREC01"
WRITE, ZERO, DISCARD, FLUSH = (ord(c) for c in "WZDF")


@pytest.fixture(autouse=True)
def _requirements():
    conftest.require_tools()
    conftest.require_binary()
    conftest.require_fuse()
    conftest.require_root("mounting")


def read_log(path):
    """The recorder's log: (records, flushes).  A record is (position in the
    log, type, off, len, data offset in the log); a flush is (its record's
    position, the log's size up to which every record is durable once it
    has returned)."""
    recs, flushes = [], []
    with open(path, "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    assert buf[:8] == MAGIC, "not a write recorder log: %s" % path
    p = 8
    while p < len(buf):
        t, _, off, ln, arg = REC.unpack_from(buf, p)
        assert t in (WRITE, ZERO, DISCARD, FLUSH), "bad record type %d at %d" % (t, p)
        if t == FLUSH:
            flushes.append((p, arg))
        else:
            recs.append((p, t, off, ln, p + REC.size))
        p += REC.size + (ln if t == WRITE else 0)
    assert p == len(buf), "log ends inside a record"
    # Once a flush has returned, what any earlier flush made durable stays
    # so, even if this one began before that one did (two threads).
    top = 0
    for i, (pos, began) in enumerate(flushes):
        top = max(top, began)
        flushes[i] = (pos, top)
    return buf, recs, flushes


def apply(fd, buf, recs):
    for _, t, off, ln, data in recs:
        if t == WRITE:
            os.pwrite(fd, buf[data:data + ln], off)
        else:
            # a discard on an image file is a punched hole: zeros
            os.pwrite(fd, bytes(ln), off)


def record(image, opts, seconds, seed, log, reclog):
    """Mount with the recorder on, run the crash test's workload for a
    while, stop it and unmount."""
    old = os.environ.get(RECORD_ENV)
    os.environ[RECORD_ENV] = reclog
    try:
        m = Mount(image, opts=opts)
        m.mount()
    finally:
        if old is None:
            os.environ.pop(RECORD_ENV)
        else:
            os.environ[RECORD_ENV] = old
    work = os.path.join(os.path.dirname(image), "workload.py")
    with open(work, "w") as f:
        f.write(jw.WORKLOAD)
    try:
        procs = jw.start_workload(work, m.mnt, log, seed, reclog)
        time.sleep(seconds)
        jw.workload_running(work, procs)
        jw.stop_workload(procs)
        m.unmount()
    finally:
        m.cleanup()


def expected(log, state_end):
    """The kept files a state that has everything the log held at state_end
    durable must hold: {name: (digest, renamed-to)}."""
    kept, renamed, gone = {}, {}, set()
    with open(log) as f:
        for line in f:
            w = line.split()
            if w[0] == "F" and int(w[3]) <= state_end:
                kept[w[1]] = w[2]
            elif w[0] == "R":
                renamed[w[1]] = w[2]
            elif w[0] == "D":
                # noted before its unlink: at any state it may be there or not
                gone.update(w[1:])
    return {n: (d, renamed.get(n)) for n, d in kept.items() if n not in gone}


def tree_digests(image):
    """rrfuse mounts the state (it replays the journal), reads keep/ and
    unmounts: {name: digest} (unreadable files marked so) and the daemon's log."""
    m = Mount(image, opts="")
    # the log is appended to by every mount here: this one's part only
    start = os.path.getsize(m.logpath) if os.path.exists(m.logpath) else 0
    try:
        m.mount()
    except conftest.MountError:
        with open(m.logpath, "rb") as f:
            f.seek(start)
            raise conftest.MountError(f.read().decode(errors="replace"))
    try:
        files = {}
        for root, _, names in os.walk(m.path("keep")):
            for n in names:
                try:
                    with open(os.path.join(root, n), "rb") as fh:
                        files["keep/" + n] = hashlib.sha256(fh.read()).hexdigest()
                except OSError as e:
                    files["keep/" + n] = "unreadable: %s" % e
        m.unmount()
    finally:
        m.cleanup()
    return files, m.daemon_log[start:]


def check_state(state, want, kernel):
    """What is wrong with one rebuilt state, replayed three ways: a list."""
    # e2fsck and the kernel on copies first: rrfuse replays the state itself
    bad, trees = jw.other_replays(state, "the state", kernel)
    try:
        files, daemon_log = tree_digests(state)
    except conftest.MountError as e:
        return bad + ["rrfuse cannot mount the state: %s" % e]
    rc, out = fsck(state)
    if rc:
        bad.append("after rrfuse's replay e2fsck -fn says:\n" + out + "\n" + daemon_log[-1500:])
    for name, (digest, renamed) in want.items():
        here = [n for n in (name, renamed) if n and n in files]
        if len(here) != 1:
            bad.append("%s: %s" % (name, "both names" if here else "lost"))
        elif files[here[0]] != digest:
            bad.append("%s changed" % here[0])
    return bad + jw.trees_differ(trees, files, "the state")


def fsck_replay(durable, state, what):
    """The quick check of a state: e2fsck replays a copy of it, which must
    then be e2fsck -fn clean (jw.other_replays without its second copy)."""
    subprocess.run(["cp", "--sparse=always", durable, state], check=True)
    r = subprocess.run(["e2fsck", "-y", "-E", "journal_only", state], capture_output=True, text=True)
    rc, out = fsck(state)
    if r.returncode > 1 or rc:
        return ["%s: after e2fsck's replay (rc %d):\n%s" % (what, r.returncode, out)]
    return []


def power_cuts(states, opts="", mkfs_args=(), seconds=3.0, seed=None, kernel_every=3, scan_every=0):
    """Record a workload, then rebuild and check states: half at flush
    points, half a flush point plus a random subset of the writes after it
    (up to the next flush).  The mount's first two flush points and the
    unmount's last two are always among them, each also with every write
    after it alone (the superblock's needs_recovery and state change
    there).  With scan_every, every flush point is a state: e2fsck's
    replay of each must be clean, and every scan_every-th (the edges too)
    gets the whole check above.  Returns (what was wrong, how many states
    were checked, how many flushes the log held)."""
    rnd = random.Random(seed)
    image = make_image(size="128M", mkfs_args=mkfs_args)
    top = os.path.dirname(image)
    base = os.path.join(top, "base.img")
    shutil.copyfile(image, base)
    reclog = os.path.join(top, "writes.rec")
    log = os.path.join(top, "fsynced.log")
    record(image, opts, seconds, rnd.randrange(1 << 30), log, reclog)
    buf, recs, flushes = read_log(reclog)
    # The unmounted image is the last state: the log must rebuild it exactly.
    final = os.path.join(top, "final.img")
    shutil.copyfile(base, final)
    with open(final, "r+b") as f:
        apply(f.fileno(), buf, recs)
    with open(final, "rb") as a, open(image, "rb") as b:
        assert a.read() == b.read(), "the recorder's log does not rebuild the image it recorded"
    os.unlink(final)
    assert len(flushes) >= 4, "a busy workload made only %d flushes" % len(flushes)
    edges = {0, 1, len(flushes) - 2, len(flushes) - 1}
    if scan_every:
        picks = list(range(len(flushes)))
    else:
        picks = sorted(set(rnd.sample(range(len(flushes)), min(states, len(flushes)))) | edges)
    bad = []
    checked = 0
    state = os.path.join(top, "state.img")
    durable = os.path.join(top, "durable.img")
    shutil.copyfile(base, durable)
    done = 0                            # records applied to durable.img
    for i, k in enumerate(picks):
        fpos, began = flushes[k]
        upto = next((j for j, r in enumerate(recs) if r[0] >= began), len(recs))
        with open(durable, "r+b") as f:
            apply(f.fileno(), buf, recs[done:upto])
        done = upto
        # the writes after this flush began, up to the next flush's beginning
        nxt = flushes[k + 1][1] if k + 1 < len(flushes) else len(buf)
        after = [r for r in recs[upto:] if r[0] < nxt]
        if scan_every and k not in edges and k % scan_every:
            bad += fsck_replay(durable, state, "flush %d of %d" % (k + 1, len(flushes)))
            checked += 1
            continue
        subsets = [None]
        if k in edges and len(after) <= 8:
            subsets += [[c] for c in range(len(after))]
        elif i % 2 and after:
            subsets = [sorted(rnd.sample(range(len(after)), rnd.randrange(1, len(after) + 1)))]
        for chosen in subsets:
            what = "flush %d of %d" % (k + 1, len(flushes))
            shutil.copyfile(durable, state)
            if chosen is not None:
                with open(state, "r+b") as f:
                    apply(f.fileno(), buf, [after[c] for c in chosen])
                what += " + write%s %s of the %d after it" % (
                    "s" if len(chosen) > 1 else "", ",".join(str(c + 1) for c in chosen), len(after))
            want = expected(log, fpos)
            for b in check_state(state, want, loop_works() and checked % kernel_every == 0):
                bad.append("%s: %s" % (what, b))
            checked += 1
    buf.close()
    return bad, checked, len(flushes)


@pytest.mark.parametrize("mkfs_args", [jw.CSUM_V3, jw.TINY], ids=["csum_v3", "tiny_1k"])
def test_power_cut_states(mkfs_args):
    states = int(os.environ.get("RRFUSE_POWER_STATES", "8"))
    bad, checked, flushes = power_cuts(states, mkfs_args=mkfs_args, seed=1)
    assert checked >= min(states, 4), "only %d states of %d flushes" % (checked, flushes)
    assert not bad, "damage after a power cut:\n" + "\n----\n".join(bad)


@pytest.mark.parametrize("opts", ["", "delalloc=close"], ids=["default", "close"])
def test_power_cut_at_every_flush_point(opts):
    """Issue 38: every flush point of a short recording, in both delalloc
    modes, the workload's preallocations past EOF and late-filled holes
    among its writes: e2fsck's replay of each state is clean (a commit had
    written an inode whose written blocks passed its size on disk), and
    every tenth is replayed by rrfuse and the kernel and its files read."""
    seconds = float(os.environ.get("RRFUSE_POWER_SECONDS", "0.6"))
    bad, checked, flushes = power_cuts(0, opts=opts, seconds=seconds, seed=2, scan_every=10)
    assert checked >= flushes, "only %d states of %d flushes" % (checked, flushes)
    assert not bad, "damage after a power cut:\n" + "\n----\n".join(bad[:10])


def test_power_cut_test_sees_damage_without_journal():
    """The control: with the journal off and no cache, some rebuilt state
    must be damaged, or the test cannot tell."""
    bad, _, _ = power_cuts(12, opts="nojournal,cache_mb=0", seed=1)
    assert bad, "no state without a journal was damaged: the power-cut test tests nothing"
