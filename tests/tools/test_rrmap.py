"""rrmap against the e2fsprogs tools, on images mke2fs made and rrfuse or
debugfs wrote: every figure they share must agree.

- free space: e2freefrag's free-extent count, histogram (extents and blocks
  per bucket) and free blocks; per group, dumpe2fs's "Free blocks:" ranges
  (rrmap's used blocks, free extents and largest free extent per group);
- files: debugfs "ex" (leaf extents of each file), debugfs "stat" (every
  block of every file, directory and symlink, tree and xattr blocks
  included: rrmap's data blocks per group and so the groups touched);
- --file: filefrag -v on a kernel loop mount (needs root and loop devices;
  skipped with the reason otherwise).
"""

import os
import re
import resource
import shutil
import struct
import subprocess
import time

import pytest

from conftest import RRMAP, mh, need, run, rrmap_json

BLOCK = 4096
GROUP_BLOCKS = 8192          # -g 8192: 32 MiB groups, many groups in a small image


# ---------------------------------------------------------------- e2fsprogs

def e2freefrag(image):
    out = run(["e2freefrag", image]).stdout
    hist = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\d+)([KMGTPE])\.\.\.\s*(\d+)([KMGTPE])-\s*:\s*(\d+)\s+(\d+)\s+[\d.]+%", line)
        if m:
            unit = 1 << (10 * (1 + "KMGTPE".index(m.group(2))))
            hist[int(m.group(1)) * unit] = (int(m.group(5)), int(m.group(6)))
    n = int(re.search(r"Num\. free extent: (\d+)", out).group(1))
    free = int(re.search(r"Free blocks: (\d+)", out).group(1))
    return n, free, hist


def dumpe2fs_groups(image):
    """[(first, last, [(a, b) free ranges])] per group."""
    out = run(["dumpe2fs", image]).stdout
    groups = []
    for line in out.splitlines():
        m = re.match(r"Group (\d+): \(Blocks (\d+)-(\d+)\)", line)
        if m:
            groups.append((int(m.group(2)), int(m.group(3)), []))
            continue
        m = re.match(r"\s+Free blocks: (.*)$", line)
        if m and groups:
            for r in filter(None, (x.strip() for x in m.group(1).split(","))):
                a, _, b = r.partition("-")
                groups[-1][2].append((int(a), int(b or a)))
    return groups


def debugfs_tree(image):
    """{path: (ino, mode)} of every entry under /, through debugfs ls -p."""
    found = {}
    todo = ["/"]
    while todo:
        d = todo.pop()
        for line in mh.debugfs(image, "ls -p %s" % d).splitlines():
            f = line.split("/")
            if len(f) < 7 or f[5] in (".", ".."):
                continue
            p = d.rstrip("/") + "/" + f[5]
            ino, mode = int(f[1]), int(f[2], 8)
            found[p] = (ino, mode)
            if mode & 0o170000 == 0o040000:
                todo.append(p)
    return found


def debugfs_blocks(image, ino, bs):
    """Every block inode ino owns, from debugfs stat: its EXTENTS/BLOCKS list
    (tree blocks (ETB), indirect blocks included) and its xattr block."""
    out = mh.debugfs(image, "stat <%d>" % ino)
    blocks = []
    m = re.search(r"File ACL: (\d+)", out)
    if m and int(m.group(1)):
        blocks.append((int(m.group(1)), 1))
    m = re.search(r"^(EXTENTS|BLOCKS):\n(.*)", out, re.M | re.S)
    if m:
        for item in re.findall(r"\(([^)]*)\):(\d+)(?:-(\d+))?", m.group(2)):
            a = int(item[1])
            b = int(item[2]) if item[2] else a
            blocks.append((a, b - a + 1))
    return blocks


def rrmap_file_text(image, path):
    """rrmap --file, parsed as filefrag -v output is:
    [(lstart, lend, pstart, pend, len, expected, flags)], count."""
    return parse_filefrag(run([RRMAP, image, "--file", path]).stdout)


def parse_filefrag(out):
    rows = []
    for line in out.splitlines():
        m = re.match(r"\s*\d+:\s*(\d+)\.\.\s*(\d+):\s*(\d+)\.\.\s*(\d+):\s*(\d+):\s*(?:(\d+):)?\s*(\S*)\s*$",
                     line)
        if m:
            rows.append(tuple(int(x) if x else None for x in m.groups()[:6]) + (m.group(7),))
    n = int(re.search(r"(\d+) extents? found", out).group(1))
    return rows, n


# ------------------------------------------------------------------ checks

def check_free_space(image):
    j = rrmap_json(image, "--groups")
    n, free, hist = e2freefrag(image)
    assert j["free_extents"] == n
    assert j["free_blocks"] == free
    mine = {h["min_blocks"] * j["block_size"]: (h["extents"], h["blocks"]) for h in j["free_histogram"]}
    assert mine == hist
    groups = dumpe2fs_groups(image)
    assert len(groups) == j["groups"]
    for g, (first, last, ranges) in zip(j["group_table"], groups):
        assert (g["first"], g["first"] + g["blocks"] - 1) == (first, last)
        assert g["used"] == g["blocks"] - sum(b - a + 1 for a, b in ranges), g
        assert g["free_extents"] == len(ranges), g
        assert g["largest_free"] == max([b - a + 1 for a, b in ranges] or [0]), g
    return j


def check_files(image, j):
    """Per file: rrmap --file == debugfs ex; the distribution; blocks per group."""
    tree = debugfs_tree(image)
    bpg, first_data = j["blocks_per_group"], 1 if j["block_size"] == 1024 else 0
    data = [0] * j["groups"]
    counts = []
    for path, (ino, mode) in sorted(tree.items()) + [("/", (2, 0o040755))]:
        kind = mode & 0o170000
        if kind not in (0o100000, 0o040000, 0o120000):
            continue
        for b, n in debugfs_blocks(image, ino, j["block_size"]):
            for x in range(b, b + n):
                data[(x - first_data) // bpg] += 1
        if kind != 0o100000:
            continue
        exts = mh.leaf_extents(image, path.lstrip("/")) if "EXTENTS:" in mh.debugfs(image, "stat <%d>" % ino) \
            else None
        f = rrmap_json(image, "--file", path)
        mine = [(e["logical"], e["physical"], e["length"]) for e in f["extent_list"]]
        if exts is not None:
            assert mine == exts, path
        counts.append((len(mine), f["fragments"]))
    assert [g["data"] for g in j["group_table"]] == data
    assert j["groups_touched"] == sum(1 for d in data if d)
    assert j["files"] == len(counts)
    e = sorted(c[0] for c in counts) or [0]
    assert j["extents_per_file"]["max"] == e[-1]
    assert abs(j["extents_per_file"]["mean"] - sum(e) / max(1, len(counts))) < 1e-3
    assert j["extents_per_file"]["more_than_one"] == sum(1 for x in e if x > 1)
    assert j["extents_per_file"]["p50"] == e[(len(e) * 50 + 99) // 100 - 1]
    return tree


def check_filefrag(image, tree):
    """rrmap --file against filefrag -v on the kernel's read-only loop mount."""
    if not mh.loop_works():
        pytest.skip("filefrag comparison needs root and loop devices (kernel mount)")
    mnt = os.path.join(os.path.dirname(image), "kmnt")
    os.makedirs(mnt, exist_ok=True)
    run(["mount", "-o", "loop,ro,noload", image, mnt])
    try:
        n = 0
        for path, (ino, mode) in sorted(tree.items()):
            if mode & 0o170000 != 0o100000:
                continue
            out = run(["filefrag", "-v", mnt + path]).stdout
            theirs = parse_filefrag(out)
            mine = rrmap_file_text(image, path)
            if "merged" in out:
                # a block-mapped file: the kernel merges its blocks into runs
                # (FIEMAP_EXTENT_MERGED) and filefrag then prints no
                # "expected" and counts per ioctl batch, not per
                # discontinuity: compare the runs only
                assert [r[:5] for r in mine[0]] == [r[:5] for r in theirs[0]], path
            else:
                assert mine == theirs, path
            n += 1
        assert n
    finally:
        subprocess.run(["umount", mnt])


# ------------------------------------------------------------------- images

@pytest.mark.parametrize("mkfs", [
    ["-b", "4096"],
    ["-b", "4096", "-g", str(GROUP_BLOCKS), "-O", "^flex_bg"],
    ["-b", "1024", "-O", "^metadata_csum,^64bit"],
])
def test_fresh_image(workdir, mkfs):
    img = os.path.join(workdir, "img")
    run(["truncate", "-s", "300M", img])
    run(["mke2fs", "-q", "-t", "ext4", "-F"] + mkfs + [img])
    before = (os.stat(img).st_mtime_ns, mh.file_digest(img))
    j = check_free_space(img)
    check_files(img, j)
    run([RRMAP, img, "--png", os.path.join(workdir, "m.png")])
    assert (os.stat(img).st_mtime_ns, mh.file_digest(img)) == before, "rrmap wrote to the image"
    assert j["files"] == 0
    assert j["groups_touched"] == 1      # the root directory and lost+found, in group 0


def _frag_workload(mnt):
    """Leave fragmented files and free space: small files, half deleted;
    two files written in turn with fsync between (interleaved extents); a
    sparse file; a big sequential file; a slow symlink; an xattr block."""
    data = mh.pattern(7, 1 << 20)
    os.mkdir(os.path.join(mnt, "small"))
    for i in range(60):
        with open(os.path.join(mnt, "small", "f%02d" % i), "wb") as f:
            f.write(data[:4096 * (1 + i % 9)])
    for i in range(0, 60, 2):
        os.unlink(os.path.join(mnt, "small", "f%02d" % i))
    fds = [os.open(os.path.join(mnt, "a%d" % k), os.O_CREAT | os.O_WRONLY, 0o644) for k in range(2)]
    for i in range(24):
        for fd in fds:
            os.pwrite(fd, data[:256 << 10], i * (256 << 10))
            os.fsync(fd)
    for fd in fds:
        os.close(fd)
    with open(os.path.join(mnt, "sparse"), "wb") as f:
        for off in (0, 5 << 20, 40 << 20):
            f.seek(off)
            f.write(data[:12288])
    with open(os.path.join(mnt, "big"), "wb") as f:
        for _ in range(48):
            f.write(data)
    os.symlink("/" + "x" * 200, os.path.join(mnt, "slowlink"))
    # unwritten extents: a preallocated file, and one written in part and
    # preallocated past its end
    fd = os.open(os.path.join(mnt, "prealloc"), os.O_CREAT | os.O_WRONLY, 0o644)
    os.posix_fallocate(fd, 0, 3 << 20)
    os.close(fd)
    fd = os.open(os.path.join(mnt, "partial"), os.O_CREAT | os.O_WRONLY, 0o644)
    os.pwrite(fd, data[:8192], 0)
    os.fsync(fd)
    mh.fallocate(fd, 1, 2 << 20, 256 << 10)        # FALLOC_FL_KEEP_SIZE
    os.close(fd)
    os.setxattr(os.path.join(mnt, "big"), "user.blob", b"v" * 3000)
    os.unlink(os.path.join(mnt, "small", "f01"))


@pytest.fixture(scope="module")
def rrfuse_image(tmp_path_factory):
    mh.require_root()
    mh.require_fuse()
    mh.require_binary()
    d = str(tmp_path_factory.mktemp("rrmap-rrfuse"))
    img = mh.make_image("512M", mkfs_args=["-g", str(GROUP_BLOCKS)], path=os.path.join(d, "image.img"))
    mh.run_mounted(img, _frag_workload)      # waits for the daemon, then e2fsck -fn
    yield img
    shutil.rmtree(d, ignore_errors=True)


def test_rrfuse_image_free_space(rrfuse_image):
    j = check_free_space(rrfuse_image)
    assert j["free_extents"] > 1, "the workload should have fragmented the free space"


def test_rrfuse_image_files(rrfuse_image):
    j = rrmap_json(rrfuse_image, "--groups")
    check_files(rrfuse_image, j)
    assert j["files"] == 2 + 1 + 1 + 2 + 29    # a0 a1, sparse, big, prealloc partial, small/ minus 31 deleted
    assert j["extents_per_file"]["max"] > 1


def test_rrfuse_image_filefrag(rrfuse_image):
    check_filefrag(rrfuse_image, debugfs_tree(rrfuse_image))


def test_text_agrees_with_json(rrfuse_image):
    need(RRMAP)
    j = rrmap_json(rrfuse_image)
    out = run([RRMAP, rrfuse_image]).stdout
    m = re.search(r"extents per file: mean ([\d.]+), p50 (\d+), p99 (\d+), max (\d+); "
                  r"files with more than one: (\d+)", out)
    e = j["extents_per_file"]
    assert (float(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5))) == \
        (round(e["mean"], 2), e["p50"], e["p99"], e["max"], e["more_than_one"])
    # the histogram in e2freefrag's own layout, line for line
    def hist_rows(text):
        return [l.rstrip() for l in text.splitlines()
                if re.match(r"\s*\d+[KMGTPE]\.\.\.|(Min|Max|Avg|Num)\. free extent:", l)]
    theirs = hist_rows(run(["e2freefrag", rrfuse_image]).stdout)
    assert theirs and hist_rows(out) == theirs
    m = re.search(r"touched \(holding file, directory or symlink blocks\): (\d+)", out)
    assert int(m.group(1)) == j["groups_touched"]
    assert "write" not in out.lower()


def test_block_mapped_image(workdir):
    """ext3 (block maps, indirect blocks) written by debugfs: runs and blocks."""
    img = os.path.join(workdir, "ext3.img")
    run(["truncate", "-s", "64M", img])
    run(["mke2fs", "-q", "-t", "ext3", "-b", "1024", "-F", img])
    src = os.path.join(workdir, "src")
    with open(src, "wb") as f:
        for i in range(300):          # beyond the 12 direct blocks, holes between runs
            f.write(mh.pattern(i, 3072))
            f.seek(1024 * (1 + i % 2), 1)
    small = os.path.join(workdir, "small")
    with open(small, "wb") as f:
        f.write(b"s" * 5000)
    mh.debugfs(img, "write %s small1" % small, "write %s frag" % src, "write %s small2" % small,
               "rm small1", "write %s frag2" % src, write=True)
    j = check_free_space(img)
    tree = check_files(img, j)
    assert j["files"] == 3
    check_filefrag(img, tree)


def test_png(workdir):
    need(RRMAP)
    fresh, used = os.path.join(workdir, "fresh.img"), os.path.join(workdir, "used.img")
    for img in (fresh, used):
        run(["truncate", "-s", "512M", img])
        run(["mke2fs", "-q", "-t", "ext4", "-g", str(GROUP_BLOCKS), "-F", img])
    src = os.path.join(workdir, "src")
    with open(src, "wb") as f:
        f.write(mh.pattern(2, 40 << 20))
    mh.debugfs(used, "write %s a" % src, "write %s b" % src, write=True)

    def dims(p):
        with open(p, "rb") as f:
            head = f.read(24)
        assert head[:8] == b"\x89PNG\r\n\x1a\n"
        return struct.unpack(">II", head[16:24])

    one, two = os.path.join(workdir, "one.png"), os.path.join(workdir, "two.png")
    run([RRMAP, fresh, "--png", one, "--label", "fresh"])
    run([RRMAP, fresh, used, "--png", two, "--label", "fresh", "--label", "used"])
    w1, h1 = dims(one)
    w2, h2 = dims(two)
    assert 300 < w1 < w2 < 4000 and 100 < h1 <= h2 < 3000
    r = run([RRMAP, fresh, "--png", os.path.join(workdir, "no", "such", "dir.png")], ok=(1,))
    assert "rrmap:" in r.stderr


def test_corrupt_images(workdir):
    need(RRMAP)
    img = os.path.join(workdir, "img")
    run(["truncate", "-s", "64M", img])
    run(["mke2fs", "-q", "-t", "ext4", "-F", img])
    src = os.path.join(workdir, "src")
    with open(src, "wb") as f:
        f.write(mh.pattern(1, 1 << 20))
    mh.debugfs(img, "write %s f" % src, write=True)
    pristine = open(img, "rb").read()

    def expect_refusal(data, *extra):
        with open(img, "wb") as f:
            f.write(data)
        r = run([RRMAP, img] + list(extra), ok=(1,), timeout=60)
        assert r.stderr.startswith("rrmap: "), r.stderr
        return r.stderr

    # the superblock's magic
    bad = bytearray(pristine)
    bad[1024 + 0x38:1024 + 0x3A] = b"\0\0"
    expect_refusal(bytes(bad))
    # half the image gone
    expect_refusal(pristine[:len(pristine) // 64])
    # not a filesystem at all
    expect_refusal(mh.pattern(3, 1 << 20))
    # an extent pointing past the end (debugfs recomputes the inode checksum)
    with open(img, "wb") as f:
        f.write(pristine)
    mh.debugfs(img, "sif f block[5] 0xfffffff0", write=True)
    err = expect_refusal(open(img, "rb").read())
    assert "corrupt" in err
    err = expect_refusal(open(img, "rb").read(), "--file", "/f")
    assert "corrupt" in err
    # and nothing was written to it: rrmap opens read-only
    before = open(img, "rb").read()
    run([RRMAP, img, "--groups"], ok=(1,))
    assert open(img, "rb").read() == before
    run([RRMAP, os.path.join(workdir, "missing")], ok=(1,))
    run([RRMAP], ok=(2,))


def test_large_sparse_image(workdir):
    """16 TiB (less 1 MiB: an ext4 host file's limit) in little time and memory."""
    need(RRMAP)
    img = os.path.join(workdir, "huge.img")
    r = subprocess.run(["truncate", "-s", str((16 << 40) - (1 << 20)), img], stderr=subprocess.PIPE)
    if r.returncode:
        pytest.skip("the host filesystem cannot hold a 16 TiB sparse file: %s" % r.stderr.decode().strip())
    # nodiscard: a discarded (punched) host file takes twice as long to delete
    run(["mke2fs", "-q", "-t", "ext4", "-b", "4096", "-E", "nodiscard", "-F", img])
    t0 = time.monotonic()
    r = run(["/usr/bin/time", "-f", "maxrss %M", RRMAP, img, "--json", "--png",
             os.path.join(workdir, "huge.png")])
    took = time.monotonic() - t0
    rss_kb = int(re.search(r"maxrss (\d+)", r.stderr).group(1))
    j = __import__("json").loads(r.stdout)
    assert j["groups"] == 131072
    out = run(["dumpe2fs", "-h", img]).stdout
    assert j["free_blocks"] == int(re.search(r"^Free blocks:\s+(\d+)", out, re.M).group(1))
    assert took < 30, "rrmap took %.1fs on a 16 TiB sparse image" % took
    assert rss_kb < 128 << 10, "rrmap used %d KiB on a 16 TiB sparse image" % rss_kb
