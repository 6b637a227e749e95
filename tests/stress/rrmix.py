#!/usr/bin/python3
"""rrmix: writes, every fallocate mode, truncates and files unlinked while
open, from several threads over a few names, on a filesystem that is full
most of the time.  Every error is counted, none is fatal; the caller checks
the image.  Used by tests/mount/test_enospc.py and tools/soak.sh.

    rrmix.py MOUNTPOINT [--seed N] [--threads N] [--ops N] [--span MiB]
"""
import argparse
import os
import random
import sys
import threading

MiB = 1 << 20
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10
MODES = [0, FALLOC_FL_KEEP_SIZE, FALLOC_FL_ZERO_RANGE,
         FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE,
         FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE]


def _fallocate(fd, mode, off, ln):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.fallocate(fd, ctypes.c_int(mode), ctypes.c_long(off), ctypes.c_long(ln)):
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def worker(mnt, seed, nops, errs, lock, span=48 * MiB, names=24):
    rnd = random.Random(seed)

    def count(e):
        with lock:
            errs[e.errno] = errs.get(e.errno, 0) + 1

    for _ in range(nops):
        name = os.path.join(mnt, "f%d" % rnd.randrange(names))
        fd = -1
        try:
            fd = os.open(name, os.O_RDWR | os.O_CREAT, 0o644)
            op = rnd.randrange(10)
            off = rnd.randrange(0, span) & ~511
            ln = rnd.randrange(1, 4 * MiB)
            if op < 3:
                os.pwrite(fd, bytes([op + 1]) * rnd.randrange(1, MiB), off)
            elif op < 8:
                _fallocate(fd, MODES[op - 3], off, ln)
            elif op == 8:
                os.ftruncate(fd, rnd.randrange(0, span * 2 // 3))
            else:
                os.unlink(name)
                os.pwrite(fd, b"u" * rnd.randrange(1, MiB), rnd.randrange(0, 8 * MiB))
                if rnd.random() < 0.5:
                    os.ftruncate(fd, rnd.randrange(0, 4 * MiB))
        except OSError as e:
            count(e)
        finally:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError as e:
                    count(e)


def run(mnt, seed=1, threads=4, ops=400, span=48 * MiB):
    """Run the workload; {errno: count} of what failed."""
    errs, lock = {}, threading.Lock()
    ts = [threading.Thread(target=worker, args=(mnt, seed * 100 + k, ops, errs, lock, span))
          for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mnt")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--ops", type=int, default=400)
    ap.add_argument("--span", type=int, default=48, help="MiB of file offsets")
    a = ap.parse_args()
    errs = run(a.mnt, a.seed, a.threads, a.ops, a.span * MiB)
    print("rrmix: errors by errno: %s" % (errs or "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
