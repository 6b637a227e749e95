"""Journal recovery at mount (issue 16): rrfuse replays the jbd2 journal of
an image the kernel's ext4 left needing recovery.

Most journals are the kernel's own: an image is loop-mounted, changed, its
transactions committed to the journal with fsync (sync(2) and syncfs(2)
would also write the checkpoint home), and the filesystem shut down
without flushing its log (EXT4_IOC_SHUTDOWN, NOLOGFLUSH); the image is
copied at that moment, as a power cut would leave it, so the last
transactions live only in the journal.  The acceptance check: copy A is
replayed by e2fsck -fy, copy K by the kernel's own mount, the image by
rrfuse; the image must then pass e2fsck -fn, and the tree rrfuse showed
must be what the kernel sees in it, in A and in K.  The formats the kernel
no longer writes (csum v2, v1 checksums, a v1 superblock) are written here
byte by byte, the kernel's replay being the reference.
"""

import fcntl
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
    after = None
    try:
        after = workload(mnt)           # what it returns is called after the crash
        fd = os.open(mnt, os.O_RDONLY)
        try:
            fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
        finally:
            os.close(fd)
        # The power fails here: the umount would still write the blocks the
        # journal checkpoints (dirty in the device's cache) to their homes.
        shutil.copyfile(image, crashed)
    finally:
        if after:
            after()
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
    for field in ("Journal start", "Filesystem state"):
        if e2fsck_reference:
            assert dumpe2fs_field(image, field) == dumpe2fs_field(a, field), field
    # As the kernel: the log restarts one past the transaction the scan stopped at,
    # and rrfuse's own transactions (src/journal/writer.c) go on from there.
    first = re.search(r"journal: commits are transactions of up to \d+ blocks, from id (\d+) on", log)
    if first:
        assert int(first.group(1)) == replayed(log)[2] + 2, log
        assert int(dumpe2fs_field(image, "Journal sequence"), 16) >= replayed(log)[2] + 2
    else:
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


def test_orphan_after_replay():
    """A file unlinked while open when the kernel went down: the replayed
    superblock lists it as an orphan, and the mount then deletes it, as the
    kernel's does after its replay."""
    def work(mnt):
        with open(mnt + "/keep", "wb") as f:
            f.write(b"keep")
        f = open(mnt + "/gone", "wb")
        f.write(pattern("gone", 200000))
        f.flush()
        os.fsync(f.fileno())
        os.unlink(mnt + "/gone")
        commit(mnt + "/keep")
        return f.close                              # open across the crash
    image = crashed_image(work)
    log, snap = replay_and_compare(image)
    assert "1 orphan inode deleted" in log or "orphan" in log, log
    assert sorted(snap) == ["", "keep"]


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


def test_journal_inode_impossible_size_refused():
    """i_size far past the filesystem: refused before anything is mapped or allocated."""
    image = small_crash()
    r = subprocess.run(["debugfs", "-w", "-R", "sif <8> size 0x7fffffff0000", image],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    refuse(image, ["journal inode", "size"])


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


# --------------------------------------------- journals the kernel no longer writes
#
# The kernel writes csum v3 (or no checksums, or v1 checksums with
# async_commit), but replays every format.  These journals are written here,
# byte by byte from journal.rst, over a clean image: the kernel's own replay
# of a copy is the reference.

JBD2_MAGIC = 0xC03B3998
J_DESCRIPTOR, J_COMMIT, J_REVOKE = 1, 2, 5
JF_COMPAT_CHECKSUM = 0x1
JF_REVOKE, JF_64BIT, JF_CSUM_V2, JF_CSUM_V3 = 0x1, 0x2, 0x8, 0x10
TAG_ESCAPE, TAG_SAME_UUID, TAG_LAST = 0x1, 0x2, 0x8
BS = 4096


def _crc32_be_table():
    t = []
    for i in range(256):
        c = i << 24
        for _ in range(8):
            c = ((c << 1) ^ 0x04C11DB7) if c & 0x80000000 else c << 1
        t.append(c & 0xFFFFFFFF)
    return t


_CRC32_BE = _crc32_be_table()


def crc32_be(data, crc=0xFFFFFFFF):
    for b in data:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ _CRC32_BE[((crc >> 24) ^ b) & 0xFF]
    return crc


class JournalWriter:
    """A jbd2 log over an image's internal journal, in the layout the
    features give."""

    def __init__(self, image, compat, incompat, start):
        self.image, self.compat, self.incompat = image, compat, incompat
        self.sbpos = journal_block(image, 0)
        with open(image, "rb") as f:
            f.seek(self.sbpos)
            self.sb = bytearray(f.read(JSB_SIZE))
        self.maxlen, self.first = struct.unpack_from(">II", self.sb, 0x10)
        self.uuid = bytes(self.sb[0x30:0x40])
        self.csum = bool(incompat & (JF_CSUM_V2 | JF_CSUM_V3))
        self.seed = crc32c(self.uuid)
        self.start = self.blk = start
        self.seq = struct.unpack_from(">I", self.sb, JSB_S_SEQUENCE)[0] + 7
        self.first_seq = self.seq
        self.writes = {}                   # journal block -> bytes
        self.crc = 0xFFFFFFFF

    def tag_size(self):
        if self.incompat & JF_CSUM_V3:
            return 16
        return 12 + (2 if self.incompat & JF_CSUM_V2 else 0) - (0 if self.incompat & JF_64BIT else 4)

    def put(self, block, summed=False):
        """summed: a descriptor or logged block, in a v1 checksum."""
        self.writes[self.blk] = block
        if summed and self.compat & JF_COMPAT_CHECKSUM:
            self.crc = crc32_be(block, self.crc)
        self.blk += 1
        if self.blk >= self.maxlen:
            self.blk = self.first

    def tail(self, block):
        if self.csum:
            struct.pack_into(">I", block, BS - 4, 0)
            struct.pack_into(">I", block, BS - 4, crc32c(bytes(block), self.seed))

    def transaction(self, blocks, revokes=(), commit_time=None, bad_descriptor=False):
        """blocks: [(fs block, 4096 bytes)]; revokes: fs blocks."""
        if revokes:
            rec = 8 if self.incompat & JF_64BIT else 4
            r = bytearray(BS)
            struct.pack_into(">III", r, 0, JBD2_MAGIC, J_REVOKE, self.seq)
            for i, b in enumerate(revokes):
                struct.pack_into(">Q" if rec == 8 else ">I", r, 16 + i * rec, b)
            struct.pack_into(">I", r, 12, 16 + len(revokes) * rec)
            self.tail(r)
            self.put(bytes(r))
        d = bytearray(BS)
        struct.pack_into(">III", d, 0, JBD2_MAGIC, J_DESCRIPTOR, self.seq)
        off, logged = 12, []
        for i, (home, data) in enumerate(blocks):
            flags = 0 if i == 0 else TAG_SAME_UUID
            if i == len(blocks) - 1:
                flags |= TAG_LAST
            if data[:4] == struct.pack(">I", JBD2_MAGIC):
                flags |= TAG_ESCAPE
                data = b"\0\0\0\0" + data[4:]
            c = crc32c(data, crc32c(struct.pack(">I", self.seq), self.seed))
            if self.incompat & JF_CSUM_V3:
                t = struct.pack(">IIII", home & 0xFFFFFFFF, flags, home >> 32, c)
            else:
                t = struct.pack(">IHH", home & 0xFFFFFFFF, c & 0xFFFF if self.csum else 0, flags)
                if self.incompat & JF_64BIT:
                    t += struct.pack(">I", home >> 32)
                if self.incompat & JF_CSUM_V2:
                    t += b"\0\0"
            assert len(t) == self.tag_size()
            d[off:off + len(t)] = t
            off += len(t)
            if i == 0:
                d[off:off + 16] = self.uuid
                off += 16
            logged.append(data)
        self.tail(d)
        if bad_descriptor:
            d[BS - 4] ^= 0xFF
        self.put(bytes(d), summed=True)
        for data in logged:
            self.put(data, summed=True)
        c = bytearray(BS)
        struct.pack_into(">III", c, 0, JBD2_MAGIC, J_COMMIT, self.seq)
        struct.pack_into(">Q", c, 48, commit_time or 1700000000 + self.seq)
        if self.compat & JF_COMPAT_CHECKSUM:
            c[12], c[13] = 1, 4                      # crc32, 4 bytes
            struct.pack_into(">I", c, 16, self.crc)
        elif self.csum:
            struct.pack_into(">I", c, 16, crc32c(bytes(c), self.seed))
        self.put(bytes(c))
        self.crc = 0xFFFFFFFF
        self.seq += 1

    def finish(self, superblock_v1=False):
        self.put(bytes(BS))                          # the log ends here
        for jblk, data in self.writes.items():
            with open(self.image, "r+b") as f:
                f.seek(journal_block(self.image, jblk))
                f.write(data)
        sb = self.sb
        struct.pack_into(">I", sb, 4, 3 if superblock_v1 else 4)
        struct.pack_into(">II", sb, JSB_S_SEQUENCE, self.first_seq, self.start)
        struct.pack_into(">III", sb, 0x24, self.compat, self.incompat, 0)
        sb[0x50] = 4 if self.csum else 0
        struct.pack_into(">I", sb, JSB_CHECKSUM, 0)
        if self.csum:
            struct.pack_into(">I", sb, JSB_CHECKSUM, crc32c(bytes(sb)))
        with open(self.image, "r+b") as f:
            f.seek(self.sbpos)
            f.write(sb)
        r = subprocess.run(["debugfs", "-w", "-R", "feature needs_recovery", self.image],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def file_blocks(image, name, n):
    out = subprocess.run(["debugfs", "-f", "-", image], input="".join(
        "bmap /%s %d\n" % (name, i) for i in range(n)), capture_output=True, text=True).stdout
    return [int(x) for x in re.findall(r"^(\d+)$", out, re.M)]


@pytest.mark.parametrize("mkfs_args,compat,incompat,v1", [
    (["-O", "^64bit"], 0, JF_REVOKE | JF_CSUM_V2, False),
    ([], 0, JF_REVOKE | JF_64BIT | JF_CSUM_V2, False),
    (["-O", "^64bit"], 0, JF_REVOKE | JF_CSUM_V3, False),
    (["-O", "^64bit,^metadata_csum"], JF_COMPAT_CHECKSUM, JF_REVOKE, False),
    (["-O", "^64bit,^metadata_csum"], 0, 0, True)],
    ids=["csum_v2_32bit", "csum_v2_64bit", "csum_v3_32bit", "v1_checksum", "superblock_v1"])
def test_written_journal_formats(mkfs_args, compat, incompat, v1):
    """Two transactions, the log wrapping in the first: a block beginning
    with the journal magic (escaped), a block the second transaction
    revokes (not replayed), one only the second logs.  rrfuse must leave
    the file as the kernel's replay does."""
    image = make_image(size="64M", mkfs_args=mkfs_args)
    src = os.path.join(os.path.dirname(image), "src.bin")
    with open(src, "wb") as f:
        f.write(b"A" * (4 * BS))
    r = subprocess.run(["debugfs", "-w", "-R", "write %s f" % src, image], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    blocks = file_blocks(image, "f", 4)
    assert len(blocks) == 4, blocks
    jw = JournalWriter(image, compat, incompat, start=0)
    jw.start = jw.blk = jw.maxlen - 3               # the first transaction wraps
    magic = struct.pack(">I", JBD2_MAGIC)
    jw.transaction([(blocks[0], magic + b"X" * (BS - 4)), (blocks[1], b"Y" * BS),
                    (blocks[2], b"Z" * BS)])
    jw.transaction([(blocks[3], b"W" * BS)], revokes=[blocks[2]] if incompat & JF_REVOKE else [])
    jw.finish(superblock_v1=v1)
    want = magic + b"X" * (BS - 4) + b"Y" * BS + (b"A" if incompat & JF_REVOKE else b"Z") * BS + b"W" * BS

    k = copy(image, "k.img")
    m = Mount(image)
    m.mount()
    try:
        snap = snapshot(m.mnt)
        with open(m.path("f"), "rb") as f:
            got = f.read()
        m.unmount()
    finally:
        m.cleanup()
    assert got == want
    n, first, last, written, hits, records = replayed(m.daemon_log)
    revoked = 1 if incompat & JF_REVOKE else 0
    assert (n, written, hits, records) == (2, 4 - revoked, revoked, revoked)
    rc, out = fsck(image)
    assert rc == 0, out
    kernel_replay_check(k, snap)


@pytest.mark.parametrize("stale", [False, True], ids=["newer_commit", "older_commit"])
def test_descriptor_checksum_failure(stale):
    """A descriptor failing its checksum in the second transaction: with a
    commit newer than the first's it is corruption (refused, nothing
    written, as the kernel refuses it); with an older one it is a stale
    block from an earlier use of the log, where the log ends (the first
    transaction is replayed)."""
    image = make_image(size="64M")
    src = os.path.join(os.path.dirname(image), "src.bin")
    with open(src, "wb") as f:
        f.write(b"A" * (2 * BS))
    r = subprocess.run(["debugfs", "-w", "-R", "write %s f" % src, image], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    blocks = file_blocks(image, "f", 2)
    jw = JournalWriter(image, 0, JF_REVOKE | JF_64BIT | JF_CSUM_V3, start=0)
    jw.start = jw.blk = jw.first
    jw.transaction([(blocks[0], b"X" * BS)])
    jw.transaction([(blocks[1], b"Y" * BS)], bad_descriptor=True,
                   commit_time=1600000000 if stale else None)
    jw.finish()
    k = copy(image, "k.img")
    kmnt = os.path.join(os.path.dirname(image), "kmnt")
    os.makedirs(kmnt, exist_ok=True)
    kr = subprocess.run(["mount", "-t", "ext4", "-o", "loop", k, kmnt], capture_output=True, text=True)
    if kr.returncode == 0:
        subprocess.run(["umount", kmnt], check=True)
    if not stale:
        assert kr.returncode != 0, "the kernel mounted it"
        refuse(image, ["corrupt journal", "bad checksum"])
        return
    assert kr.returncode == 0, kr.stdout + kr.stderr
    m = Mount(image)
    m.mount()
    try:
        with open(m.path("f"), "rb") as f:
            assert f.read() == b"X" * BS + b"A" * BS
        m.unmount()
    finally:
        m.cleanup()
    assert replayed(m.daemon_log)[:4] == [1, jw.first_seq, jw.first_seq, 1]
    rc, out = fsck(image)
    assert rc == 0, out


def test_external_journal_refused():
    """A journal on another device: not replayed, refused with the reason."""
    image = make_image(size="64M")
    jimg = os.path.join(os.path.dirname(image), "journal.img")
    subprocess.run(["truncate", "-s", "16M", jimg], check=True)
    subprocess.run(["mke2fs", "-q", "-F", "-b", "4096", "-O", "journal_dev", jimg], check=True)
    jdev = subprocess.run(["losetup", "-f", "--show", jimg], capture_output=True, text=True,
                          check=True).stdout.strip()
    try:
        subprocess.run(["mke2fs", "-q", "-F", "-t", "ext4", "-b", "4096", "-J", "device=" + jdev, image],
                       check=True)
    finally:
        subprocess.run(["losetup", "-d", jdev])
    r = subprocess.run(["debugfs", "-w", "-R", "feature needs_recovery", image],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "needs_recovery" in features(image), r.stderr
    refuse(image, ["external"])
