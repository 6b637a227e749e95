"""rrctl through real mounts: list, get and set every tunable live, the
refusals (non-zero exit, value unchanged), who may set, the kernel's
mb_groups and mb_stats text, changes in the middle of a write workload,
and malformed ioctls that must not hurt the daemon.

Every mount ends with the fixtures' unmount (daemon exit 0), ``e2fsck -fn``
and the kernel cross-check; the suite's ``RRFUSE_OPTS=check`` also has the
engine verify its buddies after every change, also across live changes.
"""
import errno
import fcntl
import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import RRCTL, RRFUSE, REPO, Mount, fsck, loop_works, make_image, pattern, wait_for
from test_unprivileged import user_dir  # noqa: F401 - the fixture

pytestmark = pytest.mark.rrfuse_only


MAN = os.path.join(REPO, "doc", "rrctl.8")

DEFAULTS = {
    "mb_max_prealloc_kb": "8192", "mb_stream_req": "16", "mb_group_prealloc": "512",
    "mb_min_to_scan": "10", "mb_max_to_scan": "200", "mb_order2_req": "2",
    "mb_optimize_scan": "0",     # < 16 groups: off, as the kernel
    "mb_best_avail_max_trim_order": "3", "mb_stats": "0",
    "rr_best_fit": "1",          # the kernel's choice within a group, in every mode
    "allocator": "regular",
    "alloc_trace": "",           # no trace unless -o alloc_trace=FILE
}

# The ioctls (include/rrfuse/rrctl_wire.h), built here independently of rrctl.
MAGIC = 0xE4
TUNABLE = struct.Struct("<IIiI32s64s128s")
GROUP_FIELDS = 4 + 18
GROUPS_HDR = struct.Struct("<IIiIIIII")
GROUPS_SIZE = GROUPS_HDR.size + 128 * GROUP_FIELDS * 4
# counters, the cache's, the device's, requests, forgotten; the ring's (a count, four uint32);
# the policy checks' (refused by kind, policies switched off); the requests' time by opcode;
# the device's data write syscalls; its writebacks started early
STATS_SIZE = 4 * 4 + 8 * (14 + 4 * 5 + 7 + 6 + 1 + 64 + 1) + 8 + 4 * 4 + 8 * (4 + 1) + 8 * 64 + 8 + 8 + 8 * 5


def iowr(nr, size):
    return (3 << 30) | (size << 16) | (MAGIC << 8) | nr


GET, SET = iowr(1, TUNABLE.size), iowr(2, TUNABLE.size)
GROUPS, STATS = iowr(3, GROUPS_SIZE), iowr(4, STATS_SIZE)


def rrctl(*args, check=True, **kw):
    if not os.access(RRCTL, os.X_OK):
        pytest.skip("rrctl missing: %s (build it or set RRCTL=)" % RRCTL)
    r = subprocess.run([RRCTL] + [str(a) for a in args], capture_output=True, text=True,
                       timeout=60, **kw)
    if check:
        assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r


def kernels_linear_groups(near):
    """The kernel's mb_max_linear_groups for an image in near's directory (its
    device rotational or not), read from its sysfs on a loop mount; else
    what ext4_mb_init would choose from the device's queue/rotational."""
    d = tempfile.mkdtemp(dir=os.path.dirname(near))
    img, mnt = os.path.join(d, "img"), os.path.join(d, "mnt")
    try:
        if loop_works():
            os.mkdir(mnt)
            subprocess.run(["truncate", "-s", "64M", img], check=True)
            subprocess.run(["mke2fs", "-q", "-t", "ext4", "-F", img], check=True)
            subprocess.run(["mount", "-o", "loop", img, mnt], check=True)
            try:
                dev = os.path.basename(subprocess.run(["findmnt", "-n", "-o", "SOURCE", mnt],
                                                      capture_output=True, text=True,
                                                      check=True).stdout.strip())
                with open("/sys/fs/ext4/%s/mb_max_linear_groups" % dev) as f:
                    return f.read().strip()
            finally:
                subprocess.run(["umount", mnt], check=True)
        st = os.stat(near)
        for q in ("queue/rotational", "../queue/rotational"):
            p = "/sys/dev/block/%d:%d/%s" % (os.major(st.st_dev), os.minor(st.st_dev), q)
            if os.path.exists(p):
                with open(p) as f:
                    return "4" if f.read().strip() == "1" else "0"
        return "0"
    finally:
        shutil.rmtree(d, ignore_errors=True)


def values(mnt):
    out = rrctl(mnt).stdout
    lines = out.splitlines()
    # Every value is one word; alloc_trace's is empty while no trace runs.
    assert all(re.fullmatch(r"[a-z0-9_]+ = \S+", l) or l == "alloc_trace = " for l in lines), out
    return dict(l.split(" = ") for l in lines)


def test_list_get_set_every_tunable(fs):
    v = values(fs.mnt)
    # Where allocator=NAME finds NAME.so: the installed policy directory (doc/policies.md).
    assert v.pop("policy_dir").endswith("/rrfuse/policies"), v
    # As the kernel's for the same device: 4 when rotational, else 0.
    assert v.pop("mb_max_linear_groups") == kernels_linear_groups(fs.image)
    assert v == DEFAULTS
    # Each tunable: set, printed back, read back, listed.
    new = {"mb_stream_req": "32", "mb_group_prealloc": "1024", "mb_min_to_scan": "5",
           "mb_max_to_scan": "100", "mb_order2_req": "3", "mb_max_linear_groups": "4",
           "mb_optimize_scan": "1", "mb_best_avail_max_trim_order": "2", "mb_stats": "1",
           "mb_max_prealloc_kb": "32768", "rr_best_fit": "0", "allocator": "regular",
           "policy_dir": "/tmp", "alloc_trace": ""}
    for k, v in new.items():
        assert rrctl(fs.mnt, "%s=%s" % (k, v)).stdout == "%s = %s\n" % (k, v)
        assert rrctl(fs.mnt, k).stdout == "%s = %s\n" % (k, v)
    assert values(fs.mnt) == new
    # Several at once, and a 0x value as the kernel's kstrtouint takes it.
    r = rrctl(fs.mnt, "mb_stats=0", "mb_order2_req=0x4", "mb_stats")
    assert r.stdout == "mb_stats = 0\nmb_order2_req = 4\nmb_stats = 0\n"


@pytest.mark.parametrize("given,kept", [("100", "8192"), ("8192", "8192"), ("8193", "16384"),
                                        ("10000", "16384"), ("65536", "65536"),
                                        ("2147483648", "2147483648")])
def test_max_prealloc_kb_clamps_and_rounds(fs, given, kept):
    # The alias and the kernel's name are one value.
    assert rrctl(fs.mnt, "max_prealloc_kb=" + given).stdout == "max_prealloc_kb = %s\n" % kept
    assert rrctl(fs.mnt, "mb_max_prealloc_kb").stdout == "mb_max_prealloc_kb = %s\n" % kept
    assert rrctl(fs.mnt, "max_prealloc_kb").stdout == "max_prealloc_kb = %s\n" % kept


@pytest.mark.parametrize("arg,words", [
    ("mb_max_prealloc_kb=abc", ["bad value", "abc"]),
    ("max_prealloc_kb=2147483649", ["overflows"]),        # rounds up past 2^32
    ("max_prealloc_kb=99999999999", ["bad value"]),
    ("max_prealloc_kb=12k", ["bad value"]),
    ("mb_stream_req=-1", ["bad value"]),
    ("mb_stream_req=", ["bad value"]),
    ("mb_stream_req= 5", ["bad value"]),
    ("mb_stats=2", ["at most 1"]),
    ("mb_optimize_scan=yes", ["bad value"]),
    ("mb_order2_req=65", ["at most 64"]),
    ("mb_best_avail_max_trim_order=65", ["at most 64"]),
    ("mb_group_prealloc=32769", ["at most 32768", "blocks per group"]),
    ("allocator=nope", ["unknown allocator", "nope", "regular"]),
    ("allocator=", ["unknown allocator"]),
    ("allocator=no.pe", ["unknown allocator"]),
    ("policy_dir=relative", ["bad value", "absolute"]),
    ("mb_nope=1", ["unknown", "mb_nope"]),
    ("check=1", ["unknown"]),                               # a mount option, not live
    ("mb_nope", ["unknown", "mb_nope"]),
    ("x" * 40 + "=1", ["unknown"]),
    ("mb_stream_req=" + "1" * 70, ["too long"]),
])
def test_refusals_leave_values_unchanged(fs, arg, words):
    before = values(fs.mnt)
    r = rrctl(fs.mnt, arg, check=False)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stdout == ""
    assert r.stderr.startswith("rrctl: ") and r.stderr.count("\n") == 1, r.stderr
    for w in words:
        assert w in r.stderr, r.stderr
    assert values(fs.mnt) == before


def test_partial_failure_is_reported(fs):
    # As sysctl: every argument is done, the exit status says one failed.
    r = rrctl(fs.mnt, "mb_stream_req=64", "mb_stats=7", "mb_max_to_scan=50", check=False)
    assert r.returncode == 1
    assert r.stdout == "mb_stream_req = 64\nmb_max_to_scan = 50\n"
    assert "mb_stats" in r.stderr
    assert values(fs.mnt)["mb_stats"] == "0"


def test_usage_and_not_rrfuse(tmp_path):
    r = rrctl(check=False)
    assert r.returncode == 2 and "usage" in r.stderr
    for args in (["-x"], ["-g", "-s"], ["mb_stats", "-g"], ["-s", "mb_stats"]):
        r = rrctl(tmp_path, *args, check=False)
        assert r.returncode == 2 and "usage" in r.stderr, (args, r.stderr)
    r = rrctl(tmp_path, check=False)
    assert r.returncode == 1 and "not an rrfuse mount point" in r.stderr, r.stderr
    r = rrctl(tmp_path / "missing", check=False)
    assert r.returncode == 1 and "No such file" in r.stderr


@pytest.mark.opts("allow_other")
def test_others_read_but_may_not_set(fs, as_user):
    mine = values(fs.mnt)
    r = as_user([RRCTL, fs.mnt])
    assert r.returncode == 0, r.stderr
    assert r.stdout == "".join("%s = %s\n" % kv for kv in mine.items())
    for arg in ("-g", "-s", "mb_stats"):
        r = as_user([RRCTL, fs.mnt, arg])
        assert r.returncode == 0 and r.stdout, (arg, r.stderr)
    r = as_user([RRCTL, fs.mnt, "mb_stream_req=99"])
    assert r.returncode == 1
    assert "permission denied" in r.stderr and "owner or root" in r.stderr, r.stderr
    assert values(fs.mnt) == mine
    # The refusal comes from the daemon, not from rrctl: the raw ioctl gets EPERM.
    def raw_set():
        fd = os.open(fs.mnt, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.ioctl(fd, SET, bytearray(tunable(name=b"mb_stream_req", value=b"99")))
        finally:
            os.close(fd)
    with pytest.raises(PermissionError):
        as_user(raw_set)
    assert values(fs.mnt) == mine


# ------------------------------------------------------------------ mb_groups

HEADER = ("#group: free  frags first [ 2^0   2^1   2^2   2^3   2^4   2^5   2^6  "
          " 2^7   2^8   2^9   2^10  2^11  2^12  2^13  ]")


def parse_groups(out):
    lines = out.splitlines()
    assert lines[0] == HEADER
    groups = []
    for i, l in enumerate(lines[1:]):
        # "#%-5u: %-5u %-5u %-5u [" then 14 times " %-5u", then " ]"
        m = re.fullmatch(r"#(\d+) *: (\d+) +(\d+) +(\d+) +\[((?: \d+ *){14})\]", l)
        assert m, repr(l)
        assert l[:7] == "#%-5u:" % i and l[7:25] == " %-5s %-5s %-5s" % m.group(2, 3, 4), repr(l)
        groups.append([int(x) for x in m.group(2, 3, 4)] + [int(x) for x in m.group(5).split()])
    return groups


def dumpe2fs_free_runs(image):
    """{group: [(start, end)]} of free blocks, group-relative, from dumpe2fs."""
    out = subprocess.run(["dumpe2fs", image], capture_output=True, text=True, check=True).stdout
    runs, g, first = {}, None, 0
    for l in out.splitlines():
        m = re.match(r"Group (\d+): \(Blocks (\d+)-(\d+)\)", l)
        if m:
            g, first = int(m.group(1)), int(m.group(2))
            runs[g] = []
        m = re.match(r"\s+Free blocks: (.*)", l)
        if m and g is not None and m.group(1).strip():
            for part in m.group(1).split(","):
                a, _, b = part.strip().partition("-")
                runs[g].append((int(a) - first, int(b or a) - first))
    return runs


def buddy_line(runs, bpg, max_order=13):
    """free, frags, first and the order counters a buddy of these runs has."""
    counters = [0] * 14
    for s, e in runs:
        p = s
        while p <= e:
            k = max_order
            while k and (p % (1 << k) or p + (1 << k) - 1 > e):
                k -= 1
            counters[k] += 1
            p += 1 << k
    free = sum(e - s + 1 for s, e in runs)
    return [free, len(runs), runs[0][0] if runs else bpg] + counters


@pytest.mark.image(size="1G")
def test_groups_agree_with_the_image(fs):
    # No locality-group preallocations: every closed file leaves none behind.
    rrctl(fs.mnt, "mb_group_prealloc=0")
    for i, size in enumerate([5 << 20, 300 << 10, 1 << 20, 70 << 20, 12345]):
        with open(os.path.join(fs.mnt, "f%d" % i), "wb") as f:
            f.write(pattern(i, size))
    os.unlink(os.path.join(fs.mnt, "f2"))
    # Held data's blocks are promised (statfs counts them used), not in the buddies: written back first.
    rrctl(fs.mnt, "sync")

    def settled():
        groups = parse_groups(rrctl(fs.mnt, "-g").stdout)
        st = os.statvfs(fs.mnt)
        # PAs are free on disk, used in the buddy: none left once the sums agree.
        return groups if sum(g[0] for g in groups) == st.f_bfree else None
    groups = wait_for(settled, timeout=10)
    assert groups, "rrctl -g free blocks never matched statfs"
    assert len(groups) == 8
    for g in groups:
        # Each free block is in exactly one maximal chunk.
        assert sum(c << k for k, c in enumerate(g[3:])) == g[0], g
    fs.unmount()
    runs = dumpe2fs_free_runs(fs.image)
    assert sorted(runs) == list(range(8))
    for n, g in enumerate(groups):
        assert g == buddy_line(runs[n], 32768), (n, g, runs[n][:5])


@pytest.mark.image(size="20G")
def test_groups_page_through_many(fs):
    # 160 groups: more than one ioctl page (128); every group once, in order.
    groups = parse_groups(rrctl(fs.mnt, "-g").stdout)
    assert len(groups) == 160
    assert sum(g[0] for g in groups) == os.statvfs(fs.mnt).f_bfree
    # With 16 groups or more the kernel's default turns the optimised scan on.
    assert values(fs.mnt)["mb_optimize_scan"] == "1"


# ------------------------------------------------------------------ mb_stats

STATS_OFF = ("mballoc:\n\tmb stats collection turned off.\n"
             "\tTo enable, please write \"1\" to sysfs file mb_stats.\n")


def allocator_stats(mnt):
    """rrctl -s without its last seven lines, the policy checks'
    (test_policy_guard.py), the metadata cache's, the device's (test_cache.py
    reads those), the delayed data's (test_hold.py), the requests'
    (test_killpriv.py), their transport's
    (test_uring.py) and their time's."""
    out = rrctl(mnt, "-s").stdout
    assert out.splitlines()[-7].startswith("policy answers refused: "), out
    assert out.splitlines()[-6].startswith("metadata cache: "), out
    assert out.splitlines()[-5].startswith("device: "), out
    assert out.splitlines()[-4].startswith("delayed data: "), out
    assert out.splitlines()[-3].startswith("requests: "), out
    assert out.splitlines()[-2].startswith("transport: "), out
    assert out.splitlines()[-1].startswith("request time:"), out
    return out[:out.rindex("policy answers refused: ")]
STATS_KEYS = (["reqs", "success", "groups_scanned"] +
              [k for cr in ("p2_aligned", "goal_fast", "best_avail", "goal_slow", "any_free")
               for k in ("cr_%s_stats" % cr, "hits", "groups_considered", "extents_scanned",
                         "useless_loops")] +
              ["extents_scanned", "goal_hits", "stream_goal_hits", "len_goal_hits", "2^n_hits",
               "breaks", "lost", "buddies_generated", "buddies_time_used", "preallocated",
               "discarded"])


def parse_stats(out):
    lines = out.splitlines()
    assert lines[0] == "mballoc:"
    keys, vals = [], {}
    for l in lines[1:]:
        m = re.fullmatch(r"(\t\t?)([a-z0-9_^]+):(?: (\d+(?:/\d+)?))?", l)
        assert m, repr(l)
        keys.append(m.group(2))
        # Headers ("cr_..._stats:") at one tab, their fields at two.
        assert (m.group(3) is None) == m.group(2).startswith("cr_"), repr(l)
        if m.group(3):
            vals.setdefault(m.group(2), m.group(3))
    assert keys == STATS_KEYS, keys
    return vals


@pytest.mark.image(size="1G")
def test_stats_off_and_on(fs):
    assert allocator_stats(fs.mnt) == STATS_OFF
    rrctl(fs.mnt, "mb_stats=1")
    with open(os.path.join(fs.mnt, "big"), "wb") as f:
        for i in range(24):
            f.write(pattern(i, 1 << 20))
    for i in range(20):
        with open(os.path.join(fs.mnt, "small%d" % i), "wb") as f:
            f.write(b"x" * 5000)
    rrctl(fs.mnt, "sync")           # held data meets the allocator when written back
    v = parse_stats(allocator_stats(fs.mnt))
    assert int(v["reqs"]) > 0 and int(v["success"]) > 0
    assert int(v["preallocated"]) > 0
    assert re.fullmatch(r"\d+/8", v["buddies_generated"]), v
    assert v["lost"] == "0"
    # Turned off: the kernel's text again; counting stopped, counts kept.
    rrctl(fs.mnt, "mb_stats=0")
    assert allocator_stats(fs.mnt) == STATS_OFF
    with open(os.path.join(fs.mnt, "more"), "wb") as f:
        f.write(pattern(99, 3 << 20))
    rrctl(fs.mnt, "sync")
    rrctl(fs.mnt, "mb_stats=1")
    assert parse_stats(allocator_stats(fs.mnt))["reqs"] == v["reqs"]


# ------------------------------------------------------ live, under writes

def policies(mnt):
    """The registered policies, as the refusal of an unknown one lists them."""
    r = rrctl(mnt, "allocator=?", check=False)
    m = re.search(r"\(known: ([a-z0-9_, ]+)[;)]", r.stderr)
    assert r.returncode == 1 and m, r.stderr
    # liar is fault injection: the engine switches it off (test_policy_guard.py).
    return [n for n in m.group(1).split(", ") if n != "liar"]


@pytest.mark.image(size="1G")
def test_live_changes_during_writes(fs):
    names = policies(fs.mnt)
    assert "regular" in names
    stop = threading.Event()
    errors = []
    progress = [0]                          # 128 KiB chunks written, all writers

    def writer(k):
        try:
            n = 0
            while not stop.is_set():
                path = os.path.join(fs.mnt, "w%d_%d" % (k, n))
                with open(path, "wb") as f:
                    for j in range(16):
                        f.write(pattern((k, n, j), 128 << 10))
                        if j % 4 == 3:
                            f.flush()
                            os.fsync(f.fileno())
                        progress[0] += 1
                if n % 3 == 2:
                    os.unlink(path)
                n += 1
        except Exception as e:              # noqa: BLE001 - reported below
            errors.append(repr(e))
    threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    try:
        for i in range(max(6, 3 * len(names))):
            # Each change lands between writes: the writers move on before the next one.
            seen = progress[0]
            rrctl(fs.mnt, "allocator=" + names[i % len(names)],
                  "max_prealloc_kb=%d" % (32768 if i % 2 else 8192),
                  "mb_optimize_scan=%d" % (i % 2), "mb_stats=%d" % (1 - i % 2),
                  "mb_group_prealloc=%d" % (256 << (i % 3)), "mb_stream_req=%d" % (8 + i))
            rrctl(fs.mnt, "-g")
            rrctl(fs.mnt, "-s")
            assert wait_for(lambda: progress[0] >= seen + 8 or errors, timeout=30), "writers stalled"
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    last = values(fs.mnt)
    assert last["mb_max_prealloc_kb"] == str(32768 if i % 2 else 8192)
    assert last["allocator"] == names[i % len(names)] and last["mb_stream_req"] == str(8 + i)
    rrctl(fs.mnt, "allocator=regular")
    # What was written is what reads back (the fixture then unmounts, fscks, cross-checks).
    for name in os.listdir(fs.mnt):
        m = re.fullmatch(r"w(\d+)_(\d+)", name)
        if m:
            k, n = int(m.group(1)), int(m.group(2))
            with open(os.path.join(fs.mnt, name), "rb") as f:
                got = f.read()
            # The file a writer was on when it stopped is complete too (closed before join).
            assert got == b"".join(pattern((k, n, j), 128 << 10) for j in range(16)), name


@pytest.mark.image(size="1G")
def test_max_prealloc_kb_takes_effect_live(fs):
    """A file's preallocation window follows the value set while mounted.

    What a file holds preallocated shows as the difference between statfs's
    free blocks (PAs are free on disk) and -g's (used in the buddy)."""
    def held():
        groups = parse_groups(rrctl(fs.mnt, "-g").stdout)
        return os.statvfs(fs.mnt).f_bfree - sum(g[0] for g in groups)

    most = {}
    for kb in (8192, 65536, 8192):
        rrctl(fs.mnt, "max_prealloc_kb=%d" % kb)
        fd = os.open(os.path.join(fs.mnt, "f%d_%d" % (kb, len(most))), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            n = 0
            for i in range(40):
                os.write(fd, pattern(i, 1 << 20))
                os.fsync(fd)
                n = max(n, held())
        finally:
            os.close(fd)
        most.setdefault(kb, []).append(n)
    # 8 MiB windows hold at most 2048 blocks beyond a request; 64 MiB ones far more.
    assert max(most[8192]) <= 2048 < 4096 < most[65536][0], most


# ------------------------------------------------------------ bad ioctls

def tunable(version=1, index=0, name=b"", value=b""):
    return TUNABLE.pack(version, index, 0, 0, name, value, b"")


def ioctl(path, cmd, buf):
    fd = os.open(path, os.O_RDONLY)
    try:
        b = bytearray(buf)
        fcntl.ioctl(fd, cmd, b)
        return b
    finally:
        os.close(fd)


def test_malformed_ioctls(fs):
    def refused(cmd, buf, err, path=fs.mnt):
        with pytest.raises(OSError) as e:
            ioctl(path, cmd, buf)
        assert e.value.errno == err, (hex(cmd), e.value)

    refused(GET, tunable(version=2, name=b"mb_stats"), errno.EINVAL)
    refused(GET, tunable(version=0), errno.EINVAL)
    refused(GET, b"a" * TUNABLE.size, errno.EINVAL)              # garbage: version 0x61616161
    # Strings must end inside their fields.
    raw = bytearray(tunable(name=b"mb_stats"))
    raw[16:48] = b"m" * 32
    refused(GET, raw, errno.EINVAL)
    raw = bytearray(tunable(name=b"mb_stats", value=b"1"))
    raw[48:112] = b"1" * 64
    refused(SET, raw, errno.EINVAL)
    # Unknown command numbers and sizes of ours, and others' type byte.
    refused(iowr(9, TUNABLE.size), bytes(TUNABLE.size), errno.ENOTTY)
    refused(iowr(1, 100), struct.pack("<I", 1) + bytes(96), errno.ENOTTY)
    refused(iowr(3, 64), struct.pack("<I", 1) + bytes(60), errno.ENOTTY)
    # Only on the mount's root.
    open(os.path.join(fs.mnt, "file"), "w").close()
    refused(GET, tunable(name=b"mb_stats"), errno.ENOTTY, os.path.join(fs.mnt, "file"))
    os.mkdir(os.path.join(fs.mnt, "dir"))
    refused(GET, tunable(name=b"mb_stats"), errno.ENOTTY, os.path.join(fs.mnt, "dir"))

    # Well formed: results in the record.
    out = TUNABLE.unpack(ioctl(fs.mnt, GET, tunable(name=b"mb_stats")))
    assert out[2] == 0 and out[5].rstrip(b"\0") == b"0"
    out = TUNABLE.unpack(ioctl(fs.mnt, GET, tunable(index=1000)))
    assert out[2] == errno.ENOENT
    out = TUNABLE.unpack(ioctl(fs.mnt, SET, tunable(name=b"mb_stats", value=b"5")))
    assert out[2] == errno.EINVAL and b"at most 1" in out[6]
    # A page past the last group: nothing, and the group count.
    buf = struct.pack("<II", 1, 1 << 31) + bytes(GROUPS_SIZE - 8)
    hdr = GROUPS_HDR.unpack_from(ioctl(fs.mnt, GROUPS, buf))
    assert hdr[2] == 0 and hdr[3] == 0 and hdr[4] == 2, hdr
    # Random bytes with a valid version: refused or answered, never a crash.
    import random
    rnd = random.Random(7)
    for cmd, size in ((GET, TUNABLE.size), (SET, TUNABLE.size), (GROUPS, GROUPS_SIZE),
                      (STATS, STATS_SIZE)):
        for _ in range(20):
            buf = struct.pack("<I", 1) + rnd.randbytes(size - 4)
            try:
                ioctl(fs.mnt, cmd, buf)
            except OSError as e:
                assert e.errno in (errno.EINVAL, errno.EPERM), e
    assert fs.daemon_alive()
    assert values(fs.mnt)["mb_stats"] == "0"      # nothing random got through: no terminator


def test_manual_lists_every_key(fs):
    with open(MAN) as f:
        bold = "\n".join(l.replace("\\-", "-") for l in f if l.startswith(".B"))
    keys = list(values(fs.mnt)) + ["max_prealloc_kb"]
    missing = [k for k in keys if not re.search(r"\b%s\b" % re.escape(k), bold)]
    assert not missing, "keys not in doc/rrctl.8: %s" % missing


def test_help_lists_every_key(fs):
    out = subprocess.run([RRCTL, "--help"], capture_output=True, text=True).stdout
    named = set(re.findall(r"[a-z_0-9]+", out.split("show KEY:")[1].split("KEY=VALUE")[0]))
    keys = list(values(fs.mnt)) + ["max_prealloc_kb"]
    assert named == set(keys), "rrctl --help and rrctl MOUNTPOINT differ: %s" % (named ^ set(keys))


def test_read_only_mount_says_so(mount_factory):
    m = mount_factory(opts="ro")
    for args in ((), ("mb_stats",), ("mb_stats=1",), ("-g",), ("-s",)):
        r = rrctl(m.mnt, *args, check=False)
        assert r.returncode == 1 and "read-only" in r.stderr, (args, r.stderr)


def test_owner_sets_on_own_mount(user_dir):
    """A user's own mount (no root anywhere): the owner may set."""
    from test_unprivileged import UID, GID, daemon_gone, mounted, user
    from conftest import fsck
    img = os.path.join(user_dir, "img")
    mnt = os.path.join(user_dir, "mnt")
    r = user("truncate -s 64M {0} && mke2fs -q -t ext4 -F -E root_owner={1}:{2} {0} "
             "&& mkdir {3}".format(img, UID, GID, mnt))
    assert r.returncode == 0, r.stderr
    r = user([RRFUSE, img, mnt])
    assert r.returncode == 0, r.stderr
    try:
        r = user([RRCTL, mnt, "mb_stats=1", "max_prealloc_kb=20000"])
        assert r.returncode == 0, r.stderr
        assert r.stdout == "mb_stats = 1\nmax_prealloc_kb = 32768\n"
        r = user([RRCTL, mnt, "-s"])
        assert r.returncode == 0 and "\treqs: " in r.stdout, r.stdout + r.stderr
    finally:
        r = user([RRFUSE, "-u", mnt])
        if mounted(mnt):
            subprocess.run(["umount", "-l", mnt])
    assert r.returncode == 0, r.stderr
    assert wait_for(lambda: daemon_gone(img), timeout=30)
    rc, out = fsck(img)
    assert rc == 0, out


# ------------------------------------------------------ the daemon's log

@pytest.fixture
def syslog_lines():
    """lines(pid): what a daemon sent to syslog, the 'rrfuse[PID]: ' prefix
    removed.  Where no syslog daemon listens, /dev/log is this fixture's."""
    import socket
    if os.geteuid() != 0:
        pytest.skip("needs root")
    got = []
    sock = None
    if not os.path.exists("/dev/log"):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind("/dev/log")
        sock.settimeout(0.2)

        def recv():
            while sock is not None:
                try:
                    got.append(sock.recv(65536).decode(errors="replace"))
                except socket.timeout:
                    continue
                except OSError:
                    return
        t = threading.Thread(target=recv, daemon=True)
        t.start()
    elif subprocess.run(["which", "journalctl"], capture_output=True).returncode:
        pytest.skip("/dev/log has a listener other than journald: cannot read it back")

    def lines(pid):
        tag = "rrfuse[%d]: " % pid
        if sock is None:
            r = subprocess.run(["journalctl", "-q", "-o", "cat", "_PID=%d" % pid],
                               capture_output=True, text=True)
            return r.stdout.splitlines()
        time.sleep(0.5)
        return [m.split(tag, 1)[1] for m in list(got) if tag in m]

    try:
        yield lines
    finally:
        if sock is not None:
            s, sock = sock, None
            s.close()
            os.unlink("/dev/log")


def test_background_daemon_logs_allocator(syslog_lines):
    # In the background stderr is /dev/null: the mb_stats report at unmount
    # (and the allocator's warnings) go where rrfuse's own messages go, to
    # syslog (lib/log.c).
    from conftest import fsck, make_image, wait_for as wait
    image = make_image(size="256M")
    mnt = os.path.join(os.path.dirname(image), "mnt")
    os.makedirs(mnt)
    opts = ",".join(o for o in (os.environ.get("RRFUSE_OPTS", ""), "mb_stats=1") if o)
    r = subprocess.run([RRFUSE, image, mnt, "-o", opts], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    pid = None
    for p in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if p.isdigit() and len(argv) > 2 and argv[1] == image.encode() and argv[2] == mnt.encode():
            pid = int(p)
    try:
        assert pid, "the daemon of %s not found" % image
        with open(os.path.join(mnt, "f"), "wb") as f:
            f.write(pattern(1, 4 << 20))
    finally:
        subprocess.run(["fusermount3", "-u", mnt], check=True)
    assert wait(lambda: not os.path.exists("/proc/%d" % pid), timeout=30)
    log = syslog_lines(pid)
    assert "mballoc:" in log, log
    v = parse_stats("\n".join(log[log.index("mballoc:"):][:len(STATS_KEYS) + 1]))
    assert int(v["reqs"]) > 0, v
    rc, out = fsck(image)
    assert rc == 0, out


@pytest.mark.parametrize("where", ["var", "shm"])
def test_linear_groups_follow_the_device_as_the_kernels(where):
    """mb_max_linear_groups as ext4_mb_init chooses it for the loop device
    the kernel would mount the image with: the backing device's rotational
    flag (here /var/tmp's disk), none for a file on tmpfs."""
    base = "/dev/shm" if where == "shm" else None
    if base and not os.path.isdir(base):
        pytest.skip("no /dev/shm")
    d = tempfile.mkdtemp(dir=base) if base else None
    image = make_image(size="64M", path=os.path.join(d, "image.img") if d else None)
    m = Mount(image).mount()
    try:
        got = values(m.mnt)["mb_max_linear_groups"]
        m.unmount()
    finally:
        m.cleanup()
    rc, out = fsck(image)
    assert rc == 0, out
    assert got == kernels_linear_groups(image), where
    if where == "shm":
        assert got == "0"
    shutil.rmtree(os.path.dirname(image), ignore_errors=True)


@pytest.mark.opts("delalloc=close")
def test_best_fit_is_not_decided_by_the_mode(fs):
    """rr_best_fit no longer follows the delalloc mode (it was on only
    under delalloc=hold): the kernel's choice in every mode (DEFAULTS
    above); an explicit value wins."""
    assert values(fs.mnt)["rr_best_fit"] == "1"


@pytest.mark.opts("delalloc=close,rr_best_fit=0")
def test_best_fit_explicit_wins(fs):
    assert values(fs.mnt)["rr_best_fit"] == "0"
