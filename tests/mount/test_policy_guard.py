"""The engine checks every answer of a policy (allocators/mb_guard.c).

The liar policy (allocators/liar.c) answers one request in four honestly
and the others with blocks outside the device, in metadata or in use.
Under a mixed workload (small and large files, appends, holes, fallocate,
symlinks, xattr blocks, deletes, directories) every lie must be refused and
counted in `rrctl -s`, by kind; the policy switched off after 64; the
daemon alive; the data read back as written; and, by the fs fixture's
teardown, the image e2fsck-clean and read identically by the kernel.
"""

import os
import re
import subprocess

import pytest

from conftest import RRCTL, fallocate, pattern, wait_for

pytestmark = pytest.mark.rrfuse_only

KINDS = ("outside the device", "in metadata", "in use")


def refusals(mnt):
    out = subprocess.run([RRCTL, mnt, "-s"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"policy answers refused: (\d+) outside the device, (\d+) in metadata, "
                  r"(\d+) in use, (\d+) reserved; (\d+) policies switched off", out)
    assert m, out
    return [int(x) for x in m.groups()]


def mixed_workload(root):
    """Write a tree; return {relative path: content} of what must read back."""
    want = {}

    def put(rel, data, mode="wb"):
        with open(os.path.join(root, rel), mode) as f:
            f.write(data)
        want[rel] = want.get(rel, b"") + data if mode == "ab" else data

    for d in range(4):
        os.makedirs(os.path.join(root, "d%d" % d, "sub"))
        for i in range(40):
            put("d%d/f%d" % (d, i), pattern((d, i), 100 + 997 * i))
    big = pattern("big", 6 << 20)
    with open(os.path.join(root, "big"), "wb") as f:
        for off in range(0, len(big), 256 << 10):
            f.write(big[off:off + (256 << 10)])
            os.fsync(f.fileno())
    want["big"] = big
    for i in range(20):
        put("d0/f%d" % i, pattern(("app", i), 5000), "ab")
    with open(os.path.join(root, "holes"), "wb") as f:
        for k in range(8):
            f.seek(k * (1 << 20))
            f.write(pattern(("hole", k), 4096))
    want["holes"] = b"".join((b"\0" * ((1 << 20) - 4096) if k else b"") + pattern(("hole", k), 4096)
                             for k in range(8))
    fd = os.open(os.path.join(root, "falloc"), os.O_CREAT | os.O_RDWR, 0o644)
    fallocate(fd, 0, 0, 3 << 20)
    os.pwrite(fd, b"x" * 8192, 1 << 20)
    os.close(fd)
    want["falloc"] = b"\0" * (1 << 20) + b"x" * 8192 + b"\0" * ((2 << 20) - 8192)
    for i in range(10):
        os.symlink("t" * 300 + str(i), os.path.join(root, "d1", "sub", "l%d" % i))
        os.setxattr(os.path.join(root, "d2/f%d" % i), "user.big", pattern(("x", i), 3000))
    for i in range(0, 40, 3):
        os.unlink(os.path.join(root, "d3/f%d" % i))
        del want["d3/f%d" % i]
    for i in range(30):
        put("d3/sub/n%d" % i, pattern(("n", i), 20000))
    # Files past mb_stream_req (64 KiB) get a search each, not a locality group's preallocation.
    os.mkdir(os.path.join(root, "streams"))
    for i in range(150):
        put("streams/s%d" % i, pattern(("s", i), 70000 + 100 * i))
    # Written back: held data meets the allocator at a sync, not at close.
    subprocess.run([RRCTL, root, "sync"], check=True)
    return want


@pytest.mark.opts("allocator=liar")
def test_liar_refused_and_switched_off(fs):
    want = mixed_workload(fs.mnt)
    outside, meta, used, reserved, off = refusals(fs.mnt)
    total = outside + meta + used + reserved
    print("refused: %d outside, %d metadata, %d used, %d reserved; %d off"
          % (outside, meta, used, reserved, off))
    assert outside and meta and used, (outside, meta, used)
    assert total >= 64 and off == 1, (total, off)
    assert fs.daemon_alive()
    log = fs.daemon_log
    for kind in ("outside the device or across", "in the filesystem's metadata", "in use: refused"):
        assert len(re.findall("allocator 'liar' chose blocks " + kind, log)) == 1, log
    assert "allocator 'liar' switched off after 64 refused answers" in log, log
    # The next rrctl command makes the switch visible.
    got = subprocess.run([RRCTL, fs.mnt, "allocator"], capture_output=True, text=True, check=True)
    assert got.stdout.strip() == "allocator = regular", got.stdout
    for rel, data in want.items():
        with open(os.path.join(fs.mnt, rel), "rb") as f:
            assert f.read() == data, rel
    fs.unmount()
    # Every lie told was refused: the liar's own count, at detach, equals the engine's.
    m = re.search(r"liar: lies told: (\d+) outside the device, (\d+) in metadata, (\d+) in use",
                  fs.daemon_log)
    assert m, fs.daemon_log
    assert [int(x) for x in m.groups()] == [outside, meta, used], (m.groups(), outside, meta, used)
    fs.mount()


def write_streams(root, prefix, n=120):
    """Files past mb_stream_req: a search each."""
    for i in range(n):
        with open(os.path.join(root, "%s%d" % (prefix, i)), "wb") as f:
            f.write(pattern(i, 70000))
    subprocess.run([RRCTL, root, "sync"], check=True)


def rrctl(*args):
    return subprocess.run([RRCTL] + list(args), capture_output=True, text=True, check=True).stdout


def test_liar_live_switch_and_back(fs):
    """Switched to live, the liar is refused too; switching it on again after
    it was switched off gives it a fresh count."""
    rrctl(fs.mnt, "allocator=liar")
    write_streams(fs.mnt, "f")
    assert wait_for(lambda: refusals(fs.mnt)[4] == 1), refusals(fs.mnt)
    assert rrctl(fs.mnt, "allocator").strip() == "allocator = regular"
    rrctl(fs.mnt, "allocator=liar")
    write_streams(fs.mnt, "g")
    assert wait_for(lambda: refusals(fs.mnt)[4] == 2), refusals(fs.mnt)
    for p in "fg":
        for i in range(120):
            with open(os.path.join(fs.mnt, "%s%d" % (p, i)), "rb") as f:
                assert f.read() == pattern(i, 70000)
