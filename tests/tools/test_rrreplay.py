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
import json
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


def commit_trace(path, between):
    """File 12 gets 256 blocks and is deleted; file 13 then asks 256 blocks at the
    same goal.  between: the jbd2 lines that come between the delete and 13's request."""
    head = "          rrbench-100     [000] ..... %.6f: "
    lines, ts = [], [100.0]

    def line(text):
        ts[0] += 0.001
        lines.append(head % ts[0] + text)

    def file(ino):
        line("ext4_request_blocks: dev 7,0 ino %d flags HINT_DATA len 256 lblk 0 goal 65536 "
             "lleft 0 lright 0 pleft 0 pright 0" % ino)
        line("ext4_mballoc_alloc: dev 7,0 inode %d orig 2/0/256@0 goal 2/0/256@0 result 2/0/256@0 "
             "blks 1 grps 1 cr CR_GOAL_LEN_FAST flags HINT_DATA|HINT_NOPREALLOC tail 0 broken 0" % ino)

    line("jbd2_start_commit: dev 7,0 transaction 1 sync 0")
    line("jbd2_end_commit: dev 7,0 transaction 1 sync 0 head 1")
    file(12)
    line("ext4_free_blocks: dev 7,0 ino 12 mode 0100644 block 65536 count 256 flags VALIDATED")
    for l in between:
        line(l)
    file(13)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def test_frees_wait_for_their_commit(image, tmp_path):
    """A block freed is free again when its transaction's commit ends (jbd2's
    lines in the trace): before, a second file cannot have the first's blocks;
    after, it can.  Without commit lines a free is free at once."""
    start = "jbd2_start_commit: dev 7,0 transaction 2 sync 0"
    end = "jbd2_end_commit: dev 7,0 transaction 2 sync 0 head 1"
    places = {}
    for name, between in (("none", []), ("running", [start]), ("committed", [start, end])):
        trace, out = str(tmp_path / (name + ".trace")), str(tmp_path / (name + ".out"))
        commit_trace(trace, between)
        if name == "none":      # no jbd2 lines anywhere: as before, frees at once
            with open(trace) as f:
                kept = [l for l in f if "jbd2_" not in l]
            with open(trace, "w") as f:
                f.writelines(kept)
        fig = replay("-t", out, trace, image)
        assert fig["failed"] == "0" and fig["requests"] == "2", fig
        assert fig["frees_wait_for_commits"] == ("no" if name == "none" else "yes"), fig
        got = ext4trace.data_requests(ext4trace.parse(out, strict=True))
        places[name] = [(e["placed"]["group"], e["placed"]["start"]) for e in got]
        # The replay's own trace carries the commits it replayed, and replays onto itself.
        with open(out) as f:
            text = f.read()
        assert text.count(": jbd2_end_commit: ") == len([l for l in between if "end_commit" in l]) + \
            (0 if name == "none" else 1), text
        again = replay(out, image)
        assert again["same_start"] == again["answered"] == "2", again
    assert places["none"][1] == places["none"][0], places
    assert places["running"][1] != places["running"][0], places
    assert places["committed"][1] == places["committed"][0], places


def test_a_deleted_files_inode_comes_back_empty(image, tmp_path):
    """An inode number freed by a delete and given to a new file: the new file's
    first request is a small file's (a locality group's), not the old file's
    stream, as the kernel's i_size says (the aging workload's replays: 52 % of
    starts before, 100 % after, with the commits above)."""
    head = "          rrbench-100     [000] ..... %.6f: "
    lines = []
    for k, text in enumerate([
            "ext4_request_blocks: dev 7,0 ino 12 flags HINT_DATA len 600 lblk 0 goal 65536 "
            "lleft 0 lright 0 pleft 0 pright 0",
            "ext4_mballoc_alloc: dev 7,0 inode 12 orig 2/0/600@0 goal 2/0/1024@0 result 2/0/1024@0 "
            "blks 1 grps 1 cr CR_POWER2_ALIGNED flags HINT_DATA|STREAM_ALLOC tail 0 broken 0",
            "ext4_discard_preallocations: dev 7,0 ino 12 len: 424",
            "ext4_free_blocks: dev 7,0 ino 12 mode 0100644 block 65536 count 600 flags VALIDATED",
            "ext4_request_blocks: dev 7,0 ino 12 flags HINT_DATA len 4 lblk 0 goal 65536 "
            "lleft 0 lright 0 pleft 0 pright 0",
            "ext4_mballoc_alloc: dev 7,0 inode 12 orig 2/0/4@0 goal 2/0/512@0 result 2/600/512@0 "
            "blks 1 grps 1 cr CR_GOAL_LEN_FAST flags HINT_DATA|HINT_GRP_ALLOC tail 0 broken 0"]):
        lines.append(head % (100 + k / 1000.0) + text)
    trace, out = str(tmp_path / "reuse.trace"), str(tmp_path / "reuse.out")
    with open(trace, "w") as f:
        f.write("\n".join(lines) + "\n")
    fig = replay("-t", out, trace, image)
    assert fig["failed"] == "0" and fig["requests"] == "2", fig
    answers = [r for r in ext4trace.parse(out, strict=True) if r["event"] == "ext4_mballoc_alloc"]
    assert len(answers) == 2, answers
    assert "STREAM_ALLOC" in answers[0]["flagset"], answers[0]
    assert "STREAM_ALLOC" not in answers[1]["flagset"] and "HINT_GRP_ALLOC" in answers[1]["flagset"], answers[1]


def test_replayed_layout_as_rrmap_prints_it(image, tmp_path):
    """-m writes the layout the replay leaves in rrmap's JSON: the two files, their
    extents as the kernel's answers lay them (the replay agrees with every start),
    the free space of the image less those blocks."""
    layout = tmp_path / "layout.json"
    out = replay("-m", str(layout), TRACE, image)
    assert out["same_start"] == out["answered"], out
    m = json.loads(layout.read_text())
    assert m["files"] == 2 and m["label"] == "rrreplay", m
    # The files' extents from the kernel's own answers: runs contiguous in logical and physical order.
    recs = ext4trace.parse(TRACE, strict=True)
    geom_first = m["blocks_per_group"]
    runs = {}
    for e in ext4trace.data_requests(recs):
        p = e["placed"]
        runs.setdefault(e["req"]["ino"], []).append(
            (p["lblk"], p["group"] * geom_first + p["start"], p["len"]))
    counts, used = [], 0
    for ino, ex in runs.items():
        ex.sort()
        n = 1
        for (l0, p0, n0), (l1, p1, _) in zip(ex, ex[1:]):
            n += not (l1 == l0 + n0 and p1 == p0 + n0)
        counts.append(n)
        used += sum(x[2] for x in ex)
    assert m["extents_per_file"]["max"] == max(counts) and m["extents_per_file"]["mean"] == sum(counts) / 2, \
        (m["extents_per_file"], counts)
    # Free space: the starting image's, less the files' blocks (and the trace's metadata blocks).
    free_before = int(run(["dumpe2fs", "-h", image]).stdout.split("Free blocks:")[1].split()[0])
    assert m["free_blocks"] <= free_before - used, (m["free_blocks"], free_before, used)
    assert m["free_blocks"] >= free_before - used - 16, (m["free_blocks"], free_before, used)
    assert sum(h["blocks"] for h in m["free_histogram"]) == m["free_blocks"], m["free_histogram"]
    assert m["groups_touched"] >= 1 and len(m["group_table"]) == m["groups"], m["groups_touched"]
