#!/bin/bash
# Install what rrfuse needs to build, run and be tested, on Debian 12.
# Sourced by quickstart.sh and run-tests.sh; only installs what is missing.
set -euo pipefail

RR_BUILD_DEPS="build-essential meson ninja-build pkg-config libfuse3-dev fuse3 e2fsprogs
libext2fs-dev comerr-dev check libmount-dev libcairo2-dev liburing-dev"
RR_TEST_DEPS="python3 python3-pytest attr acl util-linux mount procps stress-ng fio blktrace python3-matplotlib python3-pyflakes"

rr_install_deps() {
	local want="$RR_BUILD_DEPS ${1:-}" missing=() p
	for p in $want; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	echo "rrfuse: installing ${missing[*]}"
	local sudo=""
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}
