"""Multi-mount protection (mke2fs -O mmp): while rrfuse has the image
read-write, the kernel (or e2fsck, or another node) finds it taken; while the
kernel has it, rrfuse refuses it; a refused mount leaves the MMP block alone.
Each MMP mount watches the block for twice its check interval (about 11 s),
as the kernel's does."""
import os
import subprocess

import pytest

import conftest
from conftest import (RRFUSE, Mount, fsck, loop_works, make_image,
                      require_mount_backend)

pytestmark = pytest.mark.rrfuse_only


def mmp_seq(image):
    out = subprocess.run(["debugfs", "-R", "dump_mmp", image], capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        if line.strip().startswith("sequence:"):
            return int(line.split(":")[1], 16)
    raise AssertionError("no MMP block: " + out)


@pytest.fixture
def mmp_image(request):
    require_mount_backend()
    if not loop_works():
        pytest.skip("needs root and loop devices (the kernel is the other node)")
    image = make_image(size="128M", mkfs_args=getattr(request, "param", ["-O", "mmp"]))
    d = os.path.dirname(image)
    dev = subprocess.run(["losetup", "-f", "--show", image], check=True, capture_output=True,
                         text=True).stdout.strip()
    kmnt = os.path.join(d, "kmnt")
    os.mkdir(kmnt)
    try:
        yield image, dev, kmnt
    finally:
        subprocess.run(["umount", kmnt], capture_output=True)
        subprocess.run(["losetup", "-d", dev])
        if not conftest.KEEP:
            conftest._rm_workdir(d)


def test_rrfuse_holds_the_image(mmp_image):
    image, dev, kmnt = mmp_image
    clean = mmp_seq(image)
    m = Mount(image)
    m.mount()
    try:
        with open(m.path("f"), "w") as f:
            f.write("mine\n")
        assert mmp_seq(image) != clean
        r = subprocess.run(["mount", "-t", "ext4", dev, kmnt], capture_output=True, text=True)
        assert r.returncode != 0, "the kernel mounted an image rrfuse holds"
        m.unmount()
    finally:
        m.cleanup()
    assert mmp_seq(image) == clean
    rc, out = fsck(image)
    assert rc == 0, out
    subprocess.run(["mount", "-t", "ext4", dev, kmnt], check=True)
    with open(os.path.join(kmnt, "f")) as f:
        assert f.read() == "mine\n"


@pytest.mark.parametrize("mmp_image", [["-O", "mmp,^has_journal"]], indirect=True)
def test_kernel_holds_the_image(mmp_image):
    image, dev, kmnt = mmp_image
    subprocess.run(["mount", "-t", "ext4", dev, kmnt], check=True)
    with open(os.path.join(kmnt, "k"), "w") as f:
        f.write("kernel's\n")
    mnt = os.path.join(os.path.dirname(image), "mnt")
    os.makedirs(mnt, exist_ok=True)
    r = subprocess.run([RRFUSE, image, mnt, "-f"], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "multi-mount protection" in r.stderr, r.stderr
    subprocess.run(["umount", kmnt], check=True)
    rc, out = fsck(image)
    assert rc == 0, out


def test_refusal_leaves_mmp_alone(mmp_image):
    image, dev, kmnt = mmp_image
    # An ro_compat feature rrfuse cannot write is fine; an unknown incompat one is refused.
    subprocess.run(["debugfs", "-w", "-R", "feature inline_data", image], check=True,
                   capture_output=True)
    with open(image, "rb") as f:
        before = f.read()
    mnt = os.path.join(os.path.dirname(image), "mnt")
    os.makedirs(mnt, exist_ok=True)
    r = subprocess.run([RRFUSE, image, mnt, "-f"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "inline_data" in r.stderr, r.stderr
    with open(image, "rb") as f:
        assert f.read() == before
