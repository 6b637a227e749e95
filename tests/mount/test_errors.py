"""I/O errors and the errors= behaviour, as ext4 has them.

Failing sectors are simulated with RRFUSE_IO_FAIL (testing only: every read
"r:N" or write "w:N" touching 4 KiB block N of the image fails with EIO).
A metadata error is a filesystem error: logged, counted in the superblock
(dumpe2fs: "clean with errors", "FS Error count"), then continue,
remount-ro or panic; a data error is EIO to the caller, logged once."""
import errno
import os
import re
import subprocess
import time

import pytest

import conftest
from conftest import (Mount, debugfs, fsck, make_image, require_mount_backend,
                      wait_for)

pytestmark = pytest.mark.rrfuse_only


@pytest.fixture
def image():
    """A 64 MiB image with /a and /f1../f20; the fs fixture would fsck a failing one."""
    require_mount_backend()
    path = make_image(size="64M")
    m = Mount(path)
    m.mount()
    try:
        with open(m.path("a"), "w") as f:
            f.write("hello\n")
        for i in range(1, 21):
            with open(m.path("f%d" % i), "w") as f:
                f.write("%d\n" % i)
    finally:
        m.unmount()
    yield path
    if not conftest.KEEP:
        conftest._rm_workdir(os.path.dirname(path))


def inode_block(image, path):
    return int(re.search(r"located at block (\d+)", debugfs(image, "imap " + path)).group(1))


def data_block(image, path):
    return int(debugfs(image, "bmap %s 0" % path).split()[-1])


def sb_field(image, name):
    out = subprocess.run(["dumpe2fs", "-h", image], capture_output=True, text=True).stdout
    m = re.search(r"^%s:\s*(.*)$" % re.escape(name), out, re.M)
    return m.group(1).strip() if m else None


def mount_failing(image, monkeypatch, fail, opts=""):
    monkeypatch.setenv("RRFUSE_IO_FAIL", fail)
    m = Mount(image, opts=opts)
    m.mount()
    monkeypatch.delenv("RRFUSE_IO_FAIL")
    return m


def expect_errno(code, fn, *args):
    with pytest.raises(OSError) as e:
        fn(*args)
    assert e.value.errno == code, e.value


def test_metadata_error_continue(image, monkeypatch):
    blk = inode_block(image, "/f15")
    assert blk != inode_block(image, "/a")
    m = mount_failing(image, monkeypatch, "r:%d" % blk)
    try:
        expect_errno(errno.EIO, os.stat, m.path("f15"))
        with open(m.path("a")) as f:           # errors=continue: the rest works
            assert f.read() == "hello\n"
        with open(m.path("new"), "w") as f:
            f.write("after\n")
        assert "I/O error reading metadata block %d" % blk in m.daemon_log
        m.unmount()
    finally:
        m.cleanup()
    assert sb_field(image, "Filesystem state") == "clean with errors"
    assert int(sb_field(image, "FS Error count")) >= 1
    assert sb_field(image, "First error block #") == str(blk)
    assert sb_field(image, "First error err") == "EIO"
    rc, out = fsck(image)
    assert rc == 0, out


@pytest.mark.parametrize("how", ["option", "superblock"])
def test_remount_ro(image, monkeypatch, how):
    opts = "errors=remount-ro" if how == "option" else ""
    if how == "superblock":
        subprocess.run(["tune2fs", "-e", "remount-ro", image], check=True, capture_output=True)
    m = mount_failing(image, monkeypatch, "r:%d" % inode_block(image, "/f15"), opts)
    try:
        with open(m.path("before"), "w") as f:
            f.write("made before the error\n")
            # Written back before the error: held data is not written after it (ext4's writeback fails).
            f.flush()
            os.fsync(f.fileno())
        expect_errno(errno.EIO, os.stat, m.path("f15"))
        expect_errno(errno.EROFS, open, m.path("after"), "w")
        expect_errno(errno.EROFS, os.unlink, m.path("a"))
        with open(m.path("a")) as f:
            assert f.read() == "hello\n"
        assert "remounting read-only" in m.daemon_log
        m.unmount()
    finally:
        m.cleanup()
    assert sb_field(image, "Filesystem state") == "clean with errors"
    out = debugfs(image, "cat /before")
    assert "made before the error" in out      # what was synced before still reached the image
    rc, out = fsck(image)
    assert rc == 0, out


def test_panic(image, monkeypatch):
    m = mount_failing(image, monkeypatch, "r:%d" % inode_block(image, "/f15"), "errors=panic")
    try:
        # The daemon stops before it answers: the kernel aborts the call.
        with pytest.raises(OSError) as e:
            os.stat(m.path("f15"))
        assert e.value.errno in (errno.EIO, errno.ECONNABORTED), e.value
        assert wait_for(lambda: not m.daemon_alive(), timeout=10)
        expect_errno(errno.ENOTCONN, os.stat, m.path("a"))
        assert "errors=panic" in m.daemon_log
    finally:
        m.cleanup()
    assert "errors" in sb_field(image, "Filesystem state")
    assert int(sb_field(image, "FS Error count")) >= 1
    rc, out = fsck(image)       # nothing was changed before the error: clean
    assert rc == 0, out


def test_data_error_logged_once(image, monkeypatch):
    blk = data_block(image, "/a")
    m = mount_failing(image, monkeypatch, "r:%d" % blk)
    try:
        for _ in range(3):
            expect_errno(errno.EIO, lambda: open(m.path("a")).read())
        with open(m.path("f3")) as f:
            assert f.read() == "3\n"
        assert m.daemon_log.count("I/O error reading block %d" % blk) == 1, m.daemon_log
        m.unmount()
    finally:
        m.cleanup()
    # As ext4: a failed data read is the caller's EIO, not a filesystem error.
    assert sb_field(image, "Filesystem state") == "clean"


def test_bad_errors_value(image):
    before = open(image, "rb").read()
    mnt = os.path.join(os.path.dirname(image), "mnt")
    os.makedirs(mnt, exist_ok=True)
    r = subprocess.run([conftest.RRFUSE, image, mnt, "-f", "-o", "errors=sometimes"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "errors=" in r.stderr and "remount-ro" in r.stderr, r.stderr
    assert open(image, "rb").read() == before


def sanitized():
    out = subprocess.run(["ldd", conftest.RRFUSE], capture_output=True, text=True).stdout
    return "libasan" in out or "libtsan" in out


@pytest.mark.rrfuse_only
def test_a_crash_leaves_a_record(image, tmp_path):
    """A daemon that dies says so in its log, with a backtrace, and dies of
    the same signal (so a core dump is written where the system allows)."""
    if sanitized():
        pytest.skip("the sanitizers' own handlers report crashes in this build")
    import resource
    m = Mount(image)
    m.mount()
    # No core file from this test's crash.
    resource.prlimit(m.proc.pid, resource.RLIMIT_CORE, (0, 0))
    proc = m.proc
    with open(m.path("f"), "w") as f:
        f.write("before the crash\n")
    os.sync()
    proc.send_signal(11)
    assert proc.wait(30) == -11
    m.proc = None
    subprocess.run(["fusermount3", "-uz", m.mnt])
    m.mounted = False
    m._close_log()
    log = m.daemon_log
    assert "fatal signal 11 (Segmentation fault)" in log, log
    assert "backtrace:" in log and "libfuse3" in log, log
    # What the image looks like after a crash is the journal's business (not yet written).


def rrfuse_function(name):
    """True when name is a function defined in rrfuse's sources."""
    pat = re.compile(r"^\w[\w \*]*\b%s\(" % re.escape(name), re.M)
    return any(pat.search(open(os.path.join(d, f)).read())
               for d, _, files in os.walk(os.path.join(conftest.REPO, "src"))
               for f in files if f.endswith(".c"))


def inode_number(image, path):
    return int(re.search(r"Inode: (\d+)", debugfs(image, "stat " + path)).group(1))


def test_error_record_says_where(image, monkeypatch):
    # As the kernel's __ext4_error and fuse2fs: the superblock's first and
    # last error name the function and line that met it, the inode and the
    # block, for dumpe2fs -h; the first one of an earlier mount stays first.
    bad, failing = inode_number(image, "/f3"), inode_number(image, "/f15")
    imap = debugfs(image, "imap /f3")
    at = (int(re.search(r"located at block (\d+)", imap).group(1)) * 4096
          + int(re.search(r"offset (0x[0-9a-f]+)", imap).group(1), 16) + 40)    # i_block[0]
    with open(image, "rb") as f:
        f.seek(at)
        word = int.from_bytes(f.read(4), "little")
    debugfs(image, "sif /f3 block[0] 0x1234", write=True)     # extent header magic gone
    m = Mount(image)
    m.mount()
    try:
        expect_errno(errno.EIO, lambda: open(m.path("f3")).read())
        m.unmount()
    finally:
        m.cleanup()
    assert sb_field(image, "First error err") == "EFSCORRUPTED"
    assert sb_field(image, "First error inode #") == str(bad)
    func = sb_field(image, "First error function")
    assert func and rrfuse_function(func), func
    assert int(sb_field(image, "First error line #")) > 0
    count = int(sb_field(image, "FS Error count"))

    blk = inode_block(image, "/f15")
    m = mount_failing(image, monkeypatch, "r:%d" % blk)
    try:
        expect_errno(errno.EIO, os.stat, m.path("f15"))
        m.unmount()
    finally:
        m.cleanup()
    assert sb_field(image, "First error inode #") == str(bad)
    assert sb_field(image, "First error function") == func
    assert sb_field(image, "Last error err") == "EIO"
    assert sb_field(image, "Last error inode #") == str(failing)
    assert sb_field(image, "Last error block #") == str(blk)
    last = sb_field(image, "Last error function")
    assert last and rrfuse_function(last), last
    assert int(sb_field(image, "Last error line #")) > 0
    assert int(sb_field(image, "FS Error count")) > count
    debugfs(image, "sif /f3 block[0] %#x" % word, write=True)  # the header back: e2fsck clean
    rc, out = fsck(image)
    assert rc == 0, out
