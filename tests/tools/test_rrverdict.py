"""The verdict rules of rrbench report (tools/bench/rrverdict.py), one test
per rule, on made-up data: pairs of log ratios with a chosen mean and spread."""
import math
import os
import statistics
import sys

import pytest

from conftest import REPO

sys.path.insert(0, os.path.join(REPO, "tools", "bench"))
import rrverdict as rv  # noqa: E402


def logs(mean, sd, n):
    """n log ratios with exactly this mean and sample standard deviation."""
    z = [i - (n - 1) / 2 for i in range(n)]
    s = statistics.stdev(z)
    return [mean + sd * x / s for x in z]


def fig(mean, sd, n, better="higher", margin=5.0, primary=True, name="f"):
    return rv.Figure(name, better, logs(mean, sd, n), margin=margin, primary=primary)


def only(f):
    return rv.decide([f])[0]


def test_t_distribution_against_the_table():
    # rrbench's table of t(0.975, df) (from the printed tables) and the median
    table = {1: 12.706, 2: 4.303, 4: 2.776, 9: 2.262, 30: 2.042, 120: 1.980}
    for df, t in table.items():
        assert rv.t_ppf(0.975, df) == pytest.approx(t, abs=1e-3)
        assert rv.t_cdf(t, df) == pytest.approx(0.975, abs=1e-4)
    assert rv.t_ppf(0.95, 4) == pytest.approx(2.132, abs=1e-3)
    assert rv.t_cdf(0.0, 7) == pytest.approx(0.5)


def test_rule1_exactly_one_primary_figure():
    with pytest.raises(ValueError):
        rv.decide([fig(0.1, 0.01, 5, primary=False)])
    with pytest.raises(ValueError):
        rv.decide([fig(0.1, 0.01, 5), fig(0.1, 0.01, 5)])
    v = rv.decide([fig(0.0, 0.01, 5), fig(0.3, 0.01, 5, primary=False, name="s")])
    assert [x.figure.primary for x in v] == [True, False]


def test_rule2_holm_adjustment():
    assert rv.holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert rv.holm([0.2, 0.001]) == pytest.approx([0.2, 0.002])
    assert rv.holm([]) == []
    # a secondary figure whose own p is about 0.03: a benefit alone, not among five
    s = fig(0.12, 0.1, 6, primary=False, name="s")
    assert 0.01 < s.p_diff() < 0.05
    assert only(fig(0.12, 0.1, 6)).answer == "benefit"
    noise = [fig(0.0, 0.2, 6, primary=False, name="n%d" % i) for i in range(4)]
    v = rv.decide([fig(0.0, 0.001, 6), s] + noise)
    assert v[1].p_diff == pytest.approx(5 * s.p_diff())
    assert v[1].answer.startswith("inconclusive")


def test_rule3_difference_benefit_and_cost():
    # +10 % with a 2 % spread over 5 pairs: the 95 % interval excludes 1
    f = fig(math.log(1.10), 0.02, 5)
    lo, hi = f.interval()
    assert 1 < lo < 1.10 < hi
    assert only(f).answer == "benefit"
    assert only(fig(math.log(1.10), 0.02, 5, better="lower")).answer == "cost"
    assert only(fig(math.log(0.90), 0.02, 5, better="lower")).answer == "benefit"
    assert "spread" in only(f).change


def test_rule4_equivalence_tost():
    # +1 % with a 1 % spread: the 90 % interval is inside +/-5 %
    f = fig(math.log(1.01), 0.01, 6)
    lo, hi = f.interval(0.90)
    assert 0.95 < lo and hi < 1.05
    assert only(f).answer == "equivalent (within \u00b15 %)"
    # the same data against a 1 % margin is not equivalent
    assert not only(fig(math.log(1.01), 0.01, 6, margin=1.0)).answer.startswith("equivalent")
    # a difference shown inside the margin is an equivalence
    g = fig(math.log(1.02), 0.002, 6)
    assert g.p_diff() < 0.05 and only(g).answer.startswith("equivalent")
    # an interval that merely crosses 1 is not equivalence
    w = fig(0.0, 0.3, 5)
    assert w.interval()[0] < 1 < w.interval()[1]
    assert only(w).answer.startswith("inconclusive")


def test_rule5_inconclusive_with_a_power_estimate():
    # +8 % with a 20 % spread over 3 pairs: neither test succeeds
    f = fig(math.log(1.08), 0.20, 3)
    v = only(f)
    need = v.need
    assert v.answer == "inconclusive (need about %d pairs)" % need
    # the normal approximation ((z.975 + z.8) * sd / d)^2, a little below the t answer
    z = statistics.NormalDist()
    approx = ((z.inv_cdf(0.975) + z.inv_cdf(0.8)) * 0.20 / math.log(1.08)) ** 2
    assert approx <= need <= approx * 1.3 + 3
    # with that many pairs of the same mean and spread the answer is called
    assert only(fig(math.log(1.08), 0.20, need)).answer == "benefit"
    # a mean near 0 asks for the pairs that show equivalence
    e = only(fig(0.0, 0.05, 3))
    assert e.answer.startswith("inconclusive")
    assert only(fig(0.0, 0.05, e.need)).answer.startswith("equivalent")
    # one pair: no interval at all
    assert rv.Figure("x", "higher", [0.1], primary=True).interval() is None
    assert only(rv.Figure("x", "higher", [0.1], primary=True)).answer.startswith("inconclusive")


def test_rule6_quiet_machine():
    quiet = dict(pairs=5, load_before=0.3, steal_pct=0.0, foreign_pct=2.0)
    assert rv.quiet(quiet, ncpu=2) == []
    assert rv.quiet(dict(quiet, pairs=3), 2) == ["3 pairs, fewer than 5"]
    assert "1-min load 3.90" in rv.quiet(dict(quiet, load_before=3.9), 2)[0]
    assert "steal" in rv.quiet(dict(quiet, steal_pct=7.5), 2)[0]
    assert "other processes" in rv.quiet(dict(quiet, foreign_pct=40), 2)[0]
    assert rv.quiet(dict(quiet, load_before=3.9), 2, max_load=4) == []
    assert rv.quiet(dict(quiet, steal_pct=None, foreign_pct=None), 2) == []
    busy, steal, total = rv.read_cpu_jiffies(
        "cpu  100 5 50 800 20 3 2 15 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    assert (busy, steal, total) == (160, 15, 995)


def test_cpu_meter_arithmetic(monkeypatch):
    """Made-up samples: other processes' CPU is busy time less ours and the
    kernel threads', these thread by thread (one ends, one starts)."""
    snaps = iter([
        (dict(busy=1000, steal=0, total=2000, mine=100, kthreads={5: 50, 6: 10}), 0.5),
        (dict(busy=1600, steal=20, total=3000, mine=400, kthreads={5: 150, 7: 30}), 1.5),
        (dict(busy=1700, steal=20, total=4000, mine=450, kthreads={5: 160, 7: 30}), 1.0),
    ])
    m = rv.CpuMeter(1)
    monkeypatch.setattr(m, "_snapshot", lambda: next(snaps))
    a = m.sample()
    b = m.sample()
    f = m.figures(a, b)
    assert f["steal_pct"] == pytest.approx(2.0)
    assert f["foreign_pct"] == pytest.approx(17.0)         # (600 - 300 - 130) / 1000
    assert (f["load_max"], f["load_median"]) == (1.5, 1.0)
    c = m.sample()
    assert m.figures(b, c)["foreign_pct"] == pytest.approx(4.0)     # (100 - 50 - 10) / 1000
    assert m.figures()["foreign_pct"] == pytest.approx(10.5)        # (700 - 350 - 140) / 2000
    assert m.figures(b, c)["load_max"] == 1.5


def test_cpu_meter_counts_itself_as_ours():
    m = rv.CpuMeter(os.getpid())
    m.sample()
    x = 0
    for i in range(3000000):    # our own CPU time is not other processes'
        x += i
    m.sample()
    f = m.figures()
    assert f["steal_pct"] is not None and 0 <= f["foreign_pct"] <= 100
    assert f["load_max"] >= 0
