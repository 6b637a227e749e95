"""Concurrent create/write/rename/unlink from threads and processes.

Every file's content is a function of its (final) name, so the survivors
can be checked at the end, after a remount."""

import errno
import hashlib
import multiprocessing
import os
import random
import threading

from conftest import pattern


def content(tag, size):
    """Deterministic data for tag; cheap for big sizes."""
    seed = hashlib.sha256(tag.encode()).digest()
    base = pattern(tag, min(size, 65536)) if size else b""
    out = bytearray(seed[:8] + base)[:size]
    while len(out) < size:
        out += base[:size - len(out)]
    return bytes(out)


def size_for(tag):
    h = int(hashlib.md5(tag.encode()).hexdigest()[:8], 16)
    return [0, 1, 100, 4095, 4096, 4097, 70000, 300000][h % 8] + h % 13


def write_file(path, tag):
    data = content(tag, size_for(tag))
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    try:
        off = 0
        while off < len(data):
            off += os.write(fd, data[off:off + 65536 + 17])
    finally:
        os.close(fd)


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def run_threads(fns):
    errors = []

    def wrap(fn):
        try:
            fn()
        except BaseException as e:  # noqa: B902
            import traceback
            errors.append("".join(traceback.format_exception(e)))

    ts = [threading.Thread(target=wrap, args=(fn,)) for fn in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
        assert not t.is_alive(), "thread hung"
    assert not errors, "\n".join(errors)


def worker(root, shared, wid, nfiles, seed):
    """create -> write -> (rename | unlink | keep); the final name of a
    file encodes the tag of its content: <tag> or <tag>.renamed"""
    rng = random.Random(seed)
    own = os.path.join(root, "w%d" % wid)
    os.makedirs(own, exist_ok=True)
    for i in range(nfiles):
        tag = "w%d-%d" % (wid, i)
        d = shared if i % 2 else own
        p = os.path.join(d, tag)
        write_file(p, tag)
        r = rng.random()
        if r < 0.3:
            # rename into the other directory (or within the same one)
            nd = rng.choice([shared, own])
            os.rename(p, os.path.join(nd, tag + ".renamed"))
        elif r < 0.5:
            os.unlink(p)
        elif r < 0.6:
            # overwrite in place with fresh content (same size & tag)
            data = content(tag, size_for(tag))
            with open(p, "r+b") as f:
                f.write(data)
        if i % 25 == 0:
            os.listdir(shared)


def verify_tree(root):
    count = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            tag = name[:-len(".renamed")] if name.endswith(".renamed") else name
            data = read_file(os.path.join(dirpath, name))
            assert data == content(tag, size_for(tag)), \
                os.path.join(dirpath, name)
            count += 1
    return count


def expected_survivors(nworkers, nfiles, seed_base):
    n = 0
    for wid in range(nworkers):
        rng = random.Random(seed_base + wid)
        for i in range(nfiles):
            r = rng.random()
            if r < 0.3:
                rng.choice([0, 1])
                n += 1
            elif r >= 0.5:
                n += 1
    return n


def test_threads_mixed(fs):
    root = fs.path("t")
    shared = os.path.join(root, "shared")
    os.makedirs(shared)
    nworkers, nfiles = 8, 150
    run_threads([
        (lambda w=w: worker(root, shared, w, nfiles, 1000 + w))
        for w in range(nworkers)
    ])
    n = expected_survivors(nworkers, nfiles, 1000)
    assert verify_tree(root) == n
    fs.remount()
    assert verify_tree(root) == n


def _proc_main(root, shared, wid, nfiles, seed, q):
    try:
        worker(root, shared, wid, nfiles, seed)
        q.put((wid, None))
    except BaseException as e:  # noqa: B902
        import traceback
        q.put((wid, "".join(traceback.format_exception(e))))


def test_processes_mixed(fs):
    root = fs.path("p")
    shared = os.path.join(root, "shared")
    os.makedirs(shared)
    nworkers, nfiles = 4, 150
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_proc_main,
                         args=(root, shared, w, nfiles, 2000 + w, q))
             for w in range(nworkers)]
    for p in procs:
        p.start()
    results = [q.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    errs = [e for _, e in results if e]
    assert not errs, "\n".join(errs)
    n = expected_survivors(nworkers, nfiles, 2000)
    assert verify_tree(root) == n
    fs.remount()
    assert verify_tree(root) == n


def test_shared_dir_create_delete_list(fs):
    """Threads creating/deleting in one directory while another lists it:
    listings never contain duplicates and never fail."""
    d = fs.path("shared")
    os.mkdir(d)
    stop = threading.Event()
    listings = []

    def creator(w):
        for i in range(300):
            p = os.path.join(d, "c%d-%d" % (w, i))
            write_file(p, "c%d-%d" % (w, i))
            if i % 3 == 0:
                os.unlink(p)

    def lister():
        while not stop.is_set():
            names = os.listdir(d)
            assert len(names) == len(set(names)), "duplicate entries"
            listings.append(len(names))

    lt = threading.Thread(target=lister)
    lt.start()
    try:
        run_threads([(lambda w=w: creator(w)) for w in range(6)])
    finally:
        stop.set()
        lt.join(60)
    assert listings
    names = os.listdir(d)
    assert len(names) == 6 * 200
    for name in names:
        assert read_file(os.path.join(d, name)) == content(name, size_for(name))


def test_rename_race(fs):
    """Several threads bounce the same files between directories; each
    file must exist exactly once at the end."""
    dirs = [fs.path("d%d" % i) for i in range(4)]
    for d in dirs:
        os.mkdir(d)
    nfiles = 30
    for i in range(nfiles):
        write_file(os.path.join(dirs[0], "f%d" % i), "f%d" % i)

    def bouncer(seed):
        rng = random.Random(seed)
        for _ in range(400):
            i = rng.randrange(nfiles)
            src, dst = rng.sample(dirs, 2)
            try:
                os.rename(os.path.join(src, "f%d" % i),
                          os.path.join(dst, "f%d" % i))
            except FileNotFoundError:
                pass

    def statter(seed):
        rng = random.Random(seed)
        for _ in range(1500):
            p = os.path.join(rng.choice(dirs), "f%d" % rng.randrange(nfiles))
            try:
                os.stat(p)
            except FileNotFoundError:
                pass

    run_threads([(lambda s=s: bouncer(s)) for s in range(5)]
                + [(lambda s=s: statter(100 + s)) for s in range(2)])
    found = {}
    for d in dirs:
        for name in os.listdir(d):
            assert name not in found, "%s twice" % name
            found[name] = d
    assert sorted(found) == sorted("f%d" % i for i in range(nfiles))
    for name, d in found.items():
        p = os.path.join(d, name)
        assert os.stat(p).st_nlink == 1
        assert read_file(p) == content(name, size_for(name))
    for d in dirs:
        assert os.stat(d).st_nlink == 2


def test_parallel_append(fs):
    """O_APPEND writes from threads and processes never overlap."""
    p = fs.path("log")
    open(p, "wb").close()
    rec = 1000
    nthreads, per = 6, 200

    def appender(w):
        fd = os.open(p, os.O_WRONLY | os.O_APPEND)
        try:
            for i in range(per):
                line = ("%02d:%05d:" % (w, i)).encode()
                line = line + b"x" * (rec - len(line) - 1) + b"\n"
                assert os.write(fd, line) == rec
        finally:
            os.close(fd)

    run_threads([(lambda w=w: appender(w)) for w in range(nthreads)])
    data = read_file(p)
    assert len(data) == nthreads * per * rec
    seen = set()
    last = {}
    for k in range(0, len(data), rec):
        r = data[k:k + rec]
        assert r.endswith(b"\n") and r.count(b"\n") == 1, k
        w, i = int(r[0:2]), int(r[3:8])
        assert i == last.get(w, -1) + 1, "out of order for writer %d" % w
        last[w] = i
        seen.add((w, i))
    assert len(seen) == nthreads * per


def test_parallel_big_writers(fs):
    """Threads writing different large files at once (interleaved block
    allocation), plus readers of files already written."""
    size = 3 << 20

    def writer(w):
        tag = "big%d" % w
        data = content(tag, size)
        fd = os.open(fs.path(tag), os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            for off in range(0, size, 128 * 1024 + 5):
                os.pwrite(fd, data[off:off + 128 * 1024 + 5], off)
        finally:
            os.close(fd)
        assert read_file(fs.path(tag)) == data

    run_threads([(lambda w=w: writer(w)) for w in range(6)])
    fs.remount()
    for w in range(6):
        assert read_file(fs.path("big%d" % w)) == content("big%d" % w, size)


def test_mkdir_rmdir_race(fs):
    """Threads creating and removing the same directory names."""
    base = fs.path("base")
    os.mkdir(base)

    def churn(seed):
        rng = random.Random(seed)
        for _ in range(300):
            p = os.path.join(base, "d%d" % rng.randrange(10))
            try:
                if rng.random() < 0.5:
                    os.mkdir(p)
                else:
                    os.rmdir(p)
            except OSError as e:
                assert e.errno in (errno.EEXIST, errno.ENOENT, errno.ENOTEMPTY)

    run_threads([(lambda s=s: churn(s)) for s in range(6)])
    subdirs = os.listdir(base)
    assert os.stat(base).st_nlink == 2 + len(subdirs)
    fs.remount()
    assert sorted(os.listdir(base)) == sorted(subdirs)
    assert os.stat(base).st_nlink == 2 + len(subdirs)
