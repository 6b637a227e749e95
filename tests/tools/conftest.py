"""Shared helpers of the rrmap and rrftl tests.

RRMAP, RRFTL   the binaries (default <repo>/build/rrmap, <repo>/build/rrftl)
RRFUSE         the daemon for images written through a mount (as tests/mount)

The mount helpers (make_image, debugfs, run_mounted, loop_works, ...) are
tests/mount/conftest.py's, loaded here as a plain module.
"""

import importlib.util
import json
import os
import shutil
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
RRMAP = os.environ.get("RRMAP") or os.path.join(REPO, "build", "rrmap")
RRFTL = os.environ.get("RRFTL") or os.path.join(REPO, "build", "rrftl")

_spec = importlib.util.spec_from_file_location(
    "rrmount_helpers", os.path.join(REPO, "tests", "mount", "conftest.py"))
mh = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mh)


def need(binary):
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        pytest.skip("%s not built (meson compile; rrmap needs libcairo2-dev)" % binary)


def run(cmd, ok=(0,), **kw):
    kw.setdefault("stdout", subprocess.PIPE)
    r = subprocess.run([str(c) for c in cmd], stderr=subprocess.PIPE, text=True, **kw)
    assert r.returncode in ok, "%s: exit %d\n%s%s" % (cmd, r.returncode, (r.stdout or "")[-2000:],
                                                      r.stderr[-2000:])
    return r


def rrmap_json(*args):
    need(RRMAP)
    return json.loads(run([RRMAP] + list(args) + ["--json"]).stdout)


@pytest.fixture
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("rrtools", numbered=True)
    yield str(d)
    shutil.rmtree(str(d), ignore_errors=True)
