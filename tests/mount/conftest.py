"""Shared fixtures for the through-the-mount test suite of rrfuse.

Environment
-----------
RRFUSE              path to the daemon binary (default <repo>/build/rrfuse)
RRFUSE_TEST_KERNEL  "1": mount every image with the kernel's ext4
                    (mount -o loop) instead of rrfuse, to validate the tests
RRFUSE_TMP          directory for images and mount points (default /var/tmp)
RRFUSE_KEEP         "1": do not delete images after the tests
RRFUSE_TEST_TIMEOUT per-test watchdog in seconds (default 600); when it fires
                    the FUSE connection is aborted so hung syscalls return
                    ENOTCONN instead of hanging the whole suite

Public helpers (importable with ``from conftest import ...``)
------------------------------------------------------------
KERNEL, RRFUSE, TMPROOT
make_image(size="256M", mkfs_args=()) -> path
Mount(image, opts="", mnt=None)  .mnt .image .opts .kernel .mount() .unmount()
                                 .remount(opts=None) .daemon_log .proc .mounted
fsck(image) -> (rc, output)               e2fsck -fn
debugfs(image, *cmds, write=False) -> stdout
snapshot(root) -> {relpath: {...}}        tree description used by cross-check
compare_snapshots(a, b) -> list of differences (empty when equal)
kernel_check(image, fuse_snapshot)        loop-mount ro, compare, assert
run_as(uid, gid, fn_or_cmd, **kw)         run a callable / command unprivileged
file_digest(path)                         content digest (hole aware)
wait_for(cond, timeout=5.0)               poll cond() until true; return it
pattern(seed, n) -> bytes                 deterministic pseudo-random data
getdents(path, bufsize=32768)             raw [(d_ino, d_off, d_type, name)]
syncfs(path)                              syncfs(2) of the fs holding path
require_root(), require_fuse(), require_binary(), loop_works()

Fixtures
--------
fs              function scope, one fresh image + Mount; markers:
                @pytest.mark.image(size="1G", mkfs_args=["-N", "100000"])
                @pytest.mark.opts("allow_other,default_permissions")
                @pytest.mark.no_kernel_check
                Teardown: snapshot, unmount (daemon exit status 0),
                e2fsck -fn rc 0, kernel cross-check.
mount_factory   function scope factory: mount_factory(image=None, opts="",
                size="256M", mkfs_args=(), check=True) -> mounted Mount;
                same teardown as fs for every Mount it made.
as_user         function scope: callable(fn_or_cmd, uid=65534, gid=65534, **kw)
                == run_as; skips when not root.
"""

import errno
import hashlib
import os
import re
import pickle
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
RRFUSE = os.environ.get("RRFUSE") or os.path.join(REPO, "build", "rrfuse")
RRCTL = os.environ.get("RRCTL") or os.path.join(os.path.dirname(RRFUSE), "rrctl")
KERNEL = os.environ.get("RRFUSE_TEST_KERNEL", "") not in ("", "0")
TMPROOT = os.environ.get("RRFUSE_TMP") or "/var/tmp"
KEEP = os.environ.get("RRFUSE_KEEP", "") not in ("", "0")
TEST_TIMEOUT = float(os.environ.get("RRFUSE_TEST_TIMEOUT", "600"))

MOUNT_TIMEOUT = 30.0
EXIT_TIMEOUT = 30.0

# Options the kernel's ext4 understands; everything else in a marker's
# option string is FUSE/rrfuse specific and is dropped in kernel mode.
_KERNEL_OPTS = {
    "ro", "rw", "noatime", "relatime", "strictatime", "nodiratime", "atime",
    "diratime", "lazytime", "nolazytime", "sync", "async", "dirsync", "acl",
    "noacl", "user_xattr", "nouser_xattr", "noexec", "exec", "nosuid",
    "suid", "nodev", "dev", "discard", "nodiscard", "barrier", "nobarrier",
}

_created_dirs = []


# ----------------------------------------------------------------- markers

MARKERS = [
    "image(size='256M', mkfs_args=[]): image used by the fs fixture",
    "opts(options): mount options (comma separated) for the fs fixture",
    "no_kernel_check: skip the kernel cross-check at fs teardown",
    "rrfuse_only: test exercises rrfuse specific behaviour; skipped in "
    "kernel mode (RRFUSE_TEST_KERNEL=1)",
    "slow: test takes more than a few seconds",
    "corrupt_image: the test damages the image on purpose, so the daemon may "
    "report corruption (otherwise such a report fails the test)",
]

# What the daemon says only of a damaged image: on a sound one, a false report.
CORRUPTION_SIGNS = ("corrupt filesystem?", "and descriptor (", "freeing blocks that are free",
                    "in the buddy", "run e2fsck")


def pytest_configure(config):
    for m in MARKERS:
        config.addinivalue_line("markers", m)


def pytest_collection_modifyitems(config, items):
    if not KERNEL:
        return
    skip = pytest.mark.skip(reason="rrfuse specific (RRFUSE_TEST_KERNEL=1)")
    for item in items:
        if item.get_closest_marker("rrfuse_only"):
            item.add_marker(skip)


def pytest_report_header(config):
    mode = "kernel ext4 (RRFUSE_TEST_KERNEL=1)" if KERNEL else RRFUSE
    return ["rrfuse mount tests: filesystem under test = %s, images in %s"
            % (mode, TMPROOT)]


def pytest_sessionfinish(session, exitstatus):
    if KEEP:
        return
    for d in _created_dirs:
        _rm_workdir(d)


# ------------------------------------------------------------ requirements

def is_root():
    return os.geteuid() == 0


def require_root(why="mounting"):
    if not is_root():
        pytest.skip("needs root for %s" % why)


def require_fuse():
    if not os.path.exists("/dev/fuse"):
        pytest.skip("needs /dev/fuse (FUSE kernel module)")
    if shutil.which("fusermount3") is None:
        pytest.skip("needs fusermount3 (apt-get install fuse3)")


def require_binary():
    if not (os.path.isfile(RRFUSE) and os.access(RRFUSE, os.X_OK)):
        pytest.skip("rrfuse binary missing: %s (build it or set RRFUSE=)"
                    % RRFUSE)


def require_tools():
    for tool in ("mke2fs", "e2fsck"):
        if shutil.which(tool) is None and not os.path.exists("/sbin/" + tool):
            pytest.skip("needs %s (apt-get install e2fsprogs)" % tool)


def require_mount_backend():
    """Skip unless the configured backend (rrfuse or kernel) can mount."""
    require_tools()
    if KERNEL:
        require_root("kernel mode (mount -o loop)")
        if not loop_works():
            pytest.skip("kernel mode needs working loop devices")
    else:
        require_fuse()
        require_binary()


_loop_ok = None


def loop_works():
    """True when we are root and an ext4 image can be loop-mounted."""
    global _loop_ok
    if _loop_ok is not None:
        return _loop_ok
    _loop_ok = False
    if not is_root() or not os.path.exists("/dev/loop-control"):
        return False
    d = tempfile.mkdtemp(prefix="rrfuse-loopprobe-", dir=TMPROOT)
    try:
        img = os.path.join(d, "probe.img")
        mnt = os.path.join(d, "mnt")
        os.mkdir(mnt)
        with open(img, "wb") as f:
            f.truncate(8 << 20)
        subprocess.run(["mke2fs", "-q", "-t", "ext4", "-F", img], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        r = subprocess.run(["mount", "-o", "loop,ro", img, mnt],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if r.returncode == 0:
            subprocess.run(["umount", mnt])
            _loop_ok = True
    except Exception:
        pass
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return _loop_ok


# ------------------------------------------------------------------ images

def _new_workdir(prefix="rrfuse-test-"):
    os.makedirs(TMPROOT, exist_ok=True)
    d = tempfile.mkdtemp(prefix=prefix, dir=TMPROOT)
    os.chmod(d, 0o755)      # unprivileged users must reach the mount point
    _created_dirs.append(d)
    return d


def _rm_workdir(d):
    # never delete through a live mount
    for sub in ("mnt", "kmnt"):
        p = os.path.join(d, sub)
        if os.path.isdir(p) and _mountinfo_entry(p) is not None:
            return
    shutil.rmtree(d, ignore_errors=True)


def make_image(size="256M", mkfs_args=(), path=None):
    """Create a sparse ext4 image and return its path."""
    if path is None:
        path = os.path.join(_new_workdir(), "image.img")
    subprocess.run(["truncate", "-s", str(size), path], check=True)
    cmd = ["mke2fs", "-q", "-t", "ext4", "-b", "4096", "-F"]
    cmd += [str(a) for a in mkfs_args] + [path]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    assert r.returncode == 0, "mke2fs failed: %s\n%s" % (cmd, r.stdout)
    return path


def debugfs(image, *cmds, write=False):
    """Run debugfs commands on image; return their output (stdout)."""
    r = subprocess.run(["debugfs"] + (["-w"] if write else []) + ["-f", "-", image],
                       input="".join(c + "\n" for c in cmds), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, "debugfs %s: %s" % (cmds, r.stderr)
    return r.stdout


def leaf_extents(image, name):
    """Leaf extents of /name as (logical start, physical start, length), from
    debugfs 'ex' (lines whose level equals the depth; a one-block extent is
    printed without its "lo - hi" ranges)."""
    out = []
    for line in debugfs(image, "ex /" + name).splitlines()[1:]:
        f = line.replace("/", " / ").split()     # " 1/ 1   1/ 55  0 - 2047  4385 - 6432  2048"
        if len(f) >= 3 and f[1] == "/" and f[0] == f[2]:
            nums = [int(x) for x in f[6:] if x.isdigit()]
            out.append((nums[0], nums[1], 1) if len(nums) == 3 else (nums[0], nums[2], nums[4]))
    return out


def image_blocks(image):
    """(block count, free blocks, block size) from the superblock."""
    out = subprocess.run(["dumpe2fs", "-h", image], capture_output=True, text=True,
                         check=True).stdout
    return tuple(int(re.search(r"^%s:\s+(\d+)" % k, out, re.M).group(1))
                 for k in ("Block count", "Free blocks", "Block size"))


def image_writer(image):
    """Is a writer (an rrfuse daemon still finishing) holding the image's
    lock?  rrfuse holds it exclusively from open to the last write."""
    import fcntl
    try:
        fd = os.open(image, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def fsck(image):
    """Run e2fsck -fn IMAGE; return (rc, output).  Checking an image whose
    daemon still writes it would report damage that is not there (or
    cause it, with -y): that is a test failure of its own."""
    assert not image_writer(image), \
        "%s checked while its rrfuse daemon still writes it" % image
    r = subprocess.run(["e2fsck", "-fn", image], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


# ------------------------------------------------------------------- mount

def _unescape_mountinfo(s):
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 3 < len(s) and s[i + 1:i + 4].isdigit():
            out.append(chr(int(s[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def _mountinfo_entry(path):
    """Return (major:minor, fstype, source) of the top mount at path."""
    path = os.path.realpath(path)
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            if _unescape_mountinfo(fields[4]) == path:
                r = right.split()
                found = (fields[2], r[0], r[1] if len(r) > 1 else "")
    return found


class MountError(Exception):
    pass


class Mount:
    """An image mounted either by rrfuse (default) or by the kernel."""

    def __init__(self, image, opts="", mnt=None, kernel=None, cpus=None):
        self.image = image
        self.opts = opts or ""
        # The CPUs the daemon's threads may run on (None: any), for what per-CPU
        # state decides (rralloc's cursors, the locality groups).
        self.cpus = cpus
        self.kernel = KERNEL if kernel is None else kernel
        if mnt is None:
            mnt = os.path.join(os.path.dirname(image), "mnt")
        os.makedirs(mnt, exist_ok=True)
        self.mnt = mnt
        self.proc = None
        self.logpath = os.path.join(os.path.dirname(mnt), "daemon.log")
        self._logf = None
        self._conn = None
        self.mounted = False
        self.aborted = False

    def __repr__(self):
        return "<Mount %s on %s opts=%r %s>" % (
            self.image, self.mnt, self.opts,
            "kernel" if self.kernel else "rrfuse")

    def path(self, *parts):
        return os.path.join(self.mnt, *parts)

    # -- options
    def kernel_opts(self):
        keep = [o for o in self.opts.split(",")
                if o and o.split("=")[0] in _KERNEL_OPTS]
        return ",".join(["loop"] + keep)

    @property
    def readonly(self):
        return "ro" in self.opts.split(",")

    # -- mount / unmount
    def mount(self):
        assert not self.mounted, "already mounted"
        self.aborted = False
        if self.kernel:
            r = subprocess.run(["mount", "-t", "ext4", "-o", self.kernel_opts(),
                                self.image, self.mnt],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
            if r.returncode != 0:
                raise MountError("kernel mount failed: %s" % r.stdout)
            self.mounted = True
            return self
        assert not image_writer(self.image), \
            "%s mounted while its previous daemon still writes it" % self.image
        cmd = [RRFUSE, self.image, self.mnt, "-f"]
        # RRFUSE_OPTS (e.g. "check") is added to every mount of the suite.
        opts = ",".join(o for o in (os.environ.get("RRFUSE_OPTS", ""), self.opts) if o)
        if opts:
            cmd += ["-o", opts]
        self._logf = open(self.logpath, "ab")
        pin = None if self.cpus is None else (lambda: os.sched_setaffinity(0, self.cpus))
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                     stdout=self._logf, stderr=self._logf, preexec_fn=pin)
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while True:
            ent = _mountinfo_entry(self.mnt)
            if ent is not None and ent[1].startswith("fuse"):
                break
            if self.proc.poll() is not None:
                rc = self.proc.returncode
                self.proc = None
                raise MountError("rrfuse exited with %s before the mount was "
                                 "up:\n%s" % (rc, self.daemon_log))
            if time.monotonic() > deadline:
                self._kill()
                raise MountError("rrfuse did not mount within %ss:\n%s"
                                 % (MOUNT_TIMEOUT, self.daemon_log))
            time.sleep(0.02)
        self._conn = ent[0]
        self.mounted = True
        try:
            os.stat(self.mnt)      # the first request must be answered
        except OSError:
            self.cleanup()         # a mount that cannot answer is not left behind
            raise
        return self

    def _kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def _umount_cmd(self, lazy=False):
        if self.kernel:
            return ["umount"] + (["-l"] if lazy else []) + [self.mnt]
        if lazy:
            return ["fusermount3", "-uz", self.mnt]
        # The documented way: returns once the daemon has let go of the image.
        return [RRFUSE, "-u", self.mnt]

    def unmount(self):
        """Unmount; for rrfuse wait for the daemon and assert exit 0."""
        assert self.mounted, "not mounted"
        out = ""
        for attempt in range(50):
            r = subprocess.run(self._umount_cmd(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
            if r.returncode == 0:
                if not self.kernel:
                    assert not image_writer(self.image), \
                        "rrfuse -u returned while the daemon still writes %s" % self.image
                break
            out = r.stdout
            if self.proc is not None and self.proc.poll() is not None:
                break
            if _mountinfo_entry(self.mnt) is None:
                break
            import gc
            gc.collect()
            time.sleep(0.1)
        else:
            subprocess.run(self._umount_cmd(lazy=True))
            self.mounted = False
            self._finish_daemon()
            raise MountError("unmount of %s failed (busy?): %s"
                             % (self.mnt, out))
        self.mounted = False
        self._finish_daemon()
        return self

    def _finish_daemon(self):
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        try:
            rc = proc.wait(EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            self._close_log()
            raise MountError("rrfuse did not exit within %ss after unmount:\n%s"
                             % (EXIT_TIMEOUT, self.daemon_log))
        self._close_log()
        if _mountinfo_entry(self.mnt) is not None:
            # daemon died but the mount is still there (ENOTCONN)
            subprocess.run(self._umount_cmd(lazy=True))
        if rc != 0:
            raise MountError("rrfuse exited with status %s:\n%s"
                             % (rc, self.daemon_log))

    def _close_log(self):
        if self._logf is not None:
            self._logf.close()
            self._logf = None

    def remount(self, opts=None):
        self.unmount()
        if opts is not None:
            self.opts = opts
        return self.mount()

    def daemon_alive(self):
        return self.kernel or (self.proc is not None and self.proc.poll() is None)

    @property
    def daemon_log(self):
        try:
            with open(self.logpath, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    # -- watchdog
    def abort(self):
        """Abort the FUSE connection (hung syscalls then fail ENOTCONN)."""
        if self.kernel or not self.mounted or self._conn is None:
            return
        major, minor = (int(x) for x in self._conn.split(":"))
        name = str((major << 20) | minor)
        ctl = "/sys/fs/fuse/connections"
        if not os.path.exists(os.path.join(ctl, name)):
            subprocess.run(["mount", "-t", "fusectl", "none", ctl],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            with open(os.path.join(ctl, name, "abort"), "w") as f:
                f.write("1")
            self.aborted = True
        except OSError:
            pass
        self._kill()

    def cleanup(self):
        """Best effort teardown without assertions (after failures)."""
        if self.mounted:
            subprocess.run(self._umount_cmd(lazy=True),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.mounted = False
        if self.proc is not None:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self._kill()
            self.proc = None
        self._close_log()


# ---------------------------------------------------------------- snapshot

def _xattrs(path):
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError as e:
        if e.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return {}
        raise
    out = {}
    for n in sorted(names):
        try:
            out[n] = os.getxattr(path, n, follow_symlinks=False)
        except OSError as e:
            out[n] = "<error %s>" % errno.errorcode.get(e.errno, e.errno)
    return out


_CHUNK = 1 << 20
_ZERO = bytes(_CHUNK)


def file_digest(path):
    """Content digest of a file, cheap on sparse files.

    sha256 over per-MiB tokens: "Z" for an all-zero MiB (whether it is a
    hole or written zeros), the MiB's sha256 otherwise, plus the size.
    Equal content gives equal digests whatever the holes look like;
    SEEK_DATA is used only to avoid reading holes.
    """
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        off = 0
        while off < size:
            try:
                data_at = os.lseek(fd, off, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:      # only a hole remains
                    data_at = size
                else:                           # no SEEK_DATA support
                    data_at = off
            data_at = min(size, data_at - data_at % _CHUNK)
            while off < data_at:                # whole-MiB hole chunks
                h.update(b"Z")
                off += _CHUNK
            if off >= size:
                break
            n = min(_CHUNK, size - off)
            b = os.pread(fd, n, off)
            if len(b) < n:                      # short read: keep reading
                parts = [b]
                got = len(b)
                while got < n:
                    x = os.pread(fd, n - got, off + got)
                    if not x:
                        break
                    parts.append(x)
                    got += len(x)
                b = b"".join(parts)
            if len(b) == _CHUNK and b == _ZERO:
                h.update(b"Z")
            elif len(b) < _CHUNK and b == _ZERO[:len(b)]:
                h.update(b"z%d" % len(b))
            else:
                h.update(hashlib.sha256(b).digest())
            off += n
        h.update(b"size=%d" % size)
    finally:
        os.close(fd)
    return h.hexdigest()


def snapshot(root, skip_top=("lost+found",)):
    """Describe the tree under root: {relpath: {field: value}}.

    Fields: type, mode, uid, gid, size, mtime_ns, nlink, xattrs, plus
    digest (see file_digest) for regular files, target for symlinks, and
    link (the first
    path, in sorted order, sharing the inode) for multiply-linked files.
    atime is deliberately ignored.
    """
    snap = {}
    inodes = {}

    def add(rel, full):
        st = os.lstat(full)
        d = {
            "type": stat.S_IFMT(st.st_mode),
            "mode": stat.S_IMODE(st.st_mode),
            "uid": st.st_uid,
            "gid": st.st_gid,
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "nlink": st.st_nlink,
            "xattrs": _xattrs(full),
        }
        if stat.S_ISREG(st.st_mode):
            d["digest"] = file_digest(full)
        elif stat.S_ISLNK(st.st_mode):
            d["target"] = os.readlink(full)
        if not stat.S_ISDIR(st.st_mode) and st.st_nlink > 1:
            d["link"] = inodes.setdefault(st.st_ino, rel)
        snap[rel] = d
        return st

    def walk(rel, full):
        names = sorted(os.listdir(full))
        for n in names:
            if rel == "" and n in skip_top:
                continue
            r = n if rel == "" else rel + "/" + n
            f = os.path.join(full, n)
            st = add(r, f)
            if stat.S_ISDIR(st.st_mode):
                walk(r, f)

    add("", root)
    walk("", root)
    return snap


def compare_snapshots(a, b, limit=40):
    """Differences between snapshots a (expected) and b (actual)."""
    diffs = []
    for p in sorted(set(a) | set(b)):
        if p not in b:
            diffs.append("%r: missing in second tree" % p)
        elif p not in a:
            diffs.append("%r: only in second tree" % p)
        elif a[p] != b[p]:
            for k in sorted(set(a[p]) | set(b[p])):
                va, vb = a[p].get(k), b[p].get(k)
                if va != vb:
                    diffs.append("%r %s: %r != %r" % (p, k, va, vb))
        if len(diffs) >= limit:
            diffs.append("... (more differences not shown)")
            break
    return diffs


def kernel_check(image, fuse_snap):
    """Loop-mount image read-only and compare with fuse_snap."""
    d = os.path.join(os.path.dirname(image), "kmnt")
    os.makedirs(d, exist_ok=True)
    r = subprocess.run(["mount", "-t", "ext4", "-o", "loop,ro", image, d],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    assert r.returncode == 0, "kernel refused to mount the image: %s" % r.stdout
    try:
        ksnap = snapshot(d)
    finally:
        subprocess.run(["umount", d], check=True)
    diffs = compare_snapshots(fuse_snap, ksnap)
    assert not diffs, ("kernel ext4 sees a different tree than the mount "
                       "did (first = through mount, second = kernel):\n"
                       + "\n".join(diffs))


def check_mount(m, kernel_cross_check=True, sound=True):
    """The fs teardown: snapshot, unmount, fsck, kernel cross-check; with
    sound (the test damaged nothing), no report of corruption in the log."""
    if m.aborted:
        m.cleanup()
        pytest.fail("test timed out (watchdog aborted the FUSE connection)\n"
                    + m.daemon_log)
    if not m.mounted:
        m.mount()
    if not m.daemon_alive():
        log = m.daemon_log
        m.cleanup()
        pytest.fail("rrfuse died during the test:\n" + log)
    do_kernel = kernel_cross_check and loop_works()
    snap = snapshot(m.mnt) if do_kernel else None
    m.unmount()
    if sound:
        log = m.daemon_log
        said = [l for l in log.splitlines() if any(w in l for w in CORRUPTION_SIGNS)]
        assert not said, "the daemon reported corruption of a sound image:\n" + "\n".join(said)
        # The engine checks every policy answer (allocators/mb_guard.c): only the fault-injection
        # policy may ever have one refused.
        said = [l for l in log.splitlines() if "' chose blocks " in l and "allocator 'liar'" not in l]
        assert not said, "the allocator refused a policy's answer:\n" + "\n".join(said)
    rc, out = fsck(m.image)
    assert rc == 0, "e2fsck -fn %s returned %d:\n%s" % (m.image, rc, out)
    if do_kernel:
        kernel_check(m.image, snap)


# ----------------------------------------------------------------- fixtures

def lock_holders(image):
    """The /proc/locks lines on image: who holds its lock."""
    st = os.stat(image)
    key = "%02x:%02x:%d " % (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    with open("/proc/locks") as f:
        return [l.strip() for l in f if key in l]


# rrfuse's own wait for a previous daemon's lock (IO_HOLDER_WAIT_SECS, src/io/dev.c)
HOLDER_WAIT_SECS = 60


def kill_daemon(m):
    """SIGKILL rrfuse: the image keeps what it wrote, nothing more.  Returns
    once the image's lock is free: the dead daemon's last file reference can
    go after it is reaped (CI saw it under ASan with -o io_uring), and a
    mount then waits for it as rrfuse's own open does (lock_image)."""
    m.proc.kill()
    m.proc.wait()
    m.proc = None
    subprocess.run(["fusermount3", "-uz", m.mnt], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    m.mounted = False
    m._close_log()
    deadline = time.monotonic() + HOLDER_WAIT_SECS
    while image_writer(m.image):
        assert time.monotonic() < deadline, \
            "%s still locked %d s after its daemon was killed: %s" % (
                m.image, HOLDER_WAIT_SECS, lock_holders(m.image))
        time.sleep(0.05)


def run_mounted(image, workload, opts="", kernel=False, cpus=None):
    """Mount, run workload(mnt), unmount (daemon exit 0), e2fsck -fn clean;
    returns what workload returned."""
    m = Mount(image, opts=opts, kernel=kernel, cpus=cpus)
    m.mount()
    try:
        ret = workload(m.mnt)
        if not kernel:
            assert m.daemon_alive(), m.daemon_log
        m.unmount()
    finally:
        m.cleanup()
    rc, out = fsck(image)
    assert rc == 0, out
    return ret


@pytest.fixture
def fs(request):
    require_mount_backend()
    im = request.node.get_closest_marker("image")
    kw = {}
    if im is not None:
        kw = dict(im.kwargs)
        if im.args:
            kw.setdefault("size", im.args[0])
    om = request.node.get_closest_marker("opts")
    opts = om.args[0] if (om is not None and om.args) else ""
    check_kernel = request.node.get_closest_marker("no_kernel_check") is None
    sound = request.node.get_closest_marker("corrupt_image") is None

    image = make_image(size=kw.get("size", "256M"),
                       mkfs_args=kw.get("mkfs_args", ()))
    m = Mount(image, opts=opts)
    m.mount()
    timer = threading.Timer(TEST_TIMEOUT, m.abort)
    timer.daemon = True
    timer.start()
    ok = False
    try:
        yield m
        timer.cancel()
        check_mount(m, check_kernel, sound)
        ok = True
    finally:
        timer.cancel()
        if not ok:
            m.cleanup()
        elif not KEEP:
            _rm_workdir(os.path.dirname(image))


@pytest.fixture
def mount_factory(request):
    require_mount_backend()
    made = []
    sound = request.node.get_closest_marker("corrupt_image") is None

    def factory(image=None, opts="", size="256M", mkfs_args=(), check=True):
        if image is None:
            image = make_image(size=size, mkfs_args=mkfs_args)
        m = Mount(image, opts=opts)
        m.mount()
        made.append((m, check))
        return m

    ok = False
    try:
        yield factory
        for m, check in made:
            check_mount(m, check, sound)
        ok = True
    finally:
        for m, _ in made:
            m.cleanup()
        if ok and not KEEP:
            for m, _ in made:
                _rm_workdir(os.path.dirname(m.image))


@pytest.fixture
def loopdev(request):
    """(device, image): losetup over a fresh 128 MiB image; param: logical sector size."""
    require_mount_backend()
    if not loop_works():
        pytest.skip("needs root and loop devices")
    sector = getattr(request, "param", 512)
    image = make_image(size="128M")
    r = subprocess.run(["losetup", "-f", "--show", "--sector-size", str(sector), image],
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip("losetup --sector-size %d: %s" % (sector, r.stderr.strip()))
    dev = r.stdout.strip()
    try:
        yield dev, image
    finally:
        subprocess.run(["losetup", "-d", dev])
        if not KEEP:
            _rm_workdir(os.path.dirname(image))


# ---------------------------------------------------------- unprivileged

def _drop(uid, gid, groups=()):
    os.setgroups(list(groups))
    os.setgid(gid)
    os.setuid(uid)


def run_as(uid, gid, fn_or_cmd, groups=(), **kw):
    """Run fn_or_cmd with the given uid/gid (and no supplementary groups).

    * a callable: executed in a forked child; its return value (picklable)
      is returned, and an exception it raises is re-raised here (an OSError
      keeps its errno, so pytest.raises(PermissionError) works).
    * a command (list, or str which is run through /bin/sh -c): run with
      subprocess.run(capture_output=True, text=True, **kw); the
      CompletedProcess is returned (check its returncode yourself).
    """
    if callable(fn_or_cmd):
        rfd, wfd = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            status = 0
            try:
                os.close(rfd)
                try:
                    _drop(uid, gid, groups)
                    res = ("ok", fn_or_cmd())
                except BaseException as e:  # noqa: B902
                    res = ("exc", e, traceback.format_exc())
                try:
                    data = pickle.dumps(res)
                except Exception:
                    data = pickle.dumps(("exc", RuntimeError(repr(res)), ""))
                with os.fdopen(wfd, "wb") as w:
                    w.write(data)
            except BaseException:
                status = 1
            finally:
                os._exit(status)
        os.close(wfd)
        with os.fdopen(rfd, "rb") as r:
            data = r.read()
        _, st = os.waitpid(pid, 0)
        if not data:
            raise RuntimeError("run_as child died (status %d)" % st)
        res = pickle.loads(data)
        if res[0] == "ok":
            return res[1]
        raise res[1]
    cmd = fn_or_cmd
    if isinstance(cmd, str):
        cmd = ["/bin/sh", "-c", cmd]
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    return subprocess.run(cmd, preexec_fn=lambda: _drop(uid, gid, groups),
                          **kw)


@pytest.fixture
def as_user():
    """as_user(fn_or_cmd, uid=65534, gid=65534, groups=(), **kw)."""
    require_root("switching to an unprivileged user")

    def run(fn_or_cmd, uid=65534, gid=65534, groups=(), **kw):
        return run_as(uid, gid, fn_or_cmd, groups=groups, **kw)

    return run


# ----------------------------------------------------------- misc helpers

def wait_for(cond, timeout=5.0, interval=0.02):
    """Poll cond() until it returns a true value (returned) or timeout
    (the last value is returned).  FUSE sends RELEASE/FORGET
    asynchronously, so e.g. freed space may show up a little later."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(interval)


def pattern(seed, n):
    """n deterministic pseudo-random bytes for seed (str()-able).
    Note: pattern(s, 10) is NOT pattern(s, 20)[:10]; slice a longer one."""
    import random
    return random.Random(str(seed)).randbytes(n)


_libc = None


def syncfs(path):
    """syncfs(2) on the filesystem containing path (cheaper than sync())."""
    import ctypes
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc().syncfs(fd) != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e), path)
    finally:
        os.close(fd)


def fallocate(fd, mode, offset, length):
    """fallocate(2) with any mode; raises OSError."""
    import ctypes
    f = libc().fallocate
    f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    f.restype = ctypes.c_int
    if f(fd, mode, offset, length) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def libc():
    global _libc
    if _libc is None:
        import ctypes
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def getdents(path, bufsize=32768, start=None, max_calls=None):
    """Read a directory with raw getdents64.

    Returns a list of (d_ino, d_off, d_type, name) including '.' and '..'.
    start: lseek the directory fd to this offset first (a d_off value
    returned earlier).  bufsize: small values force many calls.
    """
    import ctypes
    import struct
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    out = []
    try:
        if start is not None:
            os.lseek(fd, start, os.SEEK_SET)
        buf = ctypes.create_string_buffer(bufsize)
        calls = 0
        nr = {"x86_64": 217, "aarch64": 61}[os.uname().machine]
        while max_calls is None or calls < max_calls:
            n = libc().syscall(nr, fd, buf, bufsize)
            calls += 1
            if n < 0:
                e = ctypes.get_errno()
                raise OSError(e, os.strerror(e), path)
            if n == 0:
                break
            raw = buf.raw[:n]
            pos = 0
            while pos < n:
                ino, off, reclen, typ = struct.unpack_from("<QqHB", raw, pos)
                name = raw[pos + 19:pos + reclen].split(b"\0", 1)[0]
                out.append((ino, off, typ, os.fsdecode(name)))
                pos += reclen
    finally:
        os.close(fd)
    return out


def device_io(m):
    """The device's counters from `rrctl -s` (src/io/dev.c): calls that moved
    bytes, as metadata_reads, metadata_writes, metadata_blocks_written, data_reads,
    spliced (of data_reads), data_writes, runs (the syscalls that wrote them),
    writebacks_started_early, flushes."""
    out = subprocess.run([RRCTL, m.mnt, "-s"], capture_output=True, text=True, check=True).stdout
    line = [l for l in out.splitlines() if l.startswith("device:")]
    assert line, out
    return {k.replace(" ", "_"): int(v) for v, k in
            re.findall(r"(\d+) (metadata reads|metadata writes|metadata blocks written|data reads|"
                       r"data writes|flushes|spliced|runs|writebacks started early)", line[0])}


def image_cachestat(image):
    """The image file's page cache, in bytes: cachestat(2) (Linux 6.5, the
    x86_64 number), on a descriptor of the image: cached, dirty, writeback."""
    import ctypes
    if os.uname().machine != "x86_64":
        pytest.skip("cachestat's system call number is x86_64's here")
    libc = ctypes.CDLL(None, use_errno=True)
    rng = (ctypes.c_uint64 * 2)(0, 0)       # offset 0, length 0: the whole file
    st = (ctypes.c_uint64 * 5)()            # cache, dirty, writeback, evicted, recently evicted
    fd = os.open(image, os.O_RDONLY)
    try:
        if libc.syscall(451, fd, rng, st, 0) != 0:    # __NR_cachestat on x86_64
            pytest.skip("no cachestat(2): %s" % os.strerror(ctypes.get_errno()))
    finally:
        os.close(fd)
    return [n * os.sysconf("SC_PAGE_SIZE") for n in st[:3]]


def commit(m, path=None):
    """An fsync of the root directory (or of path): rrfuse commits all
    metadata (syncfs does not reach a /dev/fuse server: the kernel sends
    FUSE_SYNCFS only to virtiofs; `rrctl MNT sync` is the other way)."""
    fd = os.open(path or m.mnt, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
