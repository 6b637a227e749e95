"""-o alloc_trace=FILE: the allocator's requests, searches, preallocation
uses and frees in the text the kernel's tracefs prints for its ext4
tracepoints, read by the one parser (tools/bench/ext4trace.py) that also
reads the kernel's own trace of the same workload on a loop device.

Each workload writes and fsyncs N files, then deletes one.  What the trace
must say, on rrfuse and on the kernel alike: every line of the four events
has the kernel's shape; N data requests, one a file; the blocks each file's
requests got are exactly the blocks the image maps for it (debugfs, after
unmount); the deleted file's blocks are freed; the image passes e2fsck -fn.
"""
import hashlib
import os
import pathlib
import re
import shutil
import tempfile
import subprocess
import sys

import pytest

from conftest import KERNEL, REPO, RRCTL, RRFUSE, Mount, debugfs, fsck, leaf_extents, loop_works, make_image, pattern

sys.path.insert(0, os.path.join(REPO, "tools", "bench"))
import ext4trace  # noqa: E402

TRACEFS = "/sys/kernel/tracing"
# Sizes in blocks: a small file (the locality group's preallocation), and stream files.
SIZES = (3, 12, 40, 256, 700)
DELETED = "f4"


def workload(root):
    """Write and fsync each file, the last one deleted: {name: blocks}."""
    for i, n in enumerate(SIZES):
        with open(os.path.join(root, "f%d" % i), "wb") as f:
            f.write(pattern(i, n * 4096))
            os.fsync(f.fileno())
    return {"f%d" % i: n for i, n in enumerate(SIZES)}


def inodes(image, names):
    out = debugfs(image, *("stat /%s" % n for n in names))
    return dict(zip(names, (int(x) for x in re.findall(r"^Inode: (\d+)", out, re.M))))


def geometry(image):
    out = subprocess.run(["dumpe2fs", "-h", image], capture_output=True, text=True, check=True).stdout
    get = lambda k: int(re.search(r"^%s:\s+(\d+)" % k, out, re.M).group(1))  # noqa: E731
    return get("First block"), get("Blocks per group")


def blocks_of(ext, geom):
    """The set of device blocks of a placed extent (tools/bench/ext4trace.placed)."""
    first, bpg = geom
    start = first + ext["group"] * bpg + ext["start"]
    return set(range(start, start + ext["len"]))


def requests_by_name(recs, by_ino):
    """{file name: [(lblk, len) of each of its data requests, in order]}."""
    out = {}
    for r in recs:
        if r["event"] == "ext4_request_blocks" and r["ino"] in by_ino and "HINT_DATA" in r["flagset"]:
            out.setdefault(by_ino[r["ino"]], []).append((r["lblk"], r["len"]))
    return out


def check_trace(recs, image, ino_of, sizes, deleted_blocks):
    """The trace against the workload and the image (unmounted)."""
    geom = geometry(image)
    by_ino = {i: n for n, i in ino_of.items()}
    # Each file (written whole, then fsync'd) is asked for from block 0 to its end; a request
    # that gets less than it asked for (a 2 MiB window for 700 blocks) is followed by one for the rest.
    asked = requests_by_name(recs, by_ino)
    assert sorted(asked) == sorted(sizes), asked
    for name, seq in asked.items():
        assert seq[0][0] == 0 and all(lb + n == sizes[name] for lb, n in seq), (name, seq)
        assert [lb for lb, _ in seq] == sorted(set(lb for lb, _ in seq)), (name, seq)
    answers = [r for r in recs if r["event"] in ("ext4_mballoc_alloc", "ext4_mballoc_prealloc")
               and r["ino"] in by_ino]
    got = {}
    for r in answers:
        got.setdefault(by_ino[r["ino"]], set()).update(blocks_of(ext4trace.placed(r), geom))
    for name, n in sizes.items():
        assert len(got.get(name, ())) == n, (name, n, got.get(name))
        if name == DELETED:
            assert got[name] == deleted_blocks, name
            continue
        mapped = set()
        for _, pblk, ln in leaf_extents(image, name):
            mapped.update(range(pblk, pblk + ln))
        assert got[name] == mapped, (name, sorted(got[name])[:4], sorted(mapped)[:4])
    freed = set()
    for r in recs:
        if r["event"] == "ext4_free_blocks":
            freed.update(range(r["block"], r["block"] + r["count"]))
    assert deleted_blocks <= freed
    rc, out = fsck(image)
    assert rc == 0, out


def strict_records(path, dev=None):
    """Every line of the four events parses (strictly), none is skipped."""
    with open(path) as f:
        lines = [l for l in f if any(": %s: " % e in l for e in ext4trace.EVENTS)]
    recs = ext4trace.parse(lines, strict=True)
    assert len(recs) == len(lines)
    return [r for r in recs if dev is None or r["dev"] == dev]


def deleted_blocks(recs, ino, image):
    """The blocks the trace gave the file that is then deleted."""
    out = set()
    for r in recs:
        if r["event"] in ("ext4_mballoc_alloc", "ext4_mballoc_prealloc") and r["ino"] == ino:
            out.update(blocks_of(ext4trace.placed(r), geometry(image)))
    return out


def rrfuse_run(trace, start=None):
    """The workload on rrfuse with -o alloc_trace=trace, checked: (records, {ino: name});
    start: where to keep a copy of the image as it was before."""
    image = make_image(size="256M")
    if start:
        shutil.copyfile(image, start)
    m = Mount(image, opts="alloc_trace=" + trace)
    m.mount()
    try:
        sizes = workload(m.mnt)
        ino_del = os.stat(m.path(DELETED)).st_ino
        os.unlink(m.path(DELETED))
        st = os.stat(image)
        m.unmount()
    finally:
        m.cleanup()
    recs = strict_records(trace)
    # The image's device numbers: those of the filesystem holding the image file.
    assert {r["dev"] for r in recs} == {(os.major(st.st_dev), os.minor(st.st_dev))}
    assert all(r["task"] and r["pid"] > 0 for r in recs)
    assert [r["ts"] for r in recs] == sorted(r["ts"] for r in recs)
    ino_of = inodes(image, [n for n in sizes if n != DELETED])
    ino_of[DELETED] = ino_del
    check_trace(recs, image, ino_of, sizes, deleted_blocks(recs, ino_del, image))
    check_commits(trace)
    return recs, {i: n for n, i in ino_of.items()}


def check_commits(trace):
    """The daemon's commits as jbd2's lines: transactions numbered up from 1 at each
    commit's start, an end only for the commit begun last (a commit that does not
    reach the device, unjournaled or unsynced, has none: its frees wait for the next),
    and the files' fsyncs ended some.  The unmount's last flush comes after the
    allocator has let go, so the deleted file's frees need not be followed by one."""
    start = re.compile(r": jbd2_start_commit: dev \d+,\d+ transaction (\d+) sync 0$")
    end = re.compile(r": jbd2_end_commit: dev \d+,\d+ transaction (\d+) sync 0 head \d+$")
    seq = []
    with open(trace) as f:
        for line in f:
            line = line.rstrip("\n")
            m = start.search(line) or end.search(line)
            if m:
                seq.append(("start" if "start_commit" in line else "end", int(m.group(1))))
            else:
                assert ": jbd2_" not in line, line
    starts = [t for k, t in seq if k == "start"]
    assert starts == list(range(1, len(starts) + 1)), seq
    for i, (k, t) in enumerate(seq):
        if k == "end":
            assert i and seq[i - 1] == ("start", t), seq
    assert any(k == "end" for k, _ in seq), seq


@pytest.mark.rrfuse_only
def test_rrfuse_trace_matches_the_workload_and_the_image(tmp_path):
    rrfuse_run(str(tmp_path / "alloc.trace"))


@pytest.mark.rrfuse_only
def test_rrctl_starts_and_stops_the_trace(mount_factory):
    m = mount_factory(size="128M")
    # rrctl's value holds 63 bytes: a short directory of our own.
    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="rrat", dir="/tmp"))
    trace = str(tmp_path / "live.trace")
    run = lambda *a: subprocess.run([RRCTL, m.mnt, *a], capture_output=True, text=True)  # noqa: E731
    assert run("alloc_trace").stdout == "alloc_trace = \n"
    assert run("alloc_trace=" + trace).stdout == "alloc_trace = %s\n" % trace
    for name in ("a", "b"):
        with open(m.path(name), "wb") as f:
            f.write(pattern(1, 40 * 4096))
            os.fsync(f.fileno())
        if name == "a":
            assert run("alloc_trace=").stdout == "alloc_trace = \n"
    ino_a, ino_b = os.stat(m.path("a")).st_ino, os.stat(m.path("b")).st_ino
    recs = strict_records(trace)
    reqs = [r for r in recs if r["event"] == "ext4_request_blocks" and "HINT_DATA" in r["flagset"]]
    assert [r["ino"] for r in reqs] == [ino_a] and reqs[0]["len"] == 40, reqs
    assert not any(r["ino"] == ino_b for r in recs)
    # A relative name is taken from rrctl's directory; a bad one is refused and changes nothing.
    r = subprocess.run([RRCTL, m.mnt, "alloc_trace=rel.trace"], capture_output=True, text=True,
                       cwd=str(tmp_path))
    assert r.stdout == "alloc_trace = %s\n" % (tmp_path / "rel.trace"), r
    r = run("alloc_trace=/nonexistent/dir/t")
    assert r.returncode == 1 and "No such file" in r.stderr, r
    assert run("alloc_trace").stdout == "alloc_trace = %s\n" % (tmp_path / "rel.trace")
    assert run("alloc_trace=").returncode == 0
    shutil.rmtree(str(tmp_path))


def enable_kernel_trace(instance, dev):
    """Turn on the four events in a tracing instance of our own, for dev only."""
    for e in ext4trace.EVENTS:
        d = os.path.join(instance, "events", "ext4", e)
        with open(os.path.join(d, "filter"), "w") as f:
            f.write("dev == %d" % ((dev[0] << 20) | dev[1]))
        with open(os.path.join(d, "enable"), "w") as f:
            f.write("1")


def tracefs_instance(tmp_path):
    """A tracing instance (its own buffer: nobody else's trace is touched), or skip."""
    if not loop_works():
        pytest.skip("needs root and loop devices for the kernel's ext4")
    if not os.path.isdir(os.path.join(TRACEFS, "instances")):
        subprocess.run(["mount", "-t", "tracefs", "nodev", TRACEFS], capture_output=True)
    if not os.path.isdir(os.path.join(TRACEFS, "events", "ext4", "ext4_mballoc_alloc")):
        pytest.skip("needs tracefs with the ext4 events at %s" % TRACEFS)
    inst = os.path.join(TRACEFS, "instances", "rrfuse-test-%d" % os.getpid())
    os.mkdir(inst)
    return inst


def test_kernel_trace_reads_with_the_same_parser(tmp_path):
    inst = tracefs_instance(tmp_path)
    image = make_image(size="256M")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    loop = subprocess.run(["losetup", "-f", "--show", image], capture_output=True, text=True,
                          check=True).stdout.strip()
    try:
        rdev = os.stat(loop).st_rdev
        dev = (os.major(rdev), os.minor(rdev))
        subprocess.run(["mount", "-t", "ext4", loop, str(mnt)], check=True)
        try:
            enable_kernel_trace(inst, dev)
            sizes = workload(str(mnt))
            ino_del = os.stat(mnt / DELETED).st_ino
            os.unlink(mnt / DELETED)
            os.sync()
        finally:
            subprocess.run(["umount", str(mnt)], check=True)
        with open(os.path.join(inst, "trace")) as f:
            text = f.read()
    finally:
        subprocess.run(["losetup", "-d", loop])
        for e in ext4trace.EVENTS:
            with open(os.path.join(inst, "events", "ext4", e, "enable"), "w") as f:
                f.write("0")
        os.rmdir(inst)
    path = tmp_path / "kernel.trace"
    path.write_text(text)
    recs = strict_records(str(path), dev)
    assert {r["dev"] for r in recs} == {dev}
    ino_of = inodes(image, [n for n in sizes if n != DELETED])
    ino_of[DELETED] = ino_del
    check_trace(recs, image, ino_of, sizes, deleted_blocks(recs, ino_del, image))
    # The kernel names the owner of what it frees.
    assert any(r["event"] == "ext4_free_blocks" and r["ino"] == ino_del for r in recs)
    # rrfuse, asked the same, asks its allocator the same: file by file, the same requests.
    if not KERNEL:
        ours, ours_ino = rrfuse_run(str(tmp_path / "rrfuse.trace"))
        assert requests_by_name(ours, ours_ino) == requests_by_name(recs, {i: n for n, i in ino_of.items()})


RRREPLAY = os.path.join(os.path.dirname(RRFUSE), "rrreplay")


def replay(*args):
    r = subprocess.run([RRREPLAY, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return {l.split()[0]: l.split()[1] for l in r.stdout.splitlines()}


@pytest.mark.rrfuse_only
def test_rrreplay_replays_rrfuse_trace(tmp_path):
    if not os.access(RRREPLAY, os.X_OK):
        pytest.skip("rrreplay not built")
    trace, start = str(tmp_path / "alloc.trace"), str(tmp_path / "start.img")
    recs, _ = rrfuse_run(trace, start)
    with open(start, "rb") as f:
        before = hashlib.sha256(f.read()).hexdigest()
    out = replay("-t", str(tmp_path / "replayed.trace"), trace, start)
    nreq = sum(r["event"] == "ext4_request_blocks" for r in recs)
    assert int(out["requests"]) == nreq and out["policy"] == "regular", out
    assert int(out["answered"]) == sum(r["event"] in ("ext4_mballoc_alloc", "ext4_mballoc_prealloc")
                                       for r in recs)
    assert int(out["failed"]) == 0 and float(out["requests_per_second"]) > 0, out
    # How much agrees is not asserted: the daemon's requests depend on its commits and its
    # writeback, which the trace carries only in part (doc/evidence.md, rrreplay).
    assert 0 <= int(out["same_start"]) <= int(out["answered"]), out
    # The replay's own trace parses as the kernel's, and replays onto itself exactly.
    again = replay(str(tmp_path / "replayed.trace"), start)
    assert again["same_start"] == again["answered"] == out["answered"], again
    # Other policies replay too; the starting image is only read.
    other = replay("-o", "allocator=rralloc,max_prealloc_kb=32768", trace, start)
    assert other["policy"] == "rralloc" and other["requests"] == out["requests"], other
    with open(start, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == before
    rc, msg = fsck(start)
    assert rc == 0, msg


# The share of paired data requests the test workload places at the kernel's own start: 6 of 6
# (2026-12-07, six runs alike, since regular's first-window departure is gone; 5 of 6 before).
# The floor is 5 of 6: one request of margin.
SAME_START_FLOOR = 83.0


def load_all_groups(st_dev):
    """Have the kernel load every group's buddy now (reading mb_groups does).  Freshly
    mounted, the kernel's cheap criteria pass over a group it has not loaded yet (unless
    first in its flex group), and when a read-ahead makes one usable depends on its I/O:
    the first files of a fresh mount then go to group 0 where rrfuse, which loads the
    groups ahead before it searches, takes group 1 (doc/evidence.md).  Loaded, both
    sides search the same groups and compare policy against policy."""
    name = os.path.basename(os.readlink("/sys/dev/block/%d:%d" % (os.major(st_dev), os.minor(st_dev))))
    with open("/proc/fs/ext4/%s/mb_groups" % name) as f:
        f.read()


def traced_run(tmp_path, kernel, inst=None):
    """The test workload on a fresh image, one writer, traced: the trace's records."""
    image = make_image(size="256M")
    trace = str(tmp_path / ("kernel.trace" if kernel else "rrfuse.trace"))
    m = Mount(image, kernel=kernel, opts="" if kernel else "alloc_trace=" + trace)
    m.mount()
    try:
        if kernel:
            st = os.stat(m.mnt).st_dev
            load_all_groups(st)
            enable_kernel_trace(inst, (os.major(st), os.minor(st)))
        workload(m.mnt)
        os.unlink(m.path(DELETED))
        m.unmount()
    finally:
        m.cleanup()
    if kernel:
        with open(os.path.join(inst, "trace")) as f, open(trace, "w") as out:
            out.write(f.read())
    rc, out = fsck(image)
    assert rc == 0, out
    return strict_records(trace)


@pytest.mark.rrfuse_only
def test_rrfuse_places_requests_as_the_kernel(tmp_path):
    """rrbench fidelity's comparison (ext4trace.compare) on the test workload: one writer, so
    both sides ask in one order; every data request pairs, the share placed at the
    kernel's start stays above what was measured, less a margin, and those are answered
    alike (criterion or preallocation)."""
    inst = tracefs_instance(tmp_path)
    # Small files take their blocks from their CPU's locality group, on both sides: the writer
    # and the daemon (started from here, so it inherits this) on one CPU, one locality group.
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        krecs = traced_run(tmp_path, True, inst)
        rrecs = traced_run(tmp_path, False)
    finally:
        os.sched_setaffinity(0, cpus)
        for e in ext4trace.EVENTS:
            with open(os.path.join(inst, "events", "ext4", e, "enable"), "w") as f:
                f.write("0")
        os.rmdir(inst)
    res = ext4trace.compare(krecs, rrecs)
    print(res)
    assert res["kernel_requests"] == res["rrfuse_requests"] == res["paired"] > 0, res
    assert res["unpaired_kernel"] == res["unpaired_rrfuse"] == 0, res
    assert res["same_len_pct"] == 100.0, res
    assert res["same_start_pct"] >= SAME_START_FLOOR, res
    # Placed alike, answered alike: a search's criterion as the kernel's trace names it (a
    # request its goal served too: 83 % before rrfuse named those as the kernel does).
    assert res["same_how_pct"] == 100.0, res
