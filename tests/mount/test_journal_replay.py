"""Journal recovery at mount (issue 16): rrfuse replays the jbd2 journal of
an image the kernel's ext4 left needing recovery.

The journals are the kernel's own: an image is loop-mounted, changed,
synced (the transactions reach the journal), and the filesystem is shut
down without flushing its log (EXT4_IOC_SHUTDOWN, NOLOGFLUSH), so what the
kernel made durable lives in the journal and, for the last transactions,
only there.  The acceptance check: copy A is replayed by e2fsck -fy, copy
B by rrfuse; B must then pass e2fsck -fn, and the tree rrfuse shows must
equal what the kernel sees in A and in B.
"""

import fcntl
import hashlib
import os
import re
import shutil
import struct
import subprocess

import pytest

import conftest
from conftest import (Mount, MountError, fsck, kernel_check, loop_works,
                      make_image, pattern, require_binary, require_fuse,
                      require_root, require_tools, snapshot)
from test_badinput import crc32c, expect_refusal, sha256

pytestmark = pytest.mark.rrfuse_only

EXT4_IOC_SHUTDOWN = 0x8004587D          # _IOR('X', 125, __u32)
EXT4_GOING_FLAGS_NOLOGFLUSH = 2

CSUM_V3 = []                            # mke2fs defaults: metadata_csum, 64bit
NO_CSUM = ["-O", "^metadata_csum,^64bit"]
NO_CSUM_64 = ["-O", "^metadata_csum"]

# the journal superblock (big-endian), at the start of the journal's block 0
JSB_INCOMPAT = 0x28
JSB_CHECKSUM = 0xFC
JSB_SIZE = 1024
JSB_S_START = 0x1C
JSB_S_SEQUENCE = 0x18
COMMIT_NSEC = 56                        # h_commit_nsec in a commit block


@pytest.fixture(autouse=True)
def _requirements():
    require_tools()
    require_binary()
    require_fuse()
    require_root("loop-mounting images with the kernel's ext4")
    if not loop_works():
        pytest.skip("needs working loop devices (the journals are the kernel's)")


# ----------------------------------------------------------------- helpers

def crashed_image(workload, mkfs_args=(), size="64M", mount_opts=""):
    """An image the kernel left needing recovery after workload(mnt)."""
    image = make_image(size=size, mkfs_args=mkfs_args)
    mnt = os.path.join(os.path.dirname(image), "kmnt")
    os.makedirs(mnt, exist_ok=True)
    subprocess.run(["mount", "-t", "ext4", "-o", ",".join(["loop"] + ([mount_opts] if mount_opts else [])),
                    image, mnt], check=True)
    crashed = os.path.join(os.path.dirname(image), "crashed.img")
    try:
        workload(mnt)
        fd = os.open(mnt, os.O_RDONLY)
        try:
            fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
        finally:
            os.close(fd)
        # The power fails here: the umount would still write the blocks the
        # journal checkpoints (dirty in the device's cache) to their homes.
        shutil.copyfile(image, crashed)
    finally:
        subprocess.run(["umount", mnt], check=True)
    os.replace(crashed, image)
    assert "needs_recovery" in features(image)
    return image


def features(image):
    out = subprocess.run(["dumpe2fs", "-h", image], capture_output=True, text=True).stdout
    m = re.search(r"^Filesystem features:\s+(.*)$", out, re.M)
    return m.group(1).split() if m else []


def dumpe2fs_field(image, name):
    out = subprocess.run(["dumpe2fs", "-h", image], capture_output=True, text=True).stdout
    m = re.search(r"^%s:\s+(.*)$" % re.escape(name), out, re.M)
    return m.group(1).strip() if m else None


def logdump(image):
    """[(sequence, type, journal block)] of the log, as debugfs reads it."""
    out = subprocess.run(["debugfs", "-R", "logdump", image], capture_output=True, text=True).stdout
    return [(int(s), int(t), int(b)) for s, t, b in
            re.findall(r"Found expected sequence (\d+), type (\d+) \(.*?\) at block (\d+)", out)]


def journal_block(image, jblk):
    """Byte offset on the image of journal block jblk (the journal inode's map)."""
    out = subprocess.run(["debugfs", "-R", "bmap <8> %d" % jblk, image], capture_output=True,
                         text=True, check=True).stdout
    return int(out.split()[0]) * 4096


def copy(image, name):
    dst = os.path.join(os.path.dirname(image), name)
    shutil.copyfile(image, dst)
    return dst


def replay_and_compare(image, opts="", e2fsck_reference=True):
    """Copy A replayed by e2fsck, copy K by the kernel's own mount, the image
    by rrfuse; trees equal, e2fsck clean, the journal marked empty as
    e2fsck marks it.  Returns rrfuse's log and the tree."""
    a = copy(image, "a.img")
    k = copy(image, "k.img")
    r = subprocess.run(["e2fsck", "-fy", a], capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    m = Mount(image, opts=opts)
    m.mount()
    try:
        snap = snapshot(m.mnt)
        m.unmount()
    finally:
        m.cleanup()
    log = m.daemon_log
    assert "needs_recovery" not in features(image)
    for field in ("Journal sequence", "Journal start", "Filesystem state"):
        if e2fsck_reference:
            assert dumpe2fs_field(image, field) == dumpe2fs_field(a, field), field
    # As the kernel: the log restarts one past the transaction the scan stopped at.
    assert int(dumpe2fs_field(image, "Journal sequence"), 16) == replayed(log)[2] + 2
    rc, out = fsck(image)
    assert rc == 0, out
    kernel_check(image, snap)           # the kernel reads back what rrfuse showed
    kernel_replay_check(k, snap)        # it is what the kernel's replay gives
    if e2fsck_reference:
        kernel_check(a, snap)           # and what e2fsck's gives
    return log, snap


def kernel_replay_check(image, snap):
    """The kernel replays image itself (a read-write loop mount: a read-only
    loop device would refuse it) and must see the tree snap."""
    d = os.path.join(os.path.dirname(image), "kmnt")
    os.makedirs(d, exist_ok=True)
    subprocess.run(["mount", "-t", "ext4", "-o", "loop", image, d], check=True)
    try:
        ksnap = snapshot(d)
    finally:
        subprocess.run(["umount", d], check=True)
    diffs = conftest.compare_snapshots(snap, ksnap)
    assert not diffs, "the kernel's replay gives another tree (second):\n" + "\n".join(diffs)


def replayed(log):
    m = re.search(r"replayed (\d+) transactions? \((\d+) to (\d+)\), (\d+) blocks written, "
                  r"(\d+) revoked by (\d+) revoke records", log)
    assert m, log
    return [int(x) for x in m.groups()]


def commit(path):
    """Commit the running transaction to the journal, and only there: an
    fsync of a file it changed.  sync(2) and syncfs(2) would also write
    the device's dirty blocks, the journal's checkpoint, to their homes."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tree_work(mnt):
    """Files, directories, renames and deletes over a few transactions; the
    last transaction's files live only in the journal."""
    os.makedirs(mnt + "/d1/d2")
    for i in range(40):
        with open(mnt + "/d1/f%d" % i, "wb") as f:
            f.write(pattern(i, 100 + i * 97))
    with open(mnt + "/big", "wb") as f:
        f.write(pattern("big", 300000))
    os.symlink("d1/f3", mnt + "/link")
    commit(mnt + "/big")
    os.rename(mnt + "/d1/f1", mnt + "/d1/d2/moved")
    os.rename(mnt + "/d1/f2", mnt + "/renamed")
    subprocess.run(["rm", "-rf", mnt + "/d1/d2"], check=True)
    os.unlink(mnt + "/d1/f5")
    os.makedirs(mnt + "/last")
    for i in range(20):
        with open(mnt + "/last/g%d" % i, "wb") as f:
            f.write(pattern("g%d" % i, i * 500))
    os.chmod(mnt + "/last/g3", 0o600)
    commit(mnt + "/last/g19")


# ------------------------------------------------------------ acceptance

@pytest.mark.parametrize("mkfs_args,mount_opts", [
    (CSUM_V3, ""), (NO_CSUM, ""), (NO_CSUM_64, "data=writeback,journal_async_commit"),
    (["-b", "1024"], "")],
    ids=["csum_v3", "no_csum_32bit", "async_commit_64bit", "csum_v3_1k_blocks"])
def test_replay_matches_e2fsck(mkfs_args, mount_opts):
    image = crashed_image(tree_work, mkfs_args, mount_opts=mount_opts)
    assert len([t for t in logdump(image) if t[1] == 2]) >= 2
    # Some of it is in the journal only: the un-replayed image lacks the last files.
    ls = subprocess.run(["debugfs", "-R", "ls /last", image], capture_output=True, text=True).stdout
    assert "g19" not in ls
    log, snap = replay_and_compare(image)
    n, first, last, blocks, hits, records = replayed(log)
    assert n >= 2 and blocks > 0 and last - first + 1 == n
    assert "last/g19" in snap and "renamed" in snap and "d1/d2" not in snap
    # Marked empty as e2fsck marks it: the next transaction skips the last one seen.
    assert dumpe2fs_field(image, "Journal start") == "0"


def test_escaped_block_data_journal():
    """data=journal logs file data too: a block that begins with the
    journal's magic is logged escaped, and must come back with it."""
    magic = struct.pack(">I", 0xC03B3998)

    def work(mnt):
        with open(mnt + "/magic", "wb") as f:
            f.write(magic + pattern("m", 8188) + magic + b"tail")
        commit(mnt + "/magic")
    image = crashed_image(work, mount_opts="data=journal")
    log, snap = replay_and_compare(image)
    with open(os.path.join(os.path.dirname(image), "want.bin"), "wb") as f:
        f.write(magic + pattern("m", 8188) + magic + b"tail")
    assert snap["magic"]["digest"] == conftest.file_digest(
        os.path.join(os.path.dirname(image), "want.bin"))


def test_fast_commit_feature_without_fast_commits():
    """A fast_commit journal whose fast commits came before its last full
    commit: nothing of them to replay, the log is replayed."""
    def work(mnt):
        os.mkdir(mnt + "/a")
        commit(mnt + "/a")
        with open(mnt + "/f", "wb") as f:
            f.write(b"fast")
            os.fsync(f.fileno())                    # fast commits
        with open(mnt + "/f", "ab") as f:
            f.write(b"fast")
            os.fsync(f.fileno())
        os.mkdir(mnt + "/d")
        os.rename(mnt + "/d", mnt + "/e")            # not fast-commit eligible: a full commit
        with open(mnt + "/e/g", "wb") as f:
            f.write(b"full")
        os.setxattr(mnt + "/e/g", "user.x", b"1")
        commit(mnt + "/e/g")
    image = crashed_image(work, ["-O", "fast_commit"])
    dump = subprocess.run(["debugfs", "-R", "logdump", image], capture_output=True, text=True).stdout
    assert "tag HEAD" in dump, dump                 # stale fast commits are there
    # e2fsck 1.47.0 replays none of this journal (its tree lacks every file and
    # its s_sequence stays 2): compared with the kernel's replay only.
    log, snap = replay_and_compare(image, e2fsck_reference=False)
    assert "e/g" in snap and snap["f"]["size"] == 8


def test_fast_commits_refused():
    """Fast commits after the log's last transaction: refused before
    anything is written (never half a replay)."""
    def work(mnt):
        os.mkdir(mnt + "/a")
        commit(mnt + "/a")
        with open(mnt + "/g", "wb") as f:
            f.write(b"hello" * 1000)
            os.fsync(f.fileno())
    image = crashed_image(work, ["-O", "fast_commit"])
    refuse(image, ["fast commit", "e2fsck"])


def test_readonly_mount_replays():
    """ro: recovery required on readonly filesystem, as the kernel's."""
    image = crashed_image(tree_work)
    log, snap = replay_and_compare(image, opts="ro")
    assert "readonly" in log
    assert "last/g19" in snap


def test_wraparound():
    """A 4 MiB journal (1024 blocks) and enough transactions that the log
    runs past its end and wraps back to its first block."""
    def work(mnt):
        for i in range(140):
            d = mnt + "/w%d" % i
            os.mkdir(d)
            for k in range(40):
                with open(d + "/f%d" % k, "wb") as f:
                    f.write(pattern(k, k * 10))
            if i > 2:
                subprocess.run(["rm", "-rf", mnt + "/w%d" % (i - 2)], check=True)
            commit(d + "/f39")
    for attempt in range(3):
        image = crashed_image(work, ["-J", "size=4"])
        blocks = [b for _, _, b in logdump(image)]
        if any(b < a for a, b in zip(blocks, blocks[1:])):
            break
    else:
        pytest.fail("the kernel's log never wrapped: %s" % blocks)
    log, snap = replay_and_compare(image)
    n, first, last, _, _, records = replayed(log)
    assert n > 3 and records > 0
    assert "w139/f39" in snap and "w136" not in snap


def test_revoked_block_reused():
    """A directory's blocks logged, the directory deleted (its blocks
    revoked), the free space then filled by a file written in place: the
    directory's logged copies must not be replayed over the file."""
    chunk = 1 << 20
    written = []

    def work(mnt):
        os.mkdir(mnt + "/dir")
        for i in range(2500):
            open(mnt + "/dir/%s-%05d" % ("n" * 60, i), "wb").close()
        commit(mnt + "/dir/%s-%05d" % ("n" * 60, 2499))
        subprocess.run(["rm", "-rf", mnt + "/dir"], check=True)
        with open(mnt + "/mark", "wb") as f:
            pass
        commit(mnt + "/mark")
        with open(mnt + "/fill", "wb") as f:
            try:
                while True:
                    f.write(pattern(len(written), chunk))
                    f.flush()
                    written.append(chunk)
            except OSError:
                pass
            f.truncate(len(written) * chunk)
            os.fsync(f.fileno())
    image = crashed_image(work, size="32M")
    assert any(t == 5 for _, t, _ in logdump(image)), "no revoke block in the kernel's log"
    log, snap = replay_and_compare(image)
    _, _, _, _, hits, records = replayed(log)
    assert hits > 0 and records > 0, log
    expect = hashlib.sha256()
    with open(os.path.join(os.path.dirname(image), "check.bin"), "wb") as f:
        for i in range(len(written)):
            f.write(pattern(i, chunk))
    assert snap["fill"]["digest"] == conftest.file_digest(
        os.path.join(os.path.dirname(image), "check.bin"))


# ------------------------------------------------------- what is refused

def small_crash(mkfs_args=CSUM_V3):
    def work(mnt):
        os.mkdir(mnt + "/a")
        with open(mnt + "/a/f", "wb") as f:
            f.write(b"first")
        commit(mnt + "/a/f")
        os.mkdir(mnt + "/b")
        with open(mnt + "/b/g", "wb") as f:
            f.write(b"second")
        commit(mnt + "/b/g")
    return crashed_image(work, mkfs_args)


def refuse(image, keywords, opts=None):
    mnt = os.path.join(os.path.dirname(image), "mnt")
    os.makedirs(mnt, exist_ok=True)
    argv = [conftest.RRFUSE, image, mnt, "-f"] + (["-o", opts] if opts else [])
    expect_refusal(argv, keywords, image=image, mnt=mnt)


def jsb_offset(image):
    return journal_block(image, 0)


def patch_jsb(image, off, value, fix_csum):
    base = jsb_offset(image)
    with open(image, "r+b") as f:
        f.seek(base)
        sb = bytearray(f.read(JSB_SIZE))
        struct.pack_into(">I", sb, off, value)
        if fix_csum:
            struct.pack_into(">I", sb, JSB_CHECKSUM, 0)
            struct.pack_into(">I", sb, JSB_CHECKSUM, crc32c(bytes(sb)))
        f.seek(base)
        f.write(sb)


def jsb_u32(image, off):
    with open(image, "rb") as f:
        f.seek(jsb_offset(image) + off)
        return struct.unpack(">I", f.read(4))[0]


def test_unknown_journal_incompat_refused():
    image = small_crash()
    patch_jsb(image, JSB_INCOMPAT, jsb_u32(image, JSB_INCOMPAT) | 0x4000, fix_csum=True)
    refuse(image, ["journal", "incompat 0x4000"])


def test_corrupt_journal_superblock_refused():
    image = small_crash()
    patch_jsb(image, JSB_S_START, 5000, fix_csum=False)
    refuse(image, ["journal superblock", "checksum"])
    patch_jsb(image, JSB_S_START, 5000, fix_csum=True)
    refuse(image, ["journal superblock", "log head"])


def test_tag_outside_filesystem_refused():
    """A descriptor tag naming a block past the end: refused, nothing written
    (no checksums here, so the patched tag is taken as it is)."""
    image = small_crash(NO_CSUM)
    desc = [b for _, t, b in logdump(image) if t == 1]
    off = journal_block(image, desc[-1]) + 12          # the first tag's t_blocknr
    with open(image, "r+b") as f:
        f.seek(off)
        f.write(struct.pack(">I", 0xFFFFFF00))
    refuse(image, ["transaction", "outside the filesystem"])


def test_journal_inode_outside_filesystem_refused():
    image = small_crash()
    r = subprocess.run(["debugfs", "-w", "-R", "sif <8> block[5] 0x7ffffff0", image],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    refuse(image, ["journal inode"])


def test_corrupt_commit_block():
    """The last transaction's commit block fails its checksum: the ones
    before it are replayed, it is not, and the mount fails, as the
    kernel's does ("journal transaction N is corrupt"); both leave the
    same image."""
    image = small_crash()
    log = logdump(image)
    commits = [(s, b) for s, t, b in log if t == 2]
    assert len(commits) >= 2
    seq, blk = commits[-1]
    with open(image, "r+b") as f:
        f.seek(journal_block(image, blk) + COMMIT_NSEC)
        f.write(b"\x12\x34\x56\x78")
    k = copy(image, "kernel.img")
    kmnt = os.path.join(os.path.dirname(image), "kmnt")
    r = subprocess.run(["mount", "-t", "ext4", "-o", "loop", k, kmnt], capture_output=True, text=True)
    if r.returncode == 0:
        subprocess.run(["umount", kmnt])
        pytest.fail("the kernel mounted an image whose last commit block is corrupt")
    m = Mount(image)
    with pytest.raises(MountError) as e:
        m.mount()
    m.cleanup()
    assert "transaction %d is corrupt" % seq in str(e.value)
    assert "needs_recovery" in features(image)
    # Only what the kernel wrote: the transactions before the corrupt one.
    assert sha256(image) == sha256(k)
    ls = subprocess.run(["debugfs", "-R", "ls -l /a", image], capture_output=True, text=True).stdout
    assert " f" in ls or "f\n" in ls or re.search(r"\bf\b", ls), ls


def test_bad_data_block_checksum():
    """A logged block fails its checksum (csum v3): skipped, the rest
    replayed, the mount refused and the journal left needing recovery,
    as the kernel does; both leave the same image."""
    image = small_crash()
    desc = [b for _, t, b in logdump(image) if t == 1]
    with open(image, "r+b") as f:
        f.seek(journal_block(image, desc[-1] + 1) + 2000)
        b = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([b[0] ^ 0x40]))
    k = copy(image, "kernel.img")
    kmnt = os.path.join(os.path.dirname(image), "kmnt")
    r = subprocess.run(["mount", "-t", "ext4", "-o", "loop", k, kmnt], capture_output=True, text=True)
    if r.returncode == 0:
        subprocess.run(["umount", kmnt])
        pytest.fail("the kernel mounted an image with a logged block that fails its checksum")
    m = Mount(image)
    with pytest.raises(MountError) as e:
        m.mount()
    m.cleanup()
    assert "bad checksum" in str(e.value) and "e2fsck" in str(e.value)
    assert "needs_recovery" in features(image)
    assert sha256(image) == sha256(k)


def test_norecovery():
    """ro,norecovery: mounted read-only, not replayed, nothing written;
    norecovery read-write: refused, as the kernel refuses it."""
    image = small_crash()
    before = sha256(image)
    refuse(image, ["norecovery", "read-only"], opts="norecovery")
    m = Mount(image, opts="ro,norecovery")
    m.mount()
    try:
        names = os.listdir(m.mnt)
        m.unmount()
    finally:
        m.cleanup()
    assert "b" not in names                 # the last transaction's directory is not seen
    assert sha256(image) == before
    assert "needs_recovery" in features(image)


def test_write_protected_device_refused():
    """A read-only loop device: an image needing recovery cannot be replayed:
    refused (ro,norecovery mounts)."""
    image = small_crash()
    dev = subprocess.run(["losetup", "-f", "--show", "-r", image], capture_output=True,
                         text=True, check=True).stdout.strip()
    try:
        refuse(dev, ["not writable", "norecovery"], opts="ro")
        m = Mount(image, opts="ro,norecovery", mnt=os.path.join(os.path.dirname(image), "mnt"))
        m.image = dev
        m.mount()
        m.unmount()
        m.cleanup()
    finally:
        subprocess.run(["losetup", "-d", dev])


def test_clean_image_unchanged():
    """No journal to replay: a read-only mount writes nothing, as before."""
    image = make_image(size="64M")
    before = sha256(image)
    m = Mount(image, opts="ro")
    m.mount()
    m.unmount()
    m.cleanup()
    assert sha256(image) == before
    assert "journal" not in m.daemon_log


def test_needs_recovery_without_journal_refused():
    image = make_image(size="64M", mkfs_args=["-O", "^has_journal"])
    r = subprocess.run(["debugfs", "-w", "-R", "feature needs_recovery", image],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "needs_recovery" in features(image), r.stderr
    refuse(image, ["needs_recovery", "no journal"])
