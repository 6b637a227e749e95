"""The ext4 orphan list: inodes unlinked while open (and shrinking
truncates) are listed on disk until they are freed, and a mount finishes
what a crash left, whoever left it (rrfuse, the kernel, or debugfs here).

Each test ends in e2fsck -fn (the fixtures) and, where the image allows it,
a kernel read-back.  The on-disk list is read with dumpe2fs/debugfs."""

import os
import re
import shutil
import struct
import subprocess

import pytest

from conftest import (KERNEL, RRFUSE, Mount, commit, debugfs, fsck, kill_daemon, loop_works,
                      make_image, pattern, syncfs, wait_for)

pytestmark = pytest.mark.rrfuse_only

MiB = 1 << 20
LEGACY = ()
ORPHAN_FILE = ("-O", "orphan_file")
FORMATS = pytest.mark.parametrize("mkfs", [LEGACY, ORPHAN_FILE],
                                  ids=["legacy", "orphan_file"])


# ------------------------------------------------------------ on-disk view

def sb_field(image, name):
    out = subprocess.run(["dumpe2fs", "-h", image], capture_output=True,
                         text=True).stdout
    m = re.search(r"^%s:\s*(.*)$" % re.escape(name), out, re.M)
    return m.group(1).strip() if m else None


def last_orphan(image):
    return int(sb_field(image, "First orphan inode") or 0)


def features(image):
    return (sb_field(image, "Filesystem features") or "").split()


def orphan_file_slots(image):
    """Inode numbers in the orphan file's slots (4 KiB blocks)."""
    ino = int(sb_field(image, "Orphan file inode"))
    raw = subprocess.run(["debugfs", "-R", "cat <%d>" % ino, image],
                         capture_output=True).stdout
    out = []
    for off in range(0, len(raw), 4096):
        blk = raw[off:off + 4096 - 8]
        out += [v for v in struct.unpack("<%dI" % (len(blk) // 4), blk) if v]
    return out


def listed(image):
    """Every inode on the on-disk list(s): the legacy chain, then the file."""
    out, ino, seen = [], last_orphan(image), set()
    while ino and ino not in seen:
        seen.add(ino)
        out.append(ino)
        st = debugfs(image, "stat <%d>" % ino)
        m = re.search(r"dtime: 0x([0-9a-f]+)", st)
        ino = int(m.group(1), 16) if m else 0
    if "orphan_file" in features(image):
        out += orphan_file_slots(image)
    return out


def free_blocks(path):
    syncfs(path)
    return os.statvfs(path).f_bfree


def ino_of(image, path):
    return int(re.search(r"Inode:\s*(\d+)", debugfs(image, "stat " + path)).group(1))


def open_unlinked(m, name, data):
    """A file written and then unlinked while open: (fd, inode number)."""
    p = m.path(name)
    fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o644)
    os.write(fd, data)
    ino = os.fstat(fd).st_ino
    os.unlink(p)
    return fd, ino


def on_disk(m):
    """The orphans on the image after a commit: the list, like all metadata,
    reaches the image at the commit (a daemon killed before it leaves the
    image of the commit before, where the file is still linked)."""
    commit(m)
    return listed(m.image)


def kernel_finishes(image, tmp):
    """Loop-mount a copy read-write with the kernel: it must finish the list
    without an error and leave an image that e2fsck passes."""
    if not loop_works():
        return
    copy = os.path.join(tmp, "kernel-copy.img")
    shutil.copyfile(image, copy)
    kmnt = os.path.join(tmp, "kmnt")
    os.makedirs(kmnt, exist_ok=True)
    subprocess.run(["dmesg", "-C"], stdout=subprocess.DEVNULL)
    r = subprocess.run(["mount", "-t", "ext4", "-o", "loop", copy, kmnt],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    subprocess.run(["umount", kmnt], check=True)
    log = subprocess.run(["dmesg"], capture_output=True, text=True).stdout
    assert "bad orphan" not in log and "EXT4-fs error" not in log, log
    assert listed(copy) == []
    rc, out = fsck(copy)
    assert rc == 0, out
    os.unlink(copy)


# -------------------------------------------------- while rrfuse is running

@FORMATS
def test_unlink_open_write_read(mount_factory, mkfs):
    m = mount_factory(mkfs_args=mkfs)
    b0 = free_blocks(m.mnt)
    fd, ino = open_unlinked(m, "f", pattern("a", 4 * MiB))
    try:
        assert on_disk(m) == [ino]
        if mkfs == ORPHAN_FILE:
            assert last_orphan(m.image) == 0
            assert "orphan_present" in features(m.image)
        os.pwrite(fd, pattern("b", MiB), 4 * MiB)
        os.fsync(fd)
        assert os.pread(fd, 4 * MiB, 0) == pattern("a", 4 * MiB)
        assert os.pread(fd, MiB, 4 * MiB) == pattern("b", MiB)
        os.ftruncate(fd, MiB)        # a truncate of an orphan keeps it listed
        assert on_disk(m) == [ino]
        assert os.fstat(fd).st_nlink == 0
    finally:
        os.close(fd)
    assert wait_for(lambda: on_disk(m) == [], timeout=10)
    assert wait_for(lambda: free_blocks(m.mnt) >= b0 - 2, timeout=10)
    commit(m)                       # orphan_present follows at the commit
    assert "orphan_present" not in features(m.image)


def test_two_handles_and_hard_link(mount_factory):
    m = mount_factory()
    a, b = m.path("a"), m.path("b")
    with open(a, "wb") as f:
        f.write(pattern("ab", 2 * MiB))
    os.link(a, b)
    fd1, fd2 = os.open(a, os.O_RDWR), os.open(b, os.O_RDWR)
    ino = os.fstat(fd1).st_ino
    try:
        os.unlink(a)
        assert on_disk(m) == []          # still linked as b
        os.unlink(b)
        assert on_disk(m) == [ino]
        os.pwrite(fd1, b"one", 0)
        os.close(fd1)
        fd1 = -1
        assert on_disk(m) == [ino]      # fd2 still holds it
        assert os.pread(fd2, 3, 0) == b"one"
    finally:
        if fd1 >= 0:
            os.close(fd1)
        os.close(fd2)
    assert wait_for(lambda: on_disk(m) == [], timeout=10)


def test_rename_over_open_file(mount_factory):
    m = mount_factory()
    with open(m.path("target"), "wb") as f:
        f.write(pattern("t", MiB))
    with open(m.path("src"), "wb") as f:
        f.write(b"new")
    fd = os.open(m.path("target"), os.O_RDONLY)
    ino = os.fstat(fd).st_ino
    try:
        os.rename(m.path("src"), m.path("target"))
        assert on_disk(m) == [ino]
        assert os.pread(fd, MiB, 0) == pattern("t", MiB)
    finally:
        os.close(fd)
    assert wait_for(lambda: on_disk(m) == [], timeout=10)
    with open(m.path("target"), "rb") as f:
        assert f.read() == b"new"


def test_unlink_open_directory(mount_factory):
    m = mount_factory()
    d = m.path("d")
    os.mkdir(d)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    ino = os.fstat(fd).st_ino
    try:
        os.rmdir(d)
        assert on_disk(m) == [ino]
        assert os.listdir(fd) == []
    finally:
        os.close(fd)
    assert wait_for(lambda: on_disk(m) == [], timeout=10)
    assert os.stat(m.mnt).st_nlink == 3


def test_many_orphans_in_any_order(mount_factory):
    """The legacy chain stays walkable while orphans leave from the middle."""
    m = mount_factory()
    fds = [open_unlinked(m, "o%d" % i, pattern(i, 20000)) for i in range(12)]
    assert on_disk(m) == [ino for _, ino in reversed(fds)]
    for i in (5, 11, 0, 7, 6, 1):
        os.close(fds[i][0])
    want = [ino for i, (_, ino) in enumerate(fds) if i not in (5, 11, 0, 7, 6, 1)]
    assert wait_for(lambda: on_disk(m) == want[::-1], timeout=10)
    for i in (2, 3, 4, 8, 9, 10):
        os.close(fds[i][0])
    assert wait_for(lambda: on_disk(m) == [], timeout=10)


def test_shrinking_truncate_leaves_the_list(mount_factory):
    m = mount_factory()
    p = m.path("big")
    with open(p, "wb") as f:
        f.write(pattern("big", 8 * MiB))
    b0 = free_blocks(m.mnt)
    os.truncate(p, 1000)
    assert on_disk(m) == []
    assert free_blocks(m.mnt) >= b0 + 2000
    with open(p, "rb") as f:
        assert f.read() == pattern("big", 8 * MiB)[:1000]


# ------------------------------------------------------------------ crashes

@FORMATS
def test_sigkill_then_next_mount_frees(mount_factory, mkfs):
    m = mount_factory(mkfs_args=mkfs)
    b0 = free_blocks(m.mnt)
    fd, ino = open_unlinked(m, "victim", pattern("v", 6 * MiB))
    os.fsync(fd)                    # a commit: bitmaps on disk, as after any interval
    kill_daemon(m)
    try:
        os.close(fd)
    except OSError:
        pass
    assert listed(m.image) == [ino]
    rc, out = fsck(m.image)
    assert rc != 0, "e2fsck -fn should see the unfinished orphan"
    kernel_finishes(m.image, os.path.dirname(m.image))
    m.mount()
    assert re.search(r"1 orphan inode deleted", m.daemon_log), m.daemon_log
    assert listed(m.image) == []
    assert free_blocks(m.mnt) >= b0 - 2
    assert os.listdir(m.mnt) == ["lost+found"]


def test_sigkill_with_many_orphans(mount_factory, monkeypatch):
    m = mount_factory()
    with open(m.path("keep"), "wb") as f:
        f.write(pattern("keep", 300000))
        f.flush()
        os.fsync(f.fileno())        # held data not written back dies with the daemon, as on ext4
    fds = [open_unlinked(m, "o%d" % i, pattern(i, 50000))[0] for i in range(20)]
    for fd in fds[::3]:
        os.close(fd)
    assert wait_for(lambda: len(on_disk(m)) == 13, timeout=10)
    commit(m)                       # the closed ones' frees reach the bitmaps
    kill_daemon(m)
    for fd in fds[1:]:
        try:
            os.close(fd)
        except OSError:
            pass
    assert len(listed(m.image)) == 13
    kernel_finishes(m.image, os.path.dirname(m.image))
    # Progress lines in the foreground: at every step with the interval at 0.
    monkeypatch.setenv("RRFUSE_PROGRESS_MS", "0")
    m.mount()
    assert "13 orphan inodes deleted" in m.daemon_log
    steps = re.findall(r"orphan cleanup: (\d+) so far, (\d+) deleted", m.daemon_log)
    assert [int(n) for n, _ in steps] == list(range(1, 14)), m.daemon_log
    assert "orphan cleanup: 13 done in" in m.daemon_log
    assert sorted(os.listdir(m.mnt)) == ["keep", "lost+found"]
    with open(m.path("keep"), "rb") as f:
        assert f.read() == pattern("keep", 300000)


# ------------------------------------------------ lists rrfuse did not write

@pytest.mark.parametrize("mkfs", [LEGACY, ORPHAN_FILE], ids=["legacy", "orphan_file"])
def test_kernel_made_orphans(mount_factory, mkfs):
    """The kernel's list, caught while the file was open: copied from a live
    loop mount after sync, its journal replayed without orphan processing."""
    if KERNEL or not loop_works():
        pytest.skip("needs root and loop devices")
    image = make_image(mkfs_args=mkfs)
    tmp = os.path.dirname(image)
    kmnt = os.path.join(tmp, "kmnt")
    os.makedirs(kmnt)
    subprocess.run(["mount", "-t", "ext4", "-o", "loop", image, kmnt], check=True)
    copy = os.path.join(tmp, "copy.img")
    try:
        with open(os.path.join(kmnt, "keep"), "wb") as f:
            f.write(pattern("keep", MiB))
        fd = os.open(os.path.join(kmnt, "gone"), os.O_CREAT | os.O_RDWR)
        os.write(fd, pattern("gone", 8 * MiB))
        os.fsync(fd)
        os.unlink(os.path.join(kmnt, "gone"))
        subprocess.run(["sync"], check=True)
        shutil.copyfile(image, copy)
        os.close(fd)
    finally:
        subprocess.run(["umount", kmnt], check=True)
    # e2fsck -E journal_only releases the orphans too (e2fsprogs 1.47.0):
    # debugfs replays the journal and leaves them for us.
    subprocess.run(["debugfs", "-w", "-R", "journal_run", copy], check=True,
                   capture_output=True)
    assert "needs_recovery" not in features(copy)
    assert len(listed(copy)) == 1
    m = Mount(copy, mnt=os.path.join(tmp, "mnt2"))
    m.mount()
    try:
        assert "1 orphan inode deleted" in m.daemon_log
        assert sorted(os.listdir(m.mnt)) == ["keep", "lost+found"]
        st = os.statvfs(m.mnt)
        assert (st.f_blocks - st.f_bfree) * st.f_frsize < 4 * MiB
    finally:
        m.unmount()
    assert listed(copy) == []
    assert "orphan_present" not in features(copy)
    rc, out = fsck(copy)
    assert rc == 0, out


def unlinked_files(image, m, names, size=200000):
    """Files written through rrfuse, then unlinked behind its back with
    debugfs (links 0, no entry) as a crash between unlink and free leaves."""
    for n in names:
        with open(m.path(n), "wb") as f:
            f.write(pattern(n, size))
    m.unmount()
    inos = [ino_of(image, "/" + n) for n in names]
    cmds = []
    for n, ino in zip(names, inos):
        cmds += ["unlink /%s" % n, "sif <%d> links_count 0" % ino]
    debugfs(image, *cmds, write=True)
    return inos


def chain(image, inos, tail=0):
    """s_last_orphan -> inos[0] -> inos[1] ... -> tail, through i_dtime."""
    cmds = ["ssv last_orphan %d" % inos[0]]
    for a, b in zip(inos, inos[1:] + [tail]):
        cmds.append("sif <%d> dtime @%d" % (a, b))    # @: seconds, not a date
    debugfs(image, *cmds, write=True)


def test_debugfs_crafted_list(mount_factory):
    m = mount_factory()
    b0 = free_blocks(m.mnt)
    inos = unlinked_files(m.image, m, ["a", "b", "c"], size=MiB)
    chain(m.image, inos)
    assert listed(m.image) == inos
    assert fsck(m.image)[0] != 0
    m.mount()
    assert "3 orphan inodes deleted" in m.daemon_log
    assert listed(m.image) == []
    assert free_blocks(m.mnt) >= b0 - 2


def test_crafted_truncate_orphan(mount_factory):
    """A linked inode on the list is an interrupted truncate: blocks past
    i_size go, the data before it stay."""
    m = mount_factory()
    with open(m.path("t"), "wb") as f:
        f.write(pattern("t", 4 * MiB))
    m.unmount()
    ino = ino_of(m.image, "/t")
    debugfs(m.image, "sif <%d> size 5000" % ino, "ssv last_orphan %d" % ino,
            write=True)
    m.mount()
    assert "1 truncate cleaned up" in m.daemon_log
    assert os.stat(m.path("t")).st_blocks <= 16
    with open(m.path("t"), "rb") as f:
        assert f.read() == pattern("t", 4 * MiB)[:5000]
    assert listed(m.image) == []


def test_unmount_finishes_a_truncate_that_failed():
    """A shrinking truncate that fails halfway (here on an i_blocks that a
    corrupt image says is 0) stays on the list; the unmount finishes it, and
    looks the inode up again after every file is forgotten (it crashed there,
    fuzz seed 20261205 case 257).  The image is corrupt: no e2fsck verdict,
    but the daemon must exit 0 and the list be empty."""
    import conftest
    conftest.require_mount_backend()
    image = make_image(size="64M", mkfs_args=("-O", "^metadata_csum"))
    m = Mount(image)
    m.mount()
    with open(m.path("t"), "wb") as f:
        f.write(pattern("t", 40000))
    m.unmount()
    debugfs(image, "sif /t i_blocks 0", write=True)
    m.mount()
    try:
        with pytest.raises(OSError):
            os.truncate(m.path("t"), 5000)
    finally:
        m.unmount()
    assert "unmount: finishing orphans left on the list" in m.daemon_log, m.daemon_log
    assert "fatal signal" not in m.daemon_log, m.daemon_log
    assert listed(image) == []
    m.cleanup()
    if not conftest.KEEP:
        conftest._rm_workdir(os.path.dirname(image))


@pytest.mark.corrupt_image
def test_corrupt_chain_loop(mount_factory):
    m = mount_factory()
    inos = unlinked_files(m.image, m, ["a", "b"])
    chain(m.image, inos, tail=inos[0])         # a -> b -> a -> ...
    m.mount()
    assert "2 orphan inodes deleted" in m.daemon_log
    assert re.search(r"orphan list: inode %d links to the already seen inode %d"
                     % (inos[1], inos[0]), m.daemon_log), m.daemon_log
    assert listed(m.image) == []


@pytest.mark.corrupt_image
def test_corrupt_chain_out_of_range(mount_factory):
    m = mount_factory()
    inos = unlinked_files(m.image, m, ["a"])
    chain(m.image, inos, tail=99999999)
    m.mount()
    assert "1 orphan inode deleted" in m.daemon_log
    assert "links to out-of-range inode 99999999" in m.daemon_log
    assert listed(m.image) == []


@pytest.mark.corrupt_image
@pytest.mark.parametrize("head", ["free", "reserved", "orphan_file"])
def test_corrupt_chain_bad_head(mount_factory, head):
    """A head that is no orphan at all: the list is cut, nothing is touched."""
    m = mount_factory(mkfs_args=ORPHAN_FILE if head == "orphan_file" else ())
    with open(m.path("keep"), "wb") as f:
        f.write(pattern("keep", MiB))
    m.unmount()
    bad = {"free": 300, "reserved": 2,
           "orphan_file": int(sb_field(m.image, "Orphan file inode") or 0)}[head]
    debugfs(m.image, "ssv last_orphan %d" % bad, write=True)
    m.mount()
    assert re.search(r"orphan list: inode %d is .*: list cut there" % bad,
                     m.daemon_log), m.daemon_log
    assert listed(m.image) == []
    with open(m.path("keep"), "rb") as f:
        assert f.read() == pattern("keep", MiB)


def test_live_inode_on_the_list(mount_factory):
    """A linked, healthy file named by the list is truncated to its own
    size, as the kernel and e2fsck do: its data are untouched."""
    m = mount_factory()
    with open(m.path("live"), "wb") as f:
        f.write(pattern("live", 3 * MiB + 17))
    m.unmount()
    ino = ino_of(m.image, "/live")
    debugfs(m.image, "ssv last_orphan %d" % ino, write=True)
    m.mount()
    assert "1 truncate cleaned up" in m.daemon_log
    with open(m.path("live"), "rb") as f:
        assert f.read() == pattern("live", 3 * MiB + 17)


# ------------------------------------------------ ro and norecovery, as ext4

def test_ro_mount_finishes_orphans(mount_factory):
    """The kernel's ro mount finishes orphans when it can write the device
    ("orphan cleanup on readonly fs"); so does rrfuse -o ro."""
    m = mount_factory()
    b0 = free_blocks(m.mnt)
    inos = unlinked_files(m.image, m, ["a"], size=2 * MiB)
    chain(m.image, inos)
    m.opts = "ro"
    m.mount()
    assert "orphan cleanup on readonly fs" in m.daemon_log
    assert listed(m.image) == []
    assert free_blocks(m.mnt) >= b0 - 2
    with pytest.raises(OSError):
        open(m.path("x"), "w")
    m.remount("")


def test_norecovery_still_finishes_orphans(mount_factory):
    """noload/norecovery skip journal replay only: the kernel still runs
    orphan cleanup on such a mount."""
    m = mount_factory()
    inos = unlinked_files(m.image, m, ["a"])
    chain(m.image, inos)
    m.opts = "norecovery"
    m.mount()
    assert "1 orphan inode deleted" in m.daemon_log
    assert listed(m.image) == []


def test_write_protected_device_skips_cleanup(mount_factory):
    """A read-only device cannot be written: the list stays for later, with
    the kernel's message."""
    if not loop_works():
        pytest.skip("needs root and loop devices")
    m = mount_factory()
    inos = unlinked_files(m.image, m, ["a"])
    chain(m.image, inos)
    dev = subprocess.run(["losetup", "-r", "-f", "--show", m.image], check=True,
                         capture_output=True, text=True).stdout.strip()
    try:
        r = Mount(dev, mnt=m.mnt)
        r.logpath = m.logpath
        r.mount()
        r.unmount()
    finally:
        subprocess.run(["losetup", "-d", dev], check=True)
    assert "write access unavailable, skipping orphan cleanup" in m.daemon_log
    assert listed(m.image) == inos
    m.mount()                       # the fixture's teardown: finished and checked
    assert listed(m.image) == []


# ------------------------------------------------------------- concurrency

def test_stress_unlink_and_dnotify(mount_factory):
    """stress-ng's dnotify and unlink stressors, two workers each, on a
    legacy-list image.  stress-ng 0.15.06 (Debian 12) has no unlink
    stressor; rrunlink (built with rrfuse) runs the same workload."""
    if shutil.which("stress-ng") is None:
        pytest.skip("needs stress-ng (apt-get install stress-ng)")
    m = mount_factory(size="1G")
    have = subprocess.run(["stress-ng", "--stressors"], capture_output=True,
                          text=True).stdout.split()
    if "unlink" in have:
        cmd = ["stress-ng", "--unlink", "2", "-t", "4", "--temp-path", m.mnt]
    else:
        cmd = [os.path.join(os.path.dirname(RRFUSE), "rrunlink"), "-w", "2",
               "-t", "4", m.mnt]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(["stress-ng", "--dnotify", "2", "-t", "4", "--temp-path",
                        m.mnt], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert wait_for(lambda: on_disk(m) == [], timeout=10)
    assert sorted(os.listdir(m.mnt)) == ["lost+found"]
