#!/bin/bash
# Soak: the mixed workloads at once, round after round, on fresh images
# each round, under a given build (an ASan/UBSan or TSan one finds most):
# rrfsx (random operations against a reference copy, on a mount of its own
# that never fills), and on one mount rrmix (writes, every
# fallocate mode, truncates, unlinked-open files, to ENOSPC), rrunlink
# (stress-ng's unlink stressor) and stress-ng's dnotify and fallocate
# stressors.  After each round, for each mount: rrfuse -u, the daemon's
# exit status, its log (sanitizer reports), e2fsck -fn.  Stops at the
# first failure and keeps its directory.
#   tools/soak.sh [--build DIR] [--minutes N] [--size SIZE] [--opts OPTS]
# Needs root, /dev/fuse, stress-ng, python3.  CI runs a one-minute one per build.
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build minutes=20 size=512M opts=check
while [ $# -gt 0 ]; do
	case $1 in
	--build) build=$2; shift 2 ;;
	--minutes) minutes=$2; shift 2 ;;
	--size) size=$2; shift 2 ;;
	--opts) opts=$2; shift 2 ;;
	*) echo "usage: $0 [--build DIR] [--minutes N] [--size SIZE] [--opts OPTS]" >&2; exit 2 ;;
	esac
done
rr=$build/rrfuse
[ -x "$rr" ] || { echo "soak: no $rr (meson compile -C $build)" >&2; exit 2; }
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:exitcode=66}
# Each round one of these on top of --opts: the data path's three modes and the other policy.
variants=("" "nodelalloc" "no_writeback_cache" "rralloc")
end=$(($(date +%s) + minutes * 60))
round=0 passed=0
# Start rrfuse on image $1 at mount point $2 with options $3; its pid in $daemon.
mount_rr() {
	truncate -s "$size" "$1" && mke2fs -q -t ext4 -b 4096 "$1"
	"$rr" "$1" "$2" -f ${3:+-o "$3"} 2>"$1.log" &
	daemon=$!
	for _ in $(seq 100); do mountpoint -q "$2" && break; sleep 0.1; done
}

# Unmount $2 (image $1), wait for daemon $3; what failed, appended to $fail.
check_rr() {
	# A refused unmount fails the round, and must not leave the daemon waited for forever.
	"$rr" -u "$2" >>"$1.log" 2>&1 || { fail="$fail rrfuse -u $2"; umount -l "$2"; }
	wait "$3" || fail="$fail daemon exit $? ($1)"
	grep -q "Sanitizer\|runtime error" "$1.log" && fail="$fail sanitizer report ($1)"
	e2fsck -fn "$1" >"$1.fsck" 2>&1 || fail="$fail e2fsck ($1)"
}

while [ "$(date +%s)" -lt $end ]; do
	w=$(mktemp -d /var/tmp/rrsoak.XXXXXX)
	v=${variants[$((round % ${#variants[@]}))]}
	o=$opts${v:+,$v}
	round=$((round + 1))
	mkdir -p "$w/mnt" "$w/fsxmnt" "$w/ref"
	# rrfsx compares with a reference, so it must never meet ENOSPC; with
	# the writeback cache a page refused for want of room is a hole, not
	# an error to retry.  It runs on a filesystem of its own (the same
	# build and options) while the others fill theirs.
	mount_rr "$w/img" "$w/mnt" "$o"
	pid=$daemon
	mount_rr "$w/fsx.img" "$w/fsxmnt" "$o"
	fsxpid=$daemon
	mkdir -p "$w/mnt/mix" "$w/mnt/unlink" "$w/mnt/ng"
	"$build/tests/fsx/rrfsx" -k -s "$round" -n 20000 -t 4 "$w/fsxmnt" "$w/ref" >"$w/fsx.out" 2>&1 &
	fsx=$!
	/usr/bin/python3 "$top/tests/stress/rrmix.py" "$w/mnt/mix" --seed "$round" --ops 600 \
		--span 96 >"$w/mix.out" 2>&1 &
	others=($!)
	"$build/rrunlink" -w 2 -t 20 "$w/mnt/unlink" >"$w/unlink.out" 2>&1 &
	others+=($!)
	stress-ng --dnotify 2 --fallocate 2 -t 20 --temp-path "$w/mnt/ng" >"$w/ng.out" 2>&1 &
	others+=($!)
	fail=""
	wait $fsx || fail="rrfsx"
	# Every workload, by pid: an unmount while one still runs is refused (EBUSY).
	wait "${others[@]}" 2>/dev/null
	check_rr "$w/img" "$w/mnt" "$pid"
	check_rr "$w/fsx.img" "$w/fsxmnt" "$fsxpid"
	if [ -n "$fail" ]; then
		echo "soak: round $round (-o $o) FAILED:$fail; kept $w"
		tail -n 20 "$w/fsx.out" "$w/img.log" "$w/img.fsck" "$w/fsx.img.log" "$w/fsx.img.fsck"
		echo "soak: $passed passed, 1 failed"
		exit 1
	fi
	echo "soak: round $round (-o $o) passed; $(cat "$w/mix.out")"
	passed=$((passed + 1))
	rm -rf "$w"
done
echo "soak: $passed passed, 0 failed"
