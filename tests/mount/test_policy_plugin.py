"""Policies built outside rrfuse (include/rrfuse/policy.h, allocators/mb_plugin.c).

The example policy (examples/policy-halves) is built as an author would:
against the header and rrfuse-policy.pc that `meson install` installed (into
a temporary DESTDIR), with its own Makefile and pkg-config.  Mounted with
it, small files land in the device's lower half and a large one in the
upper half (rrmap --file shows where); rrctl switches to it and back live;
a copy built for another ABI version, or one no policy symbol, is refused
at mount and live with the running policy unchanged; as root, a file that
root does not own is not loaded.
"""

import glob
import os
import pathlib
import re
import shutil
import subprocess
import tempfile

import pytest

from conftest import RRCTL, RRFUSE, REPO, make_image, pattern

pytestmark = pytest.mark.rrfuse_only

RRMAP = os.path.join(os.path.dirname(RRFUSE), "rrmap")
BUILD = os.path.dirname(RRFUSE)
BLOCKS = 65536                  # the 256 MiB test image, 4 KiB blocks


@pytest.fixture(scope="module")
def policies():
    """{name: path of a built .so}: halves, and halves built for ABI 2 and with no symbol.
    Short paths: rrctl's values are at most 63 bytes."""
    if shutil.which("make") is None or shutil.which("pkg-config") is None:
        pytest.skip("needs make and pkg-config")
    d = pathlib.Path(tempfile.mkdtemp(prefix="rrp", dir="/tmp"))
    dest = d / "dest"
    r = subprocess.run(["meson", "install", "-C", BUILD, "--destdir", str(dest), "--no-rebuild",
                        "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    pcs = glob.glob(str(dest / "**" / "rrfuse-policy.pc"), recursive=True)
    assert pcs, "meson install put no rrfuse-policy.pc in %s" % dest
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.dirname(pcs[0]), PKG_CONFIG_SYSROOT_DIR=str(dest))
    out = {}
    for name, edit in (("halves", None),
                       ("abi2", (".abi = RRP_ABI_VERSION,", ".abi = RRP_ABI_VERSION + 1,")),
                       ("nosym", ("const struct rrp_policy rrfuse_policy", "const struct rrp_policy other"))):
        src = d / name
        src.mkdir()
        for f in ("halves.c", "Makefile"):
            shutil.copy(os.path.join(REPO, "examples", "policy-halves", f), src / f)
        if edit:
            text = (src / "halves.c").read_text()
            assert edit[0] in text
            (src / "halves.c").write_text(text.replace(edit[0], edit[1]))
        r = subprocess.run(["make", "-C", str(src)], env=env, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        # The header came from the install, not the source tree.
        assert "-I%s" % (dest / "usr") in r.stdout or str(dest) in r.stdout, r.stdout
        os.chmod(src, 0o755)
        out[name] = str(src / "halves.so")
    os.chmod(d, 0o755)
    yield out
    shutil.rmtree(d)


def rrctl(*args, check=True):
    return subprocess.run([RRCTL] + list(args), capture_output=True, text=True, check=check)


def start_of(image, name):
    """First physical block of /name, from rrmap --file (filefrag -v's format)."""
    out = subprocess.run([RRMAP, image, "--file", "/" + name], capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r"^\s+0:\s+\d+\.\.\s*\d+:\s+(\d+)\.\.", out, re.M)
    assert m, out
    return int(m.group(1))


def write_mix(mnt, tag):
    for i in range(10):
        with open(os.path.join(mnt, "%s-small%d" % (tag, i)), "wb") as f:
            f.write(pattern((tag, i), 6000))
    with open(os.path.join(mnt, "%s-big" % tag), "wb") as f:
        for i in range(8):
            f.write(pattern((tag, "big", i), 1 << 20))
    # Written back now, under the policy of the moment: held data meets the allocator at a sync.
    subprocess.run([RRCTL, mnt, "sync"], check=True)


def assert_halves(image, tag):
    for i in range(10):
        assert start_of(image, "%s-small%d" % (tag, i)) < BLOCKS // 2
    assert start_of(image, "%s-big" % tag) >= BLOCKS // 2


def test_example_policy_at_mount(policies, mount_factory):
    d = os.path.dirname(policies["halves"])
    m = mount_factory(opts="allocator=halves,policy_dir=" + d)
    assert rrctl(m.mnt, "allocator").stdout.strip() == "allocator = halves"
    write_mix(m.mnt, "a")
    m.unmount()
    assert_halves(m.image, "a")
    assert "allocator 'halves' loaded from %s" % policies["halves"] in m.daemon_log
    m.mount()


def test_example_policy_live_and_back(policies, mount_factory):
    """firstfit, halves, firstfit again: only the big file written under halves is high."""
    m = mount_factory(opts="allocator=firstfit")
    write_mix(m.mnt, "r")
    rrctl(m.mnt, "allocator=" + policies["halves"])
    write_mix(m.mnt, "h")
    rrctl(m.mnt, "allocator=firstfit")
    assert rrctl(m.mnt, "allocator").stdout.strip() == "allocator = firstfit"
    write_mix(m.mnt, "b")
    m.unmount()
    assert_halves(m.image, "h")
    assert start_of(m.image, "r-big") < BLOCKS // 2
    assert start_of(m.image, "b-big") < BLOCKS // 2
    m.mount()


@pytest.mark.parametrize("which,why", [("abi2", "built for policy ABI 2, rrfuse has 1"),
                                       ("nosym", "exports no rrfuse_policy")])
def test_bad_policy_refused_at_mount(policies, which, why, tmp_path):
    image = make_image(size="64M")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run([RRFUSE, image, str(mnt), "-o", "allocator=" + policies[which]],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert why in r.stdout + r.stderr, r.stdout + r.stderr
    assert not os.path.ismount(mnt)
    subprocess.run(["rm", "-rf", os.path.dirname(image)])


@pytest.mark.parametrize("which,why", [("abi2", "built for policy ABI 2, rrfuse has 1"),
                                       ("nosym", "exports no rrfuse_policy")])
def test_bad_policy_refused_live(policies, which, why, mount_factory):
    m = mount_factory(opts="allocator=firstfit")
    r = rrctl(m.mnt, "allocator=" + policies[which], check=False)
    assert r.returncode != 0 and why in r.stderr, r.stdout + r.stderr
    assert rrctl(m.mnt, "allocator").stdout.strip() == "allocator = firstfit"
    r = rrctl(m.mnt, "allocator=nonesuch", check=False)
    assert r.returncode != 0 and "unknown allocator 'nonesuch'" in r.stderr, r.stderr
    assert rrctl(m.mnt, "allocator").stdout.strip() == "allocator = firstfit"


def test_not_root_owned_refused(policies, mount_factory):
    if os.geteuid() != 0:
        pytest.skip("the ownership rule applies when rrfuse runs as root")
    so = pathlib.Path(os.path.dirname(os.path.dirname(policies["halves"]))) / "theirs.so"
    shutil.copy(policies["halves"], so)
    os.chown(so, 65534, 65534)
    m = mount_factory()
    r = rrctl(m.mnt, "allocator=" + str(so), check=False)
    assert r.returncode != 0 and "not owned by root" in r.stderr, r.stderr
    os.chown(so, 0, 0)
    os.chmod(so, 0o666)
    r = rrctl(m.mnt, "allocator=" + str(so), check=False)
    assert r.returncode != 0 and "writable by group or others" in r.stderr, r.stderr
    assert rrctl(m.mnt, "allocator").stdout.strip() == "allocator = regular"
