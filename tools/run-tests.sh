#!/bin/bash
# Install what is missing, build, and run every test: unit tests (Check),
# the random-operation tester and the through-the-mount suite (pytest), once
# on a plain build and once under AddressSanitizer + UBSan.
#   tools/run-tests.sh [--quick] [pytest args...]
set -uo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/tools/deps.sh"
rr_install_deps "$RR_TEST_DEPS" || exit 1
cd "$top"

quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi
pytest_args=("$@")
# A new fuzz seed each day, printed with every failure so it can be replayed.
fuzz_seed=${RRFUZZ_SEED:-$(date +%Y%m%d)}

pass=0
fail=0
failed=()
step() {
	local name=$1 t0=$SECONDS
	shift
	echo "=== $name"
	if "$@"; then
		pass=$((pass + 1))
		echo "=== passed in $((SECONDS - t0)) s: $name"
	else
		fail=$((fail + 1))
		failed+=("$name")
		echo "=== FAILED in $((SECONDS - t0)) s: $name"
	fi
}

# Warnings fail the build here (-Werror); a build for use keeps them warnings.
build() {
	local dir=$1
	shift
	{ [ -d "$dir" ] || meson setup "$dir" -Dwerror=true "$@" >/dev/null; } && meson compile -C "$dir" >/dev/null
}

rrfsx_run() {
	local bin=$1 rr=$2 w img mnt ref pid rc
	w=$(mktemp -d /var/tmp/rrfsx.XXXXXX)
	img=$w/img mnt=$w/mnt ref=$w/ref
	mkdir -p "$mnt" "$ref"
	truncate -s 1G "$img" && mke2fs -q -t ext4 -b 4096 "$img"
	"$rr" "$img" "$mnt" -f 2>"$w/log" &
	pid=$!
	for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
	"$bin" -k -s "${RRFSX_SEED:-1}" -n "${RRFSX_OPS:-20000}" -t 4 "$mnt" "$ref"
	rc=$?
	fusermount3 -u "$mnt"
	wait "$pid" || rc=1
	e2fsck -fn "$img" >"$w/fsck" 2>&1 || { cat "$w/fsck"; rc=1; }
	[ $rc -eq 0 ] || cat "$w/log"
	rm -rf "$w"
	return $rc
}

suite() {
	local dir=$1
	shift
	local before=$fail
	step "build $dir" build "$dir" "$@"
	[ $fail -eq $before ] || return
	step "unit tests ($dir)" meson test -C "$dir" --print-errorlogs
	step "rrfsx random operations ($dir)" rrfsx_run "$dir/tests/fsx/rrfsx" "$dir/rrfuse"
	step "fuzzed images ($dir)" /usr/bin/python3 tests/fuzz/rrfuzz.py --rrfuse "$top/$dir/rrfuse" \
		--opts check --count "${RRFUZZ_COUNT:-500}" --seed "$fuzz_seed" --keep-failed "/var/tmp/rrfuzz-failures-$dir"
	step "mount tests ($dir${mount_opts#check})" env RRFUSE="$top/$dir/rrfuse" RRFUSE_OPTS="$mount_opts" \
		/usr/bin/python3 -m pytest -q --tb=short \
		-p no:cacheprovider tests/mount "${pytest_args[@]}"
	# The mixed workloads at once; tools/soak.sh --minutes N for a long one.
	step "soak, ${RRSOAK_MINUTES:-1} min ($dir)" tools/soak.sh --build "$dir" --minutes "${RRSOAK_MINUTES:-1}" --size 256M
	evidence_tests "$dir"
}

# rrmap and rrftl (issue 17): against e2freefrag, debugfs, filefrag and the
# analytic FTL results, uniform and hot/cold (25 s; a minute under ASan);
# rrblk2iolog on blkparse text and a kernel trace (2 s); the report's verdict
# rules on made-up data (1 s); rrbench report on tiny sizes (a minute and a
# half, two at a load of 10; plain build only); rrbench fidelity on tiny sizes
# (seconds); rrmap on fuzzed images
# (200 cases, or as many as start within a minute: a case takes 0.3 s, 1.5 s
# under ASan).
evidence_tests() {
	local dir=$1 once=()
	# rrbench report --tiny (a minute) in the plain build only
	[ "$dir" = build ] || once=(--deselect tests/tools/test_rrbench_report.py::test_report_tiny)
	step "rrmap, rrftl, rrblk2iolog and rrbench report tests ($dir)" env RRMAP="$top/$dir/rrmap" \
		RRFTL="$top/$dir/rrftl" RRFUSE="$top/$dir/rrfuse" /usr/bin/python3 -m pytest -q --tb=short \
		-p no:cacheprovider tests/tools "${once[@]}"
	step "fuzzed images for rrmap ($dir)" /usr/bin/python3 tests/fuzz/rrmapfuzz.py --rrmap "$top/$dir/rrmap" \
		--count "${RRMAPFUZZ_COUNT:-200}" --time-limit "${RRMAPFUZZ_TIME:-60}" --seed "$fuzz_seed" \
		--keep-failed "/var/tmp/rrmapfuzz-failures-$dir"
}

# The concurrent tests again under ThreadSanitizer: a report stops the daemon.
tsan_suite() {
	local dir=build-tsan before=$fail
	step "build $dir" build "$dir" -Db_sanitize=thread -Db_lundef=false
	[ $fail -eq $before ] || return
	step "threaded unit tests ($dir)" meson test -C "$dir" --print-errorlogs alloc_threads
	step "rrfsx random operations ($dir)" rrfsx_run "$dir/tests/fsx/rrfsx" "$dir/rrfuse"
	# Their requests over io_uring: the plain build's mount tests and rrfsx here cover /dev/fuse.
	step "concurrent mount tests ($dir, io_uring)" env RRFUSE="$top/$dir/rrfuse" RRFUSE_OPTS=io_uring \
		/usr/bin/python3 -m pytest -q --tb=short \
		-p no:cacheprovider tests/mount/test_concurrency.py tests/mount/test_unlink_open.py \
		tests/mount/test_orphan.py tests/mount/test_rrctl.py tests/mount/test_delalloc.py tests/mount/test_hold.py \
		tests/mount/test_direct_io.py tests/mount/test_killpriv.py tests/mount/test_statx.py \
		tests/mount/test_uring.py
}

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:exitcode=66
# FUSE over io_uring (Linux 6.14): the kernel offers it only with this set, which root may do.
uring_param=/sys/module/fuse/parameters/enable_uring
[ -w $uring_param ] && echo Y >$uring_param
mount_opts=check
suite build
if [ $quick -eq 0 ]; then
	# The whole mount suite again, its requests over io_uring (-o io_uring, tests/mount/test_uring.py).
	mount_opts=check,io_uring
	suite build-asan -Db_sanitize=address,undefined -Db_lundef=false
	tsan_suite
fi

echo
for f in "${failed[@]:-}"; do [ -n "$f" ] && echo "FAILED: $f"; done
echo "rrfuse tests: $pass passed, $fail failed"
[ $fail -eq 0 ]
