"""Bad input through the real rrfuse binary.

Every case runs the daemon in the foreground (-f) under a timeout and
checks the refusal contract:

* it exits by itself with a non-zero status (not by a signal, not by
  hanging, and it never mounts: the mount table is watched while it runs),
* stderr is exactly one line, "rrfuse: ...", naming the problem
  (asserted on keywords),
* nothing is mounted afterwards (/proc/self/mountinfo), and
* the image is byte-for-byte unchanged (sha256 and size before/after).

Then the read-only paths, which must mount and must not modify the image
(-o ro; an ro_compat feature rrfuse cannot write), and a positive control
(a clean image mounts, takes a write, unmounts, e2fsck -fn is clean, and
the image did change) so that the checks above demonstrably can fail.

All images are small (64 MiB, 4 KiB blocks, mke2fs defaults: metadata_csum,
a journal).  Superblock field offsets used for the byte patches are the
on-disk ext4 ones, relative to the superblock at byte 1024.
"""

import errno
import hashlib
import os
import shutil
import stat
import struct
import subprocess
import tempfile
import time

import pytest

import conftest
from conftest import (RRFUSE, Mount, fsck, make_image, require_binary,
                      require_fuse, require_tools, run_as)

pytestmark = pytest.mark.rrfuse_only

REFUSE_TIMEOUT = 10.0       # a refusal takes milliseconds; this is a hang
IMG_SIZE = "64M"

# superblock (offsets inside the 1024-byte superblock at byte 1024)
SB_OFF = 1024
S_LOG_BLOCK_SIZE = 0x18
S_BLOCKS_PER_GROUP = 0x20
S_MAGIC = 0x38
S_FEATURE_COMPAT = 0x5C
S_FEATURE_INCOMPAT = 0x60
S_FEATURE_RO_COMPAT = 0x64
S_VOLUME_NAME = 0x78
S_CHECKSUM = 0x3FC

COMPAT_HAS_JOURNAL = 0x4
INCOMPAT_RECOVER = 0x4
RO_COMPAT_METADATA_CSUM = 0x400
UNKNOWN_INCOMPAT_BIT = 0x10000000   # no ext4 feature uses this bit

# first group descriptor: block 1 with 4 KiB blocks
GD0_OFF = 4096
BG_FREE_INODES_COUNT_LO = 0x0E


@pytest.fixture(autouse=True)
def _requirements():
    require_tools()
    require_binary()
    require_fuse()
    if shutil.which("debugfs") is None:
        pytest.skip("needs debugfs (e2fsprogs)")


# ----------------------------------------------------------------- helpers

def _crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_CRC32C = _crc32c_table()


def crc32c(data, crc=0xFFFFFFFF):
    """libext2fs ext2fs_crc32c_le(~0, data) (no final inversion)."""
    for b in data:
        crc = _CRC32C[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


def read_sb(image):
    with open(image, "rb") as f:
        f.seek(SB_OFF)
        return bytearray(f.read(1024))


def sb_u32(image, off):
    return struct.unpack_from("<I", read_sb(image), off)[0]


def patch_sb(image, off, fmt=None, value=None, xor=None, fix_csum=True):
    """Patch the primary superblock; recompute s_checksum when fix_csum."""
    sb = read_sb(image)
    if xor is not None:
        sb[off] ^= xor
    else:
        struct.pack_into(fmt, sb, off, value)
    if fix_csum:
        struct.pack_into("<I", sb, S_CHECKSUM, crc32c(bytes(sb[:S_CHECKSUM])))
    with open(image, "r+b") as f:
        f.seek(SB_OFF)
        f.write(sb)


def flip_byte(path, off, mask=0x01):
    with open(path, "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ mask]))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest(), os.path.getsize(path)


def mounts_of(mnt=None, source=None):
    """mountinfo lines whose mount point is mnt or whose source is source."""
    out = []
    want = os.path.realpath(mnt) if mnt else None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            point = conftest._unescape_mountinfo(fields[4])
            r = right.split()
            src = conftest._unescape_mountinfo(r[1]) if len(r) > 1 else ""
            if (want and point == want) or (source and src == source):
                out.append(line.rstrip("\n"))
    return out


def _force_unmount(mnt):
    if mnt and mounts_of(mnt):
        subprocess.run(["fusermount3", "-u", mnt], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        if mounts_of(mnt):
            subprocess.run(["fusermount3", "-uz", mnt],
                           stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)


@pytest.fixture
def wd():
    """A fresh work directory (mode 0755) with an empty mount point mnt/."""
    d = conftest._new_workdir(prefix="rrfuse-badinput-")
    os.mkdir(os.path.join(d, "mnt"))
    os.chmod(os.path.join(d, "mnt"), 0o755)
    return d


def new_image(wd, name="image.img", mkfs_args=()):
    return make_image(size=IMG_SIZE, mkfs_args=mkfs_args,
                      path=os.path.join(wd, name))


def _run(argv, mnt, user):
    """Run argv; return (returncode or None on hang, stderr, mounted_lines)."""
    mounted = []
    if user is not None:
        try:
            r = run_as(user[0], user[1], argv, timeout=REFUSE_TIMEOUT,
                       stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            err = e.stderr or ""
            if isinstance(err, bytes):
                err = err.decode("utf-8", "replace")
            mounted = mounts_of(mnt)
            _force_unmount(mnt)
            return None, err, mounted
        return r.returncode, r.stderr, mounts_of(mnt)

    with tempfile.TemporaryFile() as errf:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=errf)
        deadline = time.monotonic() + REFUSE_TIMEOUT
        rc = None
        while True:
            rc = p.poll()
            if rc is not None:
                break
            if mnt and not mounted:
                mounted = mounts_of(mnt)
                if mounted:
                    # It mounted instead of refusing: take it down again
                    # (so the image check below sees what a user would).
                    time.sleep(0.2)
                    _force_unmount(mnt)
                    try:
                        rc = p.wait(REFUSE_TIMEOUT)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
                        rc = None
                    break
            if time.monotonic() > deadline:
                p.kill()
                p.wait()
                rc = None
                break
            time.sleep(0.01)
        _force_unmount(mnt)
        errf.seek(0)
        err = errf.read().decode("utf-8", "replace")
    return rc, err, mounted


def expect_refusal(argv, keywords, image=None, mnt=None, user=None,
                   image_absent=False):
    """Run argv and check the whole refusal contract.

    keywords: each item is a string, or a tuple of alternatives, that must
    occur (case-insensitively) in the single stderr line.
    image: a path whose bytes must not change (if it exists beforehand).
    image_absent: image must not exist before or after.
    """
    __tracebackhide__ = True
    before = None
    if image is not None and os.path.exists(image):
        before = sha256(image)
    if image_absent:
        assert not os.path.exists(image)

    rc, err, mounted = _run(argv, mnt, user)

    problems = []
    if mounted:
        problems.append("it MOUNTED instead of refusing: %s" % mounted)
    if rc is None:
        problems.append("it did not exit within %ss (hang, or mounted and "
                        "stayed)" % REFUSE_TIMEOUT)
    elif rc < 0:
        problems.append("killed by signal %d (crash)" % -rc)
    elif rc == 0:
        problems.append("exit status 0")
    left = mounts_of(mnt, image)
    if left:
        problems.append("still mounted afterwards: %s" % left)

    lines = [ln for ln in err.splitlines() if ln.strip()]
    if len(lines) != 1:
        problems.append("expected exactly one line on stderr, got %d"
                        % len(lines))
    elif not lines[0].startswith(("rrfuse: ", "fuse: ")):
        # libfuse itself validates the generic FUSE options and says so
        # with its own prefix; everything else is rrfuse's.
        problems.append("stderr line does not start with 'rrfuse: '")
    text = err.lower()
    for kw in keywords:
        alts = kw if isinstance(kw, tuple) else (kw,)
        if not any(a.lower() in text for a in alts):
            problems.append("stderr does not mention %s"
                            % " or ".join(repr(a) for a in alts))

    if before is not None:
        if not os.path.exists(image):
            problems.append("image %s was deleted" % image)
        else:
            after = sha256(image)
            if after != before:
                problems.append("image MODIFIED: sha256/size %s -> %s"
                                % (before, after))
    if image_absent and os.path.exists(image):
        problems.append("%s was created" % image)

    assert not problems, (
        "%s\n  command: %s%s\n  exit status: %s\n  stderr:\n%s" % (
            "\n".join("- " + p for p in problems), " ".join(argv),
            " (as uid %d)" % user[0] if user else "", rc,
            "".join("    | %s\n" % ln for ln in err.splitlines())))


def refuse_image(image, wd, keywords, opts=None, **kw):
    mnt = os.path.join(wd, "mnt")
    argv = [RRFUSE, image, mnt, "-f"]
    if opts is not None:
        argv += ["-o", opts]
    expect_refusal(argv, keywords, image=image, mnt=mnt, **kw)


# ---------------------------------------------------------- image problems

def test_missing_image(wd):
    image = os.path.join(wd, "no-such-image.img")
    refuse_image(image, wd, ["no such file", image], image_absent=True)


def test_image_not_readable(wd):
    if os.geteuid() != 0:
        pytest.skip("needs root (root-owned 0600 image, run as nobody)")
    image = new_image(wd)
    os.chown(image, 0, 0)
    os.chmod(image, 0o600)
    mnt = os.path.join(wd, "mnt")
    expect_refusal([RRFUSE, image, mnt, "-f"],
                   [("permission denied", "not readable", "cannot open"),
                    image],
                   image=image, mnt=mnt, user=(65534, 65534))
    st = os.stat(image)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0


def test_random_bytes(wd):
    image = os.path.join(wd, "random.img")
    with open(image, "wb") as f:
        f.write(os.urandom(8 << 20))
    refuse_image(image, wd, ["not an ext2/3/4"])


def test_zero_filled(wd):
    image = os.path.join(wd, "zero.img")
    with open(image, "wb") as f:
        f.write(bytes(8 << 20))
    refuse_image(image, wd, ["not an ext2/3/4"])


def test_truncated_to_1mib(wd):
    # The superblock and group descriptors survive, the rest of the
    # filesystem does not: the block count exceeds the size of the image.
    image = new_image(wd)
    os.truncate(image, 1 << 20)
    refuse_image(image, wd, [("truncated", "exceeds", "too small", "smaller",
                              "size", "not an ext2/3/4")])


def test_bad_magic(wd):
    image = new_image(wd)
    patch_sb(image, S_MAGIC, "<H", 0x1234)
    refuse_image(image, wd, ["not an ext2/3/4"])


@pytest.mark.parametrize("off,value", [
    pytest.param(S_LOG_BLOCK_SIZE, 7, id="s_log_block_size=7"),  # 128 KiB
    pytest.param(S_BLOCKS_PER_GROUP, 0, id="s_blocks_per_group=0"),
    pytest.param(S_BLOCKS_PER_GROUP, 65536,                      # > 8*4096
                 id="s_blocks_per_group=65536"),
])
def test_corrupt_superblock_field(wd, off, value):
    # The checksum is fixed up so that the field check, not the superblock
    # checksum, is what refuses the image.
    image = new_image(wd)
    patch_sb(image, off, "<I", value, fix_csum=True)
    refuse_image(image, wd, ["superblock", ("corrupt", "invalid", "bad")])


def test_superblock_checksum_mismatch(wd):
    image = new_image(wd)
    assert sb_u32(image, S_FEATURE_RO_COMPAT) & RO_COMPAT_METADATA_CSUM
    patch_sb(image, S_VOLUME_NAME, xor=0x01, fix_csum=False)
    refuse_image(image, wd, ["checksum", "superblock"])


def test_group_descriptor_checksum_mismatch(wd):
    image = new_image(wd)
    assert sb_u32(image, S_FEATURE_RO_COMPAT) & RO_COMPAT_METADATA_CSUM
    flip_byte(image, GD0_OFF + BG_FREE_INODES_COUNT_LO)
    rc, out = fsck(image)
    assert rc != 0 and "checksum" in out.lower(), out   # the patch took
    refuse_image(image, wd, ["checksum", ("descriptor", "group")])


def test_journal_needs_recovery_empty_log(wd):
    """needs_recovery on an empty journal (s_start 0): nothing to replay,
    the flag is cleared and the image mounts, as the kernel does.  Journals
    with something to replay: test_journal_replay.py."""
    image = new_image(wd)
    assert sb_u32(image, S_FEATURE_COMPAT) & COMPAT_HAS_JOURNAL
    r = subprocess.run(["debugfs", "-w", "-R", "feature needs_recovery",
                        image], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert sb_u32(image, S_FEATURE_INCOMPAT) & INCOMPAT_RECOVER, r.stdout
    m = Mount(image, mnt=os.path.join(wd, "mnt"))
    m.mount()
    try:
        assert os.listdir(m.mnt) == ["lost+found"]
        m.unmount()
    finally:
        m.cleanup()
    assert not sb_u32(image, S_FEATURE_INCOMPAT) & INCOMPAT_RECOVER
    rc, out = fsck(image)
    assert rc == 0, out


def test_incompat_inline_data(wd):
    image = new_image(wd, mkfs_args=["-O", "inline_data"])
    refuse_image(image, wd, ["inline_data"])


def test_incompat_unknown_bit(wd):
    image = new_image(wd)
    incompat = sb_u32(image, S_FEATURE_INCOMPAT)
    patch_sb(image, S_FEATURE_INCOMPAT, "<I", incompat | UNKNOWN_INCOMPAT_BIT,
             fix_csum=True)
    refuse_image(image, wd, ["feature", "0x%x" % UNKNOWN_INCOMPAT_BIT])


# ----------------------------------------------------------------- options

@pytest.mark.parametrize("value", ["abc", "-1", "99999999999"])
def test_bad_commit_value(wd, value):
    image = new_image(wd)
    refuse_image(image, wd, ["commit", value], opts="commit=" + value)


@pytest.mark.parametrize("opt,value", [
    ("max_prealloc_kb", "abc"), ("max_prealloc_kb", "-1"), ("max_prealloc_kb", "12k"),
    ("max_prealloc_kb", "99999999999"),         # not an unsigned int
    ("max_prealloc_kb", "3000000000"),          # rounds up past 2^32
    ("mb_max_prealloc_kb", "8M"),               # the kernel's sysfs name, same rules
    ("mb_stats", "2"), ("mb_optimize_scan", "yes"), ("mb_best_avail_max_trim_order", "65"),
])
def test_bad_allocator_tunable(wd, opt, value):
    image = new_image(wd)
    refuse_image(image, wd, [opt, value], opts="%s=%s" % (opt, value))


# The kernel's rule for a number in a mount option (kstrtouint, base 0):
# decimal, 0x hex or 0 octal after an optional '+', the whole string.
NUMBERS = [("0x10", 16), ("010", 8), ("16", 16), ("+16", 16),
           ("1e3", None), ("-1", None), ("99999999999999999999", None), ("", None),
           (" 1", None), ("0x", None), ("08", None), ("16 ", None)]


@pytest.mark.parametrize("value,means", NUMBERS, ids=[repr(v) for v, _ in NUMBERS])
def test_one_number_rule(wd, value, means):
    # commit= (main.c) and the allocator's tunables (mb_tunables.c, also
    # what rrctl sets) read numbers the same way.
    image = new_image(wd)
    for opt in ("commit", "mb_stream_req"):
        if means is None:
            refuse_image(image, wd, [opt], opts="%s=%s" % (opt, value))
            continue
        m = Mount(image, opts="%s=%s" % (opt, value), mnt=os.path.join(wd, "mnt"))
        m.mount()
        try:
            rrctl = os.path.join(os.path.dirname(RRFUSE), "rrctl")
            r = subprocess.run([rrctl, m.mnt, "mb_stream_req"], capture_output=True, text=True)
            if opt == "mb_stream_req":
                assert r.stdout.strip() == "mb_stream_req = %d" % means, r
            r = subprocess.run([rrctl, m.mnt, "mb_stream_req=" + value], capture_output=True,
                               text=True)
            assert r.returncode == 0 and r.stdout.strip() == "mb_stream_req = %d" % means, r
            m.unmount()
        finally:
            m.cleanup()
    if means is None:
        return
    m = Mount(image, mnt=os.path.join(wd, "mnt"))
    m.mount()
    try:
        r = subprocess.run([os.path.join(os.path.dirname(RRFUSE), "rrctl"), m.mnt,
                            "mb_stream_req=1e3"], capture_output=True, text=True)
        assert r.returncode == 1 and "1e3" in r.stderr, r
        m.unmount()
    finally:
        m.cleanup()


@pytest.mark.parametrize("value,says", [
    ("journal", "data=journal is not supported"), ("bogus", "bad value for data=")])
def test_bad_data_mode(wd, value, says):
    image = new_image(wd)
    refuse_image(image, wd, [says], opts="data=" + value)


def test_unknown_allocator(wd):
    image = new_image(wd)
    refuse_image(image, wd, ["unknown allocator", "nope", "regular"], opts="allocator=nope")


def test_unknown_option(wd):
    image = new_image(wd)
    refuse_image(image, wd, ["no_such_option"], opts="no_such_option")


# ------------------------------------------------------------ mount point

def test_mount_point_missing(wd):
    image = new_image(wd)
    mnt = os.path.join(wd, "no-such-dir")
    expect_refusal([RRFUSE, image, mnt, "-f"],
                   [mnt, ("no such file", "does not exist")],
                   image=image, mnt=mnt)
    assert not os.path.exists(mnt)


def test_mount_point_is_regular_file(wd):
    image = new_image(wd)
    mnt = os.path.join(wd, "plainfile")
    with open(mnt, "w") as f:
        f.write("not a directory\n")
    expect_refusal([RRFUSE, image, mnt, "-f"], ["not a directory", mnt],
                   image=image, mnt=mnt)
    with open(mnt) as f:
        assert f.read() == "not a directory\n"


# ---------------------------------------------------------- command line

def test_no_arguments(wd):
    expect_refusal([RRFUSE], ["usage"])


def test_only_one_argument(wd):
    image = new_image(wd)
    expect_refusal([RRFUSE, image], ["usage"], image=image)


# ------------------------------------------------------ read-only mounts

def _populate(image):
    """Put /f (a small file) and /d (a directory) into image with debugfs."""
    src = image + ".src"
    with open(src, "w") as f:
        f.write("hello\n")
    r = subprocess.run(["debugfs", "-w", "-f", "-", image],
                       input="write %s f\nmkdir d\n" % src,
                       capture_output=True, text=True)
    os.unlink(src)
    assert r.returncode == 0, r.stdout + r.stderr
    # debugfs does not maintain quota usage: let e2fsck bring it up to date.
    r = subprocess.run(["e2fsck", "-fy", image], capture_output=True,
                       text=True)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    rc, out = fsck(image)
    assert rc == 0, out


def _mount_options(mnt):
    lines = mounts_of(mnt)
    assert lines, "not mounted at %s" % mnt
    left = lines[-1].partition(" - ")[0]
    return set(left.split()[5].split(","))


def _assert_writes_erofs(mnt):
    f = os.path.join(mnt, "f")
    with open(f) as fh:
        assert fh.read() == "hello\n"
    attempts = [
        ("create", lambda: os.open(os.path.join(mnt, "new"),
                                   os.O_WRONLY | os.O_CREAT, 0o644)),
        ("open O_WRONLY", lambda: os.open(f, os.O_WRONLY)),
        ("truncate", lambda: os.truncate(f, 0)),
        ("mkdir", lambda: os.mkdir(os.path.join(mnt, "newdir"))),
        ("unlink", lambda: os.unlink(f)),
        ("rmdir", lambda: os.rmdir(os.path.join(mnt, "d"))),
        ("rename", lambda: os.rename(f, os.path.join(mnt, "g"))),
        ("link", lambda: os.link(f, os.path.join(mnt, "h"))),
        ("symlink", lambda: os.symlink("f", os.path.join(mnt, "s"))),
        ("chmod", lambda: os.chmod(f, 0o600)),
        ("chown", lambda: os.chown(f, 1, 1)),
        ("utime", lambda: os.utime(f, (1, 1))),
        ("setxattr", lambda: os.setxattr(f, "user.x", b"1")),
    ]
    wrong = []
    for name, fn in attempts:
        try:
            fd = fn()
        except OSError as e:
            if e.errno != errno.EROFS:
                wrong.append("%s: %s" % (name, errno.errorcode.get(e.errno)))
        else:
            if isinstance(fd, int):
                os.close(fd)
            wrong.append("%s: succeeded" % name)
    assert not wrong, "writes on a read-only mount did not fail with EROFS: " \
        + ", ".join(wrong)
    assert sorted(os.listdir(mnt)) == ["d", "f", "lost+found"]


def test_ro_option(wd):
    image = new_image(wd)
    _populate(image)
    before = sha256(image)
    m = Mount(image, opts="ro", mnt=os.path.join(wd, "mnt"))
    m.mount()
    try:
        assert "ro" in _mount_options(m.mnt)
        _assert_writes_erofs(m.mnt)
        m.unmount()
    finally:
        m.cleanup()
    assert not mounts_of(m.mnt, image)
    assert sha256(image) == before, "-o ro modified the image"
    rc, out = fsck(image)
    assert rc == 0, out


def test_ro_compat_quota_mounts_read_only(wd):
    image = new_image(wd, mkfs_args=["-O", "quota"])
    _populate(image)
    before = sha256(image)
    m = Mount(image, mnt=os.path.join(wd, "mnt"))
    m.mount()
    try:
        log = m.daemon_log
        assert "quota" in log and "read-only" in log.lower(), (
            "no warning naming the quota feature on stderr:\n" + log)
        assert "ro" in _mount_options(m.mnt)
        _assert_writes_erofs(m.mnt)
        m.unmount()
    finally:
        m.cleanup()
    assert not mounts_of(m.mnt, image)
    assert sha256(image) == before, "read-only (quota) mount modified the image"
    rc, out = fsck(image)
    assert rc == 0, out


# -------------------------------------------------------- positive control

def test_clean_image_mounts(wd):
    image = new_image(wd)
    before = sha256(image)
    m = Mount(image, mnt=os.path.join(wd, "mnt"))
    m.mount()
    try:
        assert "rw" in _mount_options(m.mnt)
        with open(m.path("written"), "w") as f:
            f.write("control\n")
        with open(m.path("written")) as f:
            assert f.read() == "control\n"
        m.unmount()
    finally:
        m.cleanup()
    assert not mounts_of(m.mnt, image)
    rc, out = fsck(image)
    assert rc == 0, out
    # The sha256 check used above can see a change when there is one.
    assert sha256(image) != before
