"""rrbench fidelity on tiny sizes, two runs per system: the side-by-side
tables of two workloads, each figure filled for the kernel and for rrfuse,
every run ok (e2fsck-clean), the kernel's runs compared with each other as
rrfuse's is with the kernel's, the JSON beside it, nothing left behind.  The
OK/DIFF verdicts are not checked: they measure the allocator, not the
harness.  Needs root, /dev/fuse and loop devices."""
import importlib.machinery
import importlib.util
import json
import os
import re
import subprocess

import pytest

from conftest import REPO, mh

RRBENCH = os.path.join(REPO, "tools", "bench", "rrbench")
RRFUSE = os.environ.get("RRFUSE") or os.path.join(REPO, "build", "rrfuse")

FIGURES = ("extents per file, mean", "extents per file, p50", "extents per file, max",
           "largest file: extents", "largest file: median extent, KiB",
           "groups holding directory inodes", "groups holding file inodes", "groups touched",
           "CV of used blocks per group", "free extents", "largest free extent, MiB")
TEXT_ROWS = ("largest file (run 1)", "largest file's extents (run 1)",
             "directory inodes by group (run 1)", "file inodes by group (run 1)")


def test_fidelity_tiny(tmp_path):
    if os.geteuid() != 0 or not mh.loop_works():
        pytest.skip("needs root and loop devices")
    if not os.path.exists("/dev/fuse"):
        pytest.skip("needs /dev/fuse")
    build = os.path.dirname(os.path.abspath(RRFUSE))
    for tool in ("rrfuse", "rrmap", "rrctl"):
        if not os.access(os.path.join(build, tool), os.X_OK):
            pytest.skip("%s not built in %s" % (tool, build))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    js = tmp_path / "fidelity.json"
    loops_before = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    r = subprocess.run(["/usr/bin/python3", RRBENCH, "fidelity", "--tiny", "-n", "2",
                        "-w", "seed002,cycles", "--rrfuse", RRFUSE, "--json", str(js),
                        "--tmpdir", str(tmp)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    text = r.stdout
    m = re.search(r"Figures OK: (\d+), DIFF: (\d+)\.", text)
    assert m, text
    # The kernel on a direct-I/O loop device; one commit interval on both sides.
    head = re.search(r"Kernel: `([^`]*)`; rrfuse: `([^`]*)`", text)
    assert head and "losetup --direct-io=on" in head.group(1), text[:600]
    assert "commit=60" in head.group(1) and "commit=60" in head.group(2), head.groups()
    for wid in ("seed002", "cycles"):
        sec = text.split("## %s\n" % wid, 1)[1].split("\n## ", 1)[0]
        assert "| figure | kernel | rrfuse | verdict |" in sec, sec
        rows = {}
        for line in sec.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if line.startswith("| ") and len(cells) == 4 and cells[0] not in ("figure", "---"):
                rows[cells[0]] = cells[1:]
        want = FIGURES + (("groups ever allocated from",) if wid == "cycles" else ())
        for f in want:
            if wid == "cycles" and f.startswith("largest file:"):
                continue            # the cycles delete everything they write
            assert f in rows, (wid, f, sec)
            k, rr, verdict = rows[f]
            # median, or median [min..max] of the two runs
            cell = r"[\d.]+( \[[\d.]+\.\.[\d.]+\])?"
            assert re.fullmatch(cell, k) and re.fullmatch(cell, rr), (wid, f, rows[f])
            assert verdict in ("OK", "DIFF"), (wid, f, rows[f])
        assert any(f.startswith("free extents ") and "-" in f for f in rows), rows
        for t in TEXT_ROWS + (("groups ever allocated from (run 1)",) if wid == "cycles" else ()):
            assert t in rows and rows[t][2] == "", (wid, t, rows.get(t))
        if wid == "seed002":
            assert rows["largest file (run 1)"][:2] == ["/s/a", "/s/a"], rows
            # 64 x 128 KiB: the extent lengths add up to 8 MiB on both sides
            for side in rows["largest file's extents (run 1)"][:2]:
                total = 0
                for tok in side.split():
                    size, _, times = tok.partition("x")
                    kib = int(size[:-1]) * (1024 if size.endswith("M") else 1)
                    total += kib * int(times or 1)
                assert total == 8192, side
        else:
            ever = rows["groups ever allocated from (run 1)"]
            assert all(re.fullmatch(r"[\d -]+", x) for x in ever[:2]), ever
    d = json.loads(js.read_text())
    assert {(x["workload"], x["system"], x["status"]) for x in d["runs"]} == {
        (w, s, "ok") for w in ("seed002", "cycles") for s in ("kernel", "rrfuse")}
    assert set(d["summary"]) == {"seed002", "cycles"}
    # Request by request (tracefs): every data request of one side pairs with one of the
    # other's by (inode, logical block), and the kernel's trace replays without a failure.  How
    # many starts the replay reproduces is not asserted: the kernel's two writers contend for
    # a group's lock, and one that finds it held searches elsewhere (74-100 % for seed002 in
    # the runs tried, 2026-12-07); tests/tools/test_rrreplay.py checks one trace exactly.
    for wid, n in (("seed002", 128), ("cycles", 8)):
        p = d["summary"][wid]["pairing"][0]
        if "error" in p:
            assert "no trace" in p["error"], p
            continue
        # Every one of rrfuse's requests pairs; the kernel may ask once or twice more, when a
        # request found less than it asked for (on a fresh mount, group 0 before the others are
        # loaded: doc/evidence.md) and it asked again for the rest, which has no partner.
        assert p["rrfuse_requests"] == p["paired"] == n and p["unpaired_rrfuse"] == 0, p
        assert p["kernel_requests"] == n + p["unpaired_kernel"] <= n + 2, p
        # Who got each place may differ; the places chosen are counted as well.
        assert p["same_place_pct"] >= p["same_start_pct"], p
        assert "| same start as the kernel's |" in text, text[-2000:]
        for pol in ("regular", "rralloc"):
            assert p["replay"][pol]["failed"] == "0", p["replay"]
            # The replayed layout (rrreplay -m) against the kernel's image, figure by figure.
            same, of = map(int, p["replay"][pol]["layout_alike"].split("/"))
            assert 0 <= same <= of and of >= 5, p["replay"][pol]
        # The kernel's two runs against each other, paired the same way: one pair.
        ks = d["summary"][wid]["kernel_self"]
        assert ks["pairs"] == 1 and len(ks["same_start_pct"]) == 1, ks
        assert 0 <= ks["same_start_pct"][0] <= ks["same_place_pct"][0] <= 100, ks
        assert "The kernel's own runs against each other (1 pair(s)" in text, text[-2000:]
        # The summary's line for the workload: figures OK, then the request-by-request shares.
        row = re.search(r"^\| %s \| (\d+)/(\d+) \| ([^|]+) \| ([^|]+) \|" % wid, text, re.M)
        assert row and int(row.group(1)) <= int(row.group(2)), text[:3000]
        assert re.fullmatch(r"[\d.]+, [\d.]+ %", row.group(3).strip()), row.groups()
        assert row.group(4).strip() == "%.1f %%" % ks["same_start_pct"][0], row.groups()
    assert d["totals"]["OK"] + d["totals"]["DIFF"] == int(m.group(1)) + int(m.group(2))
    assert os.listdir(tmp) == []
    assert subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout == loops_before


def load_rrbench():
    loader = importlib.machinery.SourceFileLoader("rrbench_mod", RRBENCH)
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("rrbench_mod", loader))
    loader.exec_module(mod)
    return mod


def test_kernel_runs_against_each_other():
    """fid_kernel_self: a trace against itself places every request alike; two
    workloads' traces share no (inode, logical block) with the same answers, and
    a run whose two files' first requests are served the other way round (as
    concurrency does) loses its starts but not its places."""
    rb = load_rrbench()
    data = os.path.join(REPO, "tests", "tools", "data")
    seed = os.path.join(data, "kernel-seed002-tiny.trace")
    same = rb.fid_kernel_self([seed, seed, seed])
    assert same == {"pairs": 3, "same_start_pct": [100.0] * 3, "same_place_pct": [100.0] * 3}
    # The two streams' inodes swapped: each file takes the places the other took.
    lines = open(seed).read()
    swapped = lines.replace("ino 13 ", "ino @ ").replace("ino 14 ", "ino 13 ").replace("ino @ ", "ino 14 ")
    swapped = swapped.replace("inode 13 ", "inode @ ").replace("inode 14 ", "inode 13 ").replace("inode @ ", "inode 14 ")
    assert swapped != lines
    other = os.path.join(os.environ.get("TMPDIR", "/tmp"), "kself-%d.trace" % os.getpid())
    with open(other, "w") as f:
        f.write(swapped)
    try:
        res = rb.fid_kernel_self([seed, other])
    finally:
        os.unlink(other)
    assert res["pairs"] == 1, res
    assert res["same_place_pct"] == [100.0], res
    assert res["same_start_pct"][0] < 100.0, res
