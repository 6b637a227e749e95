"""rrreplay on a trace of the kernel's own: data/kernel-seed002-tiny.trace is
tracefs's text of ext4's allocation events for `rrbench fidelity --tiny`'s
seed002 workload (two concurrent O_DIRECT dd streams) on Linux 6.18, on a
fresh `mke2fs -t ext4 -b 4096` 256 MiB image, which mke2fs makes again here
with the same free blocks.  Replayed with regular it is the kernel's
placement request for request; rralloc and a plug-in policy built from
examples/policy-halves replay it too, and the image is only read.
data/kernel-cycles.trace is `rrbench fidelity -w cycles`'s at full size (a
4 GiB image; 15 rounds of four 32 MiB files written, fsync'd and deleted).
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import HERE, REPO, need, run

sys.path.insert(0, os.path.join(REPO, "tools", "bench"))
import ext4trace  # noqa: E402

RRREPLAY = os.environ.get("RRREPLAY") or os.path.join(
    os.path.dirname(os.environ.get("RRFUSE") or os.path.join(REPO, "build", "rrfuse")), "rrreplay")
TRACE = os.path.join(HERE, "data", "kernel-seed002-tiny.trace")


@pytest.fixture
def image(tmp_path):
    path = str(tmp_path / "start.img")
    run(["truncate", "-s", "256M", path])
    run(["mke2fs", "-q", "-t", "ext4", "-b", "4096", "-F", path])
    return path


def replay(*args):
    need(RRREPLAY)
    out = run([RRREPLAY] + list(args)).stdout
    return {l.split()[0]: l.split()[1] for l in out.splitlines()}


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_regular_replays_the_kernels_placements(image, tmp_path):
    before = digest(image)
    recs = ext4trace.parse(TRACE, strict=True)
    nreq = sum(r["event"] == "ext4_request_blocks" for r in recs)
    out = replay("-t", str(tmp_path / "regular.trace"), TRACE, image)
    assert out["policy"] == "regular" and int(out["requests"]) == nreq == 129, out
    assert int(out["failed"]) == 0 and out["answered"] == out["requests"], out
    # Measured 129 of 129 (2026-12-07): the policy is the kernel's, given the kernel's order.
    assert out["same_start"] == out["answered"], out
    assert float(out["requests_per_second"]) > 0, out
    # The replay's own trace reads with the one parser and pairs with the kernel's, all alike.
    res = ext4trace.compare(recs, ext4trace.parse(str(tmp_path / "regular.trace"), strict=True))
    assert res["paired"] == res["kernel_requests"] == 128 and res["same_start_pct"] == 100.0, res
    assert digest(image) == before


def test_rralloc_replays(image):
    out = replay("-o", "allocator=rralloc", TRACE, image)
    assert out["policy"] == "rralloc" and out["requests"] == "129" and out["failed"] == "0", out


def test_plugin_policy_replays(image, tmp_path):
    """A .so built outside rrfuse, against the installed header only, as its Makefile does."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("needs a C compiler")
    # A short path: the allocator's name holds at most 63 bytes.
    short = tempfile.mkdtemp(prefix="rrp", dir="/tmp")
    so = os.path.join(short, "halves.so")
    run([cc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-I", os.path.join(REPO, "include"),
         "-o", so, os.path.join(REPO, "examples", "policy-halves", "halves.c")])
    out = replay("-o", "allocator=" + so, "-t", str(tmp_path / "halves.trace"), TRACE, image)
    assert out["policy"] == so and out["requests"] == "129" and out["failed"] == "0", out
    # halves: streams (these two files) in the upper half of the device.
    got = ext4trace.data_requests(ext4trace.parse(str(tmp_path / "halves.trace"), strict=True))
    assert len(got) >= 128 and all(e["placed"]["group"] == 1 for e in got), got[:2]
    shutil.rmtree(short)
    rc = subprocess.run(["e2fsck", "-fn", image], capture_output=True).returncode
    assert rc == 0


def test_regular_replays_the_kernels_write_delete_cycles(tmp_path):
    """240 requests of 2048 blocks, all at the kernel's start.  Two things a
    trace line does not say are taken from the kernel's answers: the file's
    size, which sets its window (its normalised goal: 8 MiB from a full
    file's first request, where the blocks seen so far would give 4 MiB),
    and that a stream's goal hit moves its slot's group as a search does
    (ext4_mb_use_best_found): the second round's second file goes to
    group 2 after its slot's last, not to the free chunk in group 1
    (30 % of starts before either)."""
    img = str(tmp_path / "start.img")
    run(["truncate", "-s", "4G", img])
    run(["mke2fs", "-q", "-t", "ext4", "-b", "4096", "-F", img])
    trace = os.path.join(HERE, "data", "kernel-cycles.trace")
    out = replay("-t", str(tmp_path / "regular.trace"), trace, img)
    assert out["requests"] == "240" and out["failed"] == "0", out
    assert out["same_start"] == out["answered"] == "240", out
    res = ext4trace.compare(ext4trace.parse(trace, strict=True),
                            ext4trace.parse(str(tmp_path / "regular.trace"), strict=True))
    assert res["paired"] == 240 and res["same_start_pct"] == 100.0, res
