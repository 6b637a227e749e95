"""The allocation policies through mounts: rralloc walks the device, firstfit
stays low, regular stays in few groups; a file's own extents stay few.

The overwrite-cycle workload (../shared/BENCHMARKS.md W8): write 4 x 32 MiB,
delete them, repeat until 1.25x the device size has been written, all in
one mount.  Before each delete the files' extents are read from the image
(debugfs, read-only, after fsync has put the metadata on disk) and the
groups they lie in are counted.  The image has 32 groups of 16 MiB
(``mke2fs -g 4096``), so "groups touched" has room to differ.
"""

import os
import subprocess

import pytest

from conftest import RRFUSE, Mount, debugfs, fsck, make_image

pytestmark = pytest.mark.rrfuse_only

MIB = 1 << 20
SIZE = 512 * MIB
BPG = 4096                      # blocks of 4 KiB: 16 MiB groups, 32 of them
FILES, FILE_MIB = 4, 32


def extents(image, name):
    """Leaf extents of /name as (physical start, length)."""
    out = []
    for line in debugfs(image, "ex /" + name).splitlines()[1:]:
        f = line.replace("/", " / ").split()     # " 1/ 1   1/ 55  0 - 2047  4385 - 6432  2048"
        if len(f) >= 3 and f[1] == "/" and f[0] == f[2]:
            nums = [int(x) for x in f[6:] if x.isdigit()]
            # logical lo, hi, physical lo, (hi), length
            out.append((nums[2], nums[-1]))
    return out


def groups_of(exts):
    gs = set()
    for p, n in exts:
        gs.update(range(p // BPG, (p + n - 1) // BPG + 1))
    return gs


def overwrite_cycles(opts):
    """Run the workload; return (groups touched, leaf extents per file, groups in the fs)."""
    image = make_image(size=str(SIZE), mkfs_args=["-g", str(BPG)])
    m = Mount(image, opts=opts)
    m.mount()
    touched, nexts = set(), []
    try:
        block = os.urandom(MIB)
        written = 0
        cycle = 0
        while written < SIZE * 5 // 4:
            names = ["c%d-f%d" % (cycle, i) for i in range(FILES)]
            for n in names:
                with open(m.path(n), "wb") as f:
                    for _ in range(FILE_MIB):
                        f.write(block)
                    f.flush()
                    os.fsync(f.fileno())
                written += FILE_MIB * MIB
            for n in names:
                e = extents(image, n)
                assert sum(x[1] for x in e) == FILE_MIB * MIB // 4096, (n, e)
                nexts.append(len(e))
                touched |= groups_of(e)
            for n in names:
                os.unlink(m.path(n))
            cycle += 1
        assert m.daemon_alive(), m.daemon_log
        m.unmount()
    finally:
        m.cleanup()
    rc, out = fsck(image)
    assert rc == 0, out
    ngroups = (SIZE // 4096 + BPG - 1) // BPG
    subprocess.run(["rm", "-rf", os.path.dirname(image)])
    return touched, nexts, ngroups


def test_rralloc_walks_the_device_regular_does_not():
    rr_groups, rr_ext, n = overwrite_cycles("rralloc")
    reg_groups, reg_ext, _ = overwrite_cycles("allocator=regular")
    print("groups touched of %d: rralloc %d, regular %d; leaf extents: rralloc %d, regular %d"
          % (n, len(rr_groups), len(reg_groups), sum(rr_ext), sum(reg_ext)))
    assert len(rr_groups) >= 0.9 * n, sorted(rr_groups)
    # regular goes back to the same space after every delete (14 to 16 groups seen).
    assert len(reg_groups) <= 0.6 * n, sorted(reg_groups)
    # A file's own stream stays as contiguous as under regular.
    assert sum(rr_ext) <= 1.25 * sum(reg_ext), (rr_ext, reg_ext)


def test_firstfit_stays_low(fs):
    """firstfit: every rewrite lands at the lowest free addresses."""
    block = os.urandom(MIB)
    firsts = []
    for cycle in range(3):
        with open(fs.path("f"), "wb") as f:
            for _ in range(16):
                f.write(block)
            os.fsync(f.fileno())
        firsts.append(min(p for p, _ in extents(fs.image, "f")))
        os.unlink(fs.path("f"))
    # The same place every time (regular too would reuse it, rralloc would not).
    assert len(set(firsts)) == 1, firsts


test_firstfit_stays_low = pytest.mark.opts("allocator=firstfit")(test_firstfit_stays_low)


def test_rralloc_moves_on_after_delete(fs):
    """rralloc: a rewrite after a delete goes past the old file, not back into its space."""
    block = os.urandom(MIB)
    starts = []
    for cycle in range(3):
        with open(fs.path("f"), "wb") as f:
            for _ in range(8):
                f.write(block)
            os.fsync(f.fileno())
        starts.append(min(p for p, _ in extents(fs.image, "f")))
        os.unlink(fs.path("f"))
    # Each CPU's cursor only goes forward; the daemon's threads may run on either CPU.
    assert len(set(starts)) == 3, starts


test_rralloc_moves_on_after_delete = pytest.mark.opts("rralloc")(test_rralloc_moves_on_after_delete)


@pytest.mark.parametrize("name", ["bogus", "", "Regular"])
def test_unknown_allocator_refused(name, tmp_path):
    image = make_image(size="64M")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run([RRFUSE, image, str(mnt),
                        "-o", "allocator=" + name], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=30)
    assert r.returncode != 0
    assert "unknown allocator" in r.stdout and "regular, rralloc, firstfit" in r.stdout, r.stdout
    assert not os.path.ismount(mnt)
    subprocess.run(["rm", "-rf", os.path.dirname(image)])
