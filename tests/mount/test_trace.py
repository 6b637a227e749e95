"""-o trace=FILE: every device transfer, flush and discard as fio's iolog
version 3, and what each was (d file data, m metadata, - neither) in
FILE.kinds; fio --read_iolog replays it."""
import json
import os
import shutil
import subprocess

import pytest

from conftest import RRFUSE, Mount, fsck, leaf_extents, make_image, pattern

pytestmark = pytest.mark.rrfuse_only

IO_OPS = ("read", "write", "trim")


def parse(trace, image):
    lines = open(trace).read().splitlines()
    kinds = open(trace + ".kinds").read().splitlines()
    dev = os.path.realpath(image)
    assert lines[0] == "fio version 3 iolog"
    assert lines[1] == "0 %s add" % dev
    recs, last = [], 0
    for ln in lines[2:]:
        f = ln.split()
        t = int(f[0])
        assert t >= last, ln
        last = t
        assert f[1] == dev, ln
        recs.append((f[2], int(f[3]) if len(f) > 3 else 0, int(f[4]) if len(f) > 4 else 0))
    assert len(kinds) == len(recs)
    assert recs[0][0] == "open" and recs[-1][0] == "close"
    return [(op, off, ln, k) for (op, off, ln), k in zip(recs, kinds)]


def test_trace_records_data_and_metadata(tmp_path):
    image = make_image(size="128M")
    trace = str(tmp_path / "t.log")
    m = Mount(image, opts="trace=" + trace)
    m.mount()
    try:
        data = pattern(7, 3 << 20)
        with open(m.path("f"), "wb") as f:
            f.write(data)
            os.fsync(f.fileno())
        os.mkdir(m.path("d"))
        m.unmount()
    finally:
        m.cleanup()
    size = os.path.getsize(image)
    recs = parse(trace, image)
    for op, off, ln, kind in recs:
        if op in IO_OPS:
            assert ln > 0 and off + ln <= size, (op, off, ln)
            assert kind in ("d", "m") if op != "trim" else kind == "-"
        else:
            assert kind == "-", (op, kind)
    assert any(op == "sync" for op, *_ in recs)
    # The superblock's primary copy was written.
    assert any(op == "write" and k == "m" and off < 2048 and off + ln > 1024
               for op, off, ln, k in recs)
    # Every block of the file was written as file data, and nothing else was.
    written = set()
    for op, off, ln, k in recs:
        if op == "write" and k == "d":
            written.update(range(off // 4096, (off + ln + 4095) // 4096))
    want = set()
    for _, pblk, n in leaf_extents(image, "f"):
        want.update(range(pblk, pblk + n))
    assert len(want) == 768, leaf_extents(image, "f")
    assert want <= written
    assert sum(ln for op, _, ln, k in recs if op == "write" and k == "d") >= len(data)
    rc, out = fsck(image)
    assert rc == 0, out


def test_fio_replays_the_trace(tmp_path):
    if shutil.which("fio") is None:
        pytest.skip("needs fio (apt-get install fio)")
    image = make_image(size="64M")
    trace = str(tmp_path / "t.log")
    m = Mount(image, opts="trace=" + trace)
    m.mount()
    try:
        with open(m.path("f"), "wb") as f:
            f.write(pattern(3, 1 << 20))
        m.unmount()
    finally:
        m.cleanup()
    recs = parse(trace, image)
    target = str(tmp_path / "replay.img")
    subprocess.run(["truncate", "-s", "64M", target], check=True)
    r = subprocess.run(["fio", "--name=replay", "--read_iolog=" + trace, "--replay_redirect=" + target,
                        "--ioengine=psync", "--replay_no_stall=1", "--output-format=json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "bad iolog" not in r.stdout + r.stderr, r.stderr   # fio skips lines it cannot read
    job = json.loads(r.stdout[r.stdout.index("{"):])["jobs"][0]
    assert job["write"]["io_bytes"] == sum(ln for op, _, ln, _ in recs if op == "write")
    assert job["read"]["io_bytes"] == sum(ln for op, _, ln, _ in recs if op == "read")


def test_trace_to_an_unwritable_path_is_refused(tmp_path):
    image = make_image(size="64M")
    before = open(image, "rb").read()
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run([RRFUSE, image, str(mnt), "-f", "-o", "trace=/nonexistent/dir/t.log"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "trace=/nonexistent/dir/t.log" in r.stderr and "No such file" in r.stderr, r.stderr
    assert open(image, "rb").read() == before


def test_rrftl_reads_rrfuse_traces(tmp_path):
    """The flash model takes rrfuse's traces as they are (issue 17's pipeline):
    every page rrfuse wrote is a host page write to it."""
    rrftl = os.path.join(os.path.dirname(RRFUSE), "rrftl")
    if not os.path.exists(rrftl):
        pytest.skip("no rrftl next to %s" % RRFUSE)
    image = make_image(size="64M")
    trace = str(tmp_path / "t.log")
    m = Mount(image, opts="trace=" + trace)
    m.mount()
    try:
        with open(m.path("f"), "wb") as f:
            f.write(pattern(5, 2 << 20))
        m.unmount()
    finally:
        m.cleanup()
    recs = parse(trace, image)
    pages = sum((off + ln + 4095) // 4096 - off // 4096 for op, off, ln, _ in recs if op == "write")
    r = subprocess.run([rrftl, trace, "--capacity", "64M", "--op", "7", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["host_writes"] == pages
    assert out["syncs"] == sum(1 for op, *_ in recs if op == "sync")
