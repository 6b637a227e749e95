#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""rrmapfuzz: seeded fuzzed images for rrmap (the offline layout reader).

Reuses rrfuzz.py's templates and mutator (one corrupted on-disk structure
per case, checksums sometimes fixed up so the corruption gets past them),
then runs rrmap on each image in every mode: the report with --groups and
--json, the picture (--png) and --file on a few files of the template.
rrmap must either succeed (exit 0, and JSON that parses) or refuse with a
message and exit 1: never a signal, a sanitizer report, another exit status
or a run longer than the timeout.  Needs no root: nothing is mounted.

    rrmapfuzz.py --rrmap build/rrmap [--count 200] [--seed S] [--jobs 2]
"""

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import rrfuzz  # noqa: E402  (templates and mutator)

RUN_TIMEOUT = 20.0       # one rrmap run on a 16 MiB image: anything near this is a hang
FILES = ["frag", "d/frag3", "sparse", "d/e/frag2", "small", "fastlink"]
SANITIZER_PATTERNS = rrfuzz.SANITIZER_PATTERNS


def check_run(cmd, want_json=False):
    """None if rrmap behaved, else (class, detail)."""
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        return "HANG", "no answer within %ds: %s" % (RUN_TIMEOUT, " ".join(cmd))
    err = r.stderr.decode("utf-8", "replace")
    for pat in SANITIZER_PATTERNS:
        if pat in err:
            lines = [l for l in err.splitlines() if pat in l]
            return "SANITIZER", (lines[0] if lines else pat)[:300]
    if r.returncode < 0:
        try:
            sig = signal.Signals(-r.returncode).name
        except ValueError:
            sig = str(-r.returncode)
        return "CRASH", "killed by %s: %s" % (sig, " ".join(cmd))
    if r.returncode not in (0, 1):
        return "BADEXIT", "exit status %d: %s" % (r.returncode, " ".join(cmd))
    if r.returncode == 1 and "rrmap:" not in err:
        return "NOMESSAGE", "exit 1 without a message: %s" % " ".join(cmd)
    if r.returncode == 0 and want_json:
        try:
            json.loads(r.stdout)
        except ValueError as e:
            return "BADJSON", "%s: %s" % (e, " ".join(cmd))
    return None


def run_case(args, workdir, templates, seed, n):
    case = rrfuzz.make_case(templates, seed, n)
    d = os.path.join(workdir, "case%d" % n)
    os.makedirs(d, exist_ok=True)
    img = os.path.join(d, "image")
    with open(img, "wb") as f:
        f.write(case["img"])
    cmds = [([args.rrmap, img, "--groups", "--json"], True),
            ([args.rrmap, img, "--groups"], False),
            ([args.rrmap, img, img, "--label", "a", "--png", os.path.join(d, "map.png")], False)]
    for p in FILES:
        cmds.append(([args.rrmap, img, "--file", p], False))
    if case.get("focus"):
        cmds.append(([args.rrmap, img, "--file", case["focus"], "--json"], True))
    res = None
    refused = 0
    for cmd, want_json in cmds:
        res = check_run(cmd, want_json)
        if res:
            break
    if not res:
        refused = subprocess.run(cmds[0][0], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, timeout=RUN_TIMEOUT).returncode
    if res and args.keep_failed:
        k = os.path.join(args.keep_failed, "seed%s-case%d" % (seed, n))
        os.makedirs(k, exist_ok=True)
        shutil.copyfile(img, os.path.join(k, "image"))
        with open(os.path.join(k, "README"), "w") as f:
            f.write("seed %s case %d\nmutation: %s\nclass: %s\ndetail: %s\n"
                    % (seed, n, case["desc"], res[0], res[1]))
    shutil.rmtree(d, ignore_errors=True)
    return n, case["desc"], res, refused


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rrmap", required=True, help="the rrmap binary")
    ap.add_argument("--count", type=int, default=200, help="number of cases (default 200)")
    ap.add_argument("--seed", default=None, help="run seed (default: time-based, printed)")
    ap.add_argument("--jobs", type=int, default=2, help="cases in parallel (default 2)")
    ap.add_argument("--one", type=int, metavar="N", help="run only case N of the seed")
    ap.add_argument("--time-limit", type=float, default=0, metavar="SECONDS",
                    help="start no new case after this long (0: no limit)")
    ap.add_argument("--keep-failed", metavar="DIR", help="keep failing images here")
    ap.add_argument("--verbose", "-v", action="store_true", help="one line per case")
    args = ap.parse_args()
    for tool in ("mke2fs", "debugfs", "e2fsck"):
        if not shutil.which(tool):
            sys.exit("rrmapfuzz: %s not found" % tool)
    if not os.access(args.rrmap, os.X_OK):
        sys.exit("rrmapfuzz: %s is not an executable" % args.rrmap)
    args.rrmap = os.path.abspath(args.rrmap)
    if args.keep_failed:
        os.makedirs(args.keep_failed, exist_ok=True)
    seed = args.seed if args.seed is not None else str(int(time.time()))
    workdir = tempfile.mkdtemp(prefix="rrmapfuzz-", dir="/var/tmp")
    t0 = time.monotonic()
    passed = failed = refused = 0
    try:
        templates = [rrfuzz.build_template(workdir, *t) for t in rrfuzz.TEMPLATES]
        cases = [args.one] if args.one is not None else list(range(args.count))
        print("rrmapfuzz: seed %s, %d case(s), %s; templates built in %.1fs"
              % (seed, len(cases), args.rrmap, time.monotonic() - t0), flush=True)
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as ex:
            futs = []
            for n in cases:
                if args.time_limit and time.monotonic() - t0 > args.time_limit:
                    break
                futs.append(ex.submit(run_case, args, workdir, templates, seed, n))
                # keep the queue short so the time limit means something
                while sum(not f.done() for f in futs) > 2 * args.jobs:
                    time.sleep(0.05)
            for f in futs:
                n, desc, res, rc = f.result()
                refused += rc != 0
                if res is None:
                    passed += 1
                    if args.verbose:
                        print("ok   case %d (%s): %s" % (n, "refused" if rc else "read", desc), flush=True)
                    continue
                failed += 1
                print("FAIL seed=%s case=%d %s: %s | %s | reproduce: %s --rrmap %s --seed %s --one %d"
                      % (seed, n, res[0], res[1], desc, os.path.abspath(__file__), args.rrmap, seed, n),
                      flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("rrmapfuzz: %.1fs; %d passed (%d refused as corrupt), %d failed"
          % (time.monotonic() - t0, passed, refused, failed), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
