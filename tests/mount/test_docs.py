"""The documentation keeps up with the program: every option `rrfuse --help`
lists is described in the manual page, which installs with meson, and both
manual pages render (rrctl's keys are checked in test_rrctl.py)."""
import os
import re
import subprocess

import pytest

from conftest import RRFUSE, REPO, require_binary

MAN = os.path.join(REPO, "doc", "rrfuse.8")


def help_options():
    require_binary()
    out = subprocess.run([RRFUSE, "--help"], capture_output=True, text=True).stdout
    own = out.split("FUSE options:")[0]
    names = set(re.findall(r"-o ([a-z_0-9]+)", own))
    assert names, out
    return names


def test_every_option_in_the_manual():
    # Options are set in bold (.B, .BI, .BR lines) where they are described.
    with open(MAN) as f:
        bold = "\n".join(l.replace("\\-", "-") for l in f if l.startswith(".B"))
    missing = sorted(n for n in help_options() if not re.search(r"\b%s\b" % re.escape(n), bold))
    assert not missing, "options in --help but not in doc/rrfuse.8: %s" % missing


@pytest.mark.parametrize("page", ["rrfuse.8", "rrctl.8"])
def test_manual_renders(page):
    if subprocess.run(["which", "man"], capture_output=True).returncode:
        pytest.skip("needs man (man-db)")
    r = subprocess.run(["man", "-l", "--warnings", os.path.join(REPO, "doc", page)],
                       capture_output=True, text=True,
                       env=dict(os.environ, MANWIDTH="80", MANPAGER="cat"))
    assert r.returncode == 0 and page.split(".")[0] in r.stdout, r.stderr
    assert "warning" not in r.stderr, r.stderr


def test_quickstart_example_options():
    # README: tools/quickstart.sh mounts with the project's example options
    # and says how to see what the allocator does.
    import conftest
    conftest.require_mount_backend()
    if conftest.KERNEL:
        pytest.skip("rrfuse specific (RRFUSE_TEST_KERNEL=1)")
    deps = subprocess.run(["bash", "-c", ". tools/deps.sh; for p in $RR_BUILD_DEPS; do "
                           "dpkg-query -W -f='${Status}' $p 2>/dev/null | grep -q 'ok installed' "
                           "|| echo $p; done"], cwd=REPO, capture_output=True, text=True)
    if deps.returncode or deps.stdout.strip():
        pytest.skip("quickstart would install packages: %s" % deps.stdout.split())
    d = conftest._new_workdir()
    img, mnt = os.path.join(d, "qs.img"), os.path.join(d, "mnt")
    r = subprocess.run([os.path.join(REPO, "tools", "quickstart.sh"), img, mnt],
                       capture_output=True, text=True, timeout=300)
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        rrctl = os.path.join(REPO, "build", "rrctl")
        got = subprocess.run([rrctl, mnt, "allocator", "max_prealloc_kb"], capture_output=True,
                             text=True)
        assert got.stdout == "allocator = rralloc\nmax_prealloc_kb = 32768\n", got
        assert "rrctl %s -s" % mnt in r.stdout and "mb_stats=1" in r.stdout, r.stdout
    finally:
        if conftest._mountinfo_entry(mnt) is not None:
            # As quickstart says: returns once the image is complete.
            subprocess.run([os.path.join(REPO, "build", "rrfuse"), "-u", mnt], check=True)
    rc, out = conftest.fsck(img)
    assert rc == 0, out
