"""rrmap's and rrftl's manual pages: every option --help lists is described
(set in bold), and the pages render without warnings."""
import os
import re
import subprocess

import pytest

from conftest import REPO, RRFTL, RRMAP, need, run

RRBLK = os.path.join(REPO, "tools", "rrblk2iolog")


@pytest.mark.parametrize("tool,page", [(RRMAP, "rrmap.1"), (RRFTL, "rrftl.1"),
                                       (RRBLK, "rrblk2iolog.1")])
def test_every_option_in_the_manual(tool, page):
    need(tool)
    opts = set(re.findall(r"--([a-z][a-z-]+)", run([tool, "--help"]).stdout))
    assert len(opts) > 4
    with open(os.path.join(REPO, "doc", page)) as f:
        bold = "\n".join(l.replace("\\-", "-") for l in f if l.startswith(".B"))
    missing = sorted(o for o in opts if "--" + o not in bold)
    assert not missing, "options in --help but not in doc/%s: %s" % (page, missing)


@pytest.mark.parametrize("page", ["rrmap.1", "rrftl.1", "rrblk2iolog.1"])
def test_manual_renders(page):
    if subprocess.run(["which", "man"], capture_output=True).returncode:
        pytest.skip("needs man (man-db)")
    r = subprocess.run(["man", "-l", "--warnings", os.path.join(REPO, "doc", page)],
                       capture_output=True, text=True,
                       env=dict(os.environ, MANWIDTH="80", MANPAGER="cat"))
    assert r.returncode == 0 and page.split(".")[0] in r.stdout, r.stderr
    assert "warning" not in r.stderr, r.stderr
