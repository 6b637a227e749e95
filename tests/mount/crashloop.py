#!/usr/bin/python3
"""SIGKILL rrfuse at random moments of a busy mixed workload, for as many
rounds as asked (the CI test, tests/mount/test_journal_write.py
test_crash_anywhere, runs a few): after each, e2fsck and the kernel replay
copies and rrfuse the image itself; e2fsck -fn must find each clean, and
rrfuse's every fsync'd file intact and every rename atomic.

  sudo tests/mount/crashloop.py [ROUNDS] [MOUNT_OPTS] [MKFS_ARGS...]
  e.g. tests/mount/crashloop.py 200
       tests/mount/crashloop.py 50 nojournal,cache_mb=0     (the damage it prevents)
       tests/mount/crashloop.py 100 "" -b 1024 -J size=1    (a tiny journal)

With --power, power cuts instead (tests/mount/test_power_loss.py): a
workload of SECONDS recorded write by write, then STATES device states
rebuilt from the record and each replayed by rrfuse, e2fsck and the kernel.

  sudo tests/mount/crashloop.py --power [STATES] [SECONDS] [MOUNT_OPTS] [MKFS_ARGS...]
  e.g. tests/mount/crashloop.py --power 200 20

RRFUSE (default build/rrfuse) names the daemon.  Exit status 1 when a
round found damage.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def power(args):
    if args and not args[0].isdigit() or len(args) > 1 and not args[1].replace(".", "", 1).isdigit():
        print(__doc__.strip(), file=sys.stderr)
        return 2
    import test_power_loss as t

    states = int(args[0]) if args else 50
    seconds = float(args[1]) if len(args) > 1 else 10.0
    opts = args[2] if len(args) > 2 else ""
    bad, checked, flushes = t.power_cuts(states, opts=opts, mkfs_args=args[3:], seconds=seconds)
    print("%d states of %d flush points checked, %d problems" % (checked, flushes, len(bad)))
    for b in bad[:3]:
        print("----\n" + b[-2000:])
    return 1 if bad else 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--power":
        return power(sys.argv[2:])
    if len(sys.argv) > 1 and (sys.argv[1] in ("-h", "--help") or not sys.argv[1].isdigit()):
        print(__doc__.strip(), file=sys.stdout if sys.argv[1] in ("-h", "--help") else sys.stderr)
        return 0 if sys.argv[1] in ("-h", "--help") else 2
    import test_journal_write as t  # the test's rounds, after the arguments are checked

    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    opts = sys.argv[2] if len(sys.argv) > 2 else ""
    mkfs = sys.argv[3:]
    bad = t.crash_rounds(rounds, opts=opts, mkfs_args=mkfs)
    print("%d rounds, %d with damage" % (rounds, len(bad)))
    for b in bad[:3]:
        print("----\n" + b[-2000:])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
