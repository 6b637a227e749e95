#!/bin/bash
# Soak: the mixed workloads at once, round after round, on a fresh image
# each round, under a given build (an ASan/UBSan or TSan one finds most):
# rrfsx (random operations against a reference copy), rrmix (writes, every
# fallocate mode, truncates, unlinked-open files, to ENOSPC), rrunlink
# (stress-ng's unlink stressor) and stress-ng's dnotify and fallocate
# stressors.  After each round: rrfuse -u, the daemon's exit status, its
# log (sanitizer reports), e2fsck -fn.  Stops at the first failure and
# keeps its directory.
#   tools/soak.sh [--build DIR] [--minutes N] [--size SIZE] [--opts OPTS]
# Needs root, /dev/fuse, stress-ng, python3.  CI runs a two-minute one.
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
while [ "$(date +%s)" -lt $end ]; do
	w=$(mktemp -d /var/tmp/rrsoak.XXXXXX)
	v=${variants[$((round % ${#variants[@]}))]}
	o=$opts${v:+,$v}
	round=$((round + 1))
	mkdir -p "$w/mnt" "$w/ref"
	truncate -s "$size" "$w/img" && mke2fs -q -t ext4 -b 4096 "$w/img"
	"$rr" "$w/img" "$w/mnt" -f ${o:+-o "$o"} 2>"$w/log" &
	pid=$!
	for _ in $(seq 100); do mountpoint -q "$w/mnt" && break; sleep 0.1; done
	mkdir -p "$w/mnt/fsx" "$w/mnt/mix" "$w/mnt/unlink" "$w/mnt/ng"
	"$build/tests/fsx/rrfsx" -k -s "$round" -n 20000 -t 4 "$w/mnt/fsx" "$w/ref" >"$w/fsx.out" 2>&1 &
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
	# A refused unmount fails the round, and must not leave the daemon waited for forever.
	"$rr" -u "$w/mnt" >>"$w/log" 2>&1 || { fail="$fail rrfuse -u"; umount -l "$w/mnt"; }
	wait $pid || fail="$fail daemon exit $?"
	grep -q "Sanitizer\|runtime error" "$w/log" && fail="$fail sanitizer report"
	e2fsck -fn "$w/img" >"$w/fsck" 2>&1 || fail="$fail e2fsck"
	if [ -n "$fail" ]; then
		echo "soak: round $round (-o $o) FAILED:$fail; kept $w"
		tail -n 20 "$w/fsx.out" "$w/log" "$w/fsck"
		echo "soak: $passed passed, 1 failed"
		exit 1
	fi
	echo "soak: round $round (-o $o) passed; $(cat "$w/mix.out")"
	passed=$((passed + 1))
	rm -rf "$w"
done
echo "soak: $passed passed, 0 failed"
