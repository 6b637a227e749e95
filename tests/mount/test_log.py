"""A mount that succeeds prints nothing; what the daemon has to say goes to
the log (syslog, or -o log=FILE) and, in the foreground, to stderr.  And a
mount right after an unmount, or during one, succeeds (fstests generic/604).
"""

import os
import re
import subprocess
import threading
import time

import pytest

from conftest import RRFUSE, _mountinfo_entry, fsck, make_image, require_mount_backend

pytestmark = pytest.mark.rrfuse_only


@pytest.fixture
def setup():
    """(image, mnt): a fresh image and its mount point; whatever is left mounted is detached."""
    require_mount_backend()
    image = make_image(size="128M")
    mnt = os.path.join(os.path.dirname(image), "mnt")
    os.makedirs(mnt)
    yield image, mnt
    if _mountinfo_entry(mnt) is not None:
        subprocess.run(["fusermount3", "-uz", mnt], capture_output=True)
        time.sleep(0.5)


def run(*argv, **kw):
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=60, **kw)


def silent(r):
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == "" and r.stderr == "", (r.stdout, r.stderr)


def test_mount_and_unmount_print_nothing(setup):
    """Background mount (journal line, orphan cleanup), rrfuse -u, umount(8)-style."""
    image, mnt = setup
    silent(run(RRFUSE, image, mnt))
    with open(os.path.join(mnt, "f"), "w") as f:
        f.write("x")
    silent(run(RRFUSE, "-u", mnt))
    silent(run(RRFUSE, image, mnt, "-o", "mb_stats=1,commit=1"))
    silent(run(RRFUSE, "-u", mnt))
    rc, out = fsck(image)
    assert rc == 0, out


def test_log_file_gets_the_messages(setup):
    """-o log=FILE: timestamped lines with the daemon's pid, the journal's and mb_stats' among them."""
    image, mnt = setup
    log = os.path.join(os.path.dirname(image), "daemon.log")
    silent(run(RRFUSE, image, mnt, "-o", "log=%s,mb_stats=1" % log))
    with open(os.path.join(mnt, "f"), "w") as f:
        f.write("x" * 100000)
    silent(run(RRFUSE, "-u", mnt))
    text = open(log).read()
    line = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3} rrfuse\[\d+\]: "
    assert re.search(line + r"journal: commits are transactions", text), text
    assert re.search(line + r"mballoc:", text), text
    assert all(re.match(line, l) for l in text.splitlines()), text
    rc, out = fsck(image)
    assert rc == 0, out


def test_failing_background_mount_says_why(setup, tmp_path):
    """Errors still reach stderr before the daemon detaches; a log that cannot be opened is refused."""
    image, mnt = setup
    r = run(RRFUSE, image, mnt, "-o", "log=%s" % (tmp_path / "no" / "such" / "dir"))
    assert r.returncode == 1 and "log=" in r.stderr and "No such file" in r.stderr, r.stderr
    with open(image, "r+b") as f:
        f.seek(1024 + 56)
        f.write(b"\0\0")		# the superblock's magic
    r = run(RRFUSE, image, mnt)
    assert r.returncode == 1 and "bad superblock magic" in r.stderr, r.stderr
    assert _mountinfo_entry(mnt) is None


def test_foreground_keeps_stderr(setup):
    """-f: the messages on stderr, as before."""
    image, mnt = setup
    p = subprocess.Popen([RRFUSE, image, mnt, "-f"], stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(200):
            if _mountinfo_entry(mnt) is not None:
                break
            time.sleep(0.02)
        silent(run(RRFUSE, "-u", mnt))
        err = p.stderr.read()
        assert p.wait(30) == 0
    finally:
        if p.poll() is None:
            p.kill()
    assert "journal: commits are transactions" in err, err
    rc, out = fsck(image)
    assert rc == 0, out


def _write_files(mnt, n):
    for i in range(n):
        with open(os.path.join(mnt, str(i)), "wb") as f:
            f.write(b"y" * 4096)


@pytest.mark.parametrize("how", ["rrfuse -u", "umount"])
def test_mount_right_after_unmount(setup, how):
    """generic/604's sequence: files written, unmount, mount at once."""
    image, mnt = setup
    for _ in range(3):
        silent(run(RRFUSE, image, mnt))
        _write_files(mnt, 300)
        silent(run(RRFUSE, "-u", mnt) if how == "rrfuse -u" else run("umount", mnt))
    silent(run(RRFUSE, image, mnt))
    assert len(os.listdir(mnt)) == 301
    silent(run(RRFUSE, "-u", mnt))
    rc, out = fsck(image)
    assert rc == 0, out


def test_mount_during_unmount(setup):
    """Unmount in the background and mount at once: the new mount waits for the old to go."""
    image, mnt = setup
    for _ in range(3):
        silent(run(RRFUSE, image, mnt))
        _write_files(mnt, 300)
        res = {}
        t = threading.Thread(target=lambda: res.setdefault("u", run(RRFUSE, "-u", mnt)))
        t.start()
        r = run(RRFUSE, image, mnt)
        t.join()
        silent(res["u"])
        silent(r)
        assert len(os.listdir(mnt)) == 301
        silent(run(RRFUSE, "-u", mnt))
    rc, out = fsck(image)
    assert rc == 0, out
