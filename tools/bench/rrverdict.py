# SPDX-License-Identifier: GPL-2.0
"""The verdict rules of `rrbench report`, written once (doc/report/METHOD.md
states them in words; tests/tools/test_rrverdict.py checks each on made-up
data).  Only the Python standard library.

A question (one seed's claim) has figures, each compared between a system
and its baseline over n interleaved pairs as d_i = ln(value_i / baseline_i).
Each figure has a direction (higher or lower is better) and an equivalence
margin M (a percentage: ratios inside [1 - M/100, 1 + M/100] do not matter).

Rule 1 (one primary figure): the workload's definition names the primary
  figure before the run; the question's answer is the primary figure's.
  It is tested at alpha = 0.05 with no correction.
Rule 2 (secondary figures, Holm): every other figure of the question is
  tested too, and its p values (the difference test's and the equivalence
  test's, each family on its own) are Holm-adjusted over the secondary
  figures: sorted ascending, the j-th of k is multiplied by k - j + 1, and
  the adjusted values are made non-decreasing.
Rule 3 (difference): two-sided paired t test of mean d = 0; p < alpha
  (the 95 % interval of the ratio excludes 1) shows a difference: "benefit"
  when it goes the better way, "cost" otherwise.
Rule 4 (equivalence, TOST): two one-sided t tests of d <= ln(1 - M/100) and
  d >= ln(1 + M/100); the larger p < alpha (the 90 % interval lies inside
  the margin) shows "equivalent (within +/-M %)".  A difference shown inside
  the margin is an equivalence: the margin is the smallest change that
  matters.
Rule 5 (inconclusive): otherwise "inconclusive (need about N pairs)", N the
  smallest n at which, were the observed mean and spread the truth, the
  difference or the equivalence test would succeed with 80 % power
  (t quantiles at n - 1 degrees of freedom; secondary figures at alpha / k).
Rule 6 (conditions): verdicts are only called with at least MIN_PAIRS pairs
  on a quiet machine (quiet(): the 1-min load before the run, CPU steal and
  other processes' CPU share during it, each under its threshold); else the
  answer is "not called" with the reason, and the figures are printed anyway.
"""

import math
import os
import statistics

ALPHA = 0.05
POWER = 0.80
MIN_PAIRS = 5
MAX_PAIRS = 10000       # "need about N pairs" stops counting here
DEFAULT_MARGIN = 5.0    # per cent, for a figure whose definition names none

# Quiet-machine thresholds (rule 6); rrbench report's options override them.
MAX_LOAD_PER_CPU = 0.5      # 1-min load average before the first run, per CPU
MAX_STEAL_PCT = 5.0         # CPU steal during the runs, % of all CPU time
MAX_FOREIGN_PCT = 10.0      # other processes' CPU during the runs, % of all CPU time


# ---- Student's t distribution (no SciPy) ----

def _betacf(a, b, x):
	"""Continued fraction of the regularized incomplete beta (modified Lentz)."""
	tiny = 1e-300
	c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
	d = 1.0 / (d if abs(d) > tiny else tiny)
	h = d
	for m in range(1, 500):
		m2 = 2 * m
		for num in (m * (b - m) * x / ((a + m2 - 1) * (a + m2)),
			    -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1))):
			d = 1.0 + num * d
			d = 1.0 / (d if abs(d) > tiny else tiny)
			c = 1.0 + num / c
			c = c if abs(c) > tiny else tiny
			h *= d * c
		if abs(d * c - 1.0) < 1e-15:
			break
	return h


def _ibeta(a, b, x):
	if x <= 0:
		return 0.0
	if x >= 1:
		return 1.0
	lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
	if x < (a + 1) / (a + b + 2):
		return math.exp(lbt) * _betacf(a, b, x) / a
	return 1.0 - math.exp(lbt) * _betacf(b, a, 1 - x) / b


def t_cdf(t, df):
	"""P(T <= t), T Student's t with df degrees of freedom."""
	tail = 0.5 * _ibeta(df / 2, 0.5, df / (df + t * t))
	return 1 - tail if t > 0 else tail


def t_ppf(p, df):
	"""The p quantile of Student's t (bisection on t_cdf)."""
	lo, hi = -1e4, 1e4
	for _ in range(70):
		mid = (lo + hi) / 2
		if t_cdf(mid, df) < p:
			lo = mid
		else:
			hi = mid
	return (lo + hi) / 2


# ---- one figure ----

class Figure:
	"""One figure of a question: the paired log ratios and what they mean."""

	def __init__(self, name, better, logs, margin=DEFAULT_MARGIN, primary=False):
		assert better in ("higher", "lower")
		self.name, self.better, self.margin, self.primary = name, better, margin, primary
		self.logs = list(logs)
		self.n = len(self.logs)
		self.mean = statistics.fmean(self.logs) if self.logs else 0.0
		self.sd = statistics.stdev(self.logs) if self.n > 1 else 0.0
		self.lo_eq = math.log(1 - margin / 100)
		self.hi_eq = math.log(1 + margin / 100)

	@classmethod
	def from_pairs(cls, name, better, pairs, **kw):
		"""pairs: [(value, baseline value)]; pairs with a value <= 0 are left out."""
		return cls(name, better, [math.log(x / b) for x, b in pairs if x > 0 and b > 0], **kw)

	def se(self):
		return self.sd / math.sqrt(self.n)

	def ratio(self):
		return math.exp(self.mean) if self.n else None

	def interval(self, level=0.95):
		"""The ratio's two-sided interval at level, (lo, hi); None under 2 pairs."""
		if self.n < 2:
			return None
		half = t_ppf(1 - (1 - level) / 2, self.n - 1) * self.se()
		return math.exp(self.mean - half), math.exp(self.mean + half)

	def p_diff(self):
		"""Two-sided p of the paired t test of no difference (1.0 under 2 pairs)."""
		if self.n < 2:
			return 1.0
		if self.se() == 0:
			return 0.0 if self.mean else 1.0
		return 2 * (1 - t_cdf(abs(self.mean) / self.se(), self.n - 1))

	def p_equiv(self):
		"""TOST: the larger one-sided p of 'below the lower margin' and 'above the upper'."""
		if self.n < 2:
			return 1.0
		if self.se() == 0:
			return 0.0 if self.lo_eq < self.mean < self.hi_eq else 1.0
		df = self.n - 1
		p_low = 1 - t_cdf((self.mean - self.lo_eq) / self.se(), df)
		p_high = t_cdf((self.mean - self.hi_eq) / self.se(), df)
		return max(p_low, p_high)

	def good_direction(self):
		return (self.mean > 0) == (self.better == "higher")

	def pairs_needed(self, alpha=ALPHA, power=POWER):
		"""The smallest n at which, with the observed mean and spread as the
		truth, the difference or the equivalence test succeeds with the
		given power; MAX_PAIRS if neither would below it."""
		d, s = abs(self.mean), self.sd
		if s == 0:
			return max(2, self.n)
		bound = self.hi_eq if self.mean >= 0 else -self.lo_eq

		def enough(n):
			df = n - 1
			se = s / math.sqrt(n)
			tb = t_ppf(power, df)
			return ((d > 0 and (t_ppf(1 - alpha / 2, df) + tb) * se <= d) or
				(d < bound and d + (t_ppf(1 - alpha, df) + tb) * se <= bound))

		# enough(n) only turns true as n grows: double, then bisect
		hi = 2
		while not enough(hi):
			if hi >= MAX_PAIRS:
				return MAX_PAIRS
			hi = min(2 * hi, MAX_PAIRS)
		lo = hi // 2
		while lo + 1 < hi:
			mid = (lo + hi) // 2
			lo, hi = (lo, mid) if enough(mid) else (mid, hi)
		return max(hi, 2)


def holm(ps):
	"""Holm's step-down adjustment of the p values ps (same order out)."""
	k = len(ps)
	order = sorted(range(k), key=lambda i: ps[i])
	adj, running = [0.0] * k, 0.0
	for j, i in enumerate(order):
		running = max(running, min(1.0, (k - j) * ps[i]))
		adj[i] = running
	return adj


class Verdict:
	def __init__(self, fig, answer, p_diff, p_equiv, need, change):
		self.figure, self.answer = fig, answer
		self.p_diff, self.p_equiv = p_diff, p_equiv     # adjusted for secondary figures
		self.need, self.change = need, change


def _answer(fig, p_diff, p_equiv, alpha):
	if fig.n < 2:
		return "inconclusive (need about %d pairs)" % MIN_PAIRS, MIN_PAIRS
	if p_equiv < alpha:
		return "equivalent (within \u00b1%g %%)" % fig.margin, None
	if p_diff < alpha:
		return ("benefit" if fig.good_direction() else "cost"), None
	need = fig.pairs_needed(alpha)
	more = "more than" if need >= MAX_PAIRS else "about"
	return "inconclusive (need %s %d pairs)" % (more, need), need


def _change(fig, answer, need, alpha):
	"""What would change the answer, in words."""
	if answer.startswith("inconclusive"):
		return ("%d pairs at this spread" % need) if need < MAX_PAIRS else \
			"a smaller spread (the mean sits on the margin)"
	se = fig.se()
	if answer.startswith("equivalent"):
		room = min(fig.hi_eq - fig.mean, fig.mean - fig.lo_eq)
		k = room / (t_ppf(1 - alpha, fig.n - 1) * se) if se else float("inf")
		return "a mean outside \u00b1%g %%, or %s the spread" % (
			fig.margin, ("%.1fx" % k) if k != float("inf") else "any")
	k = abs(fig.mean) / (t_ppf(1 - alpha / 2, fig.n - 1) * se) if se else float("inf")
	return "%s the spread (then the interval reaches 1)" % (
		("%.1fx" % k) if k != float("inf") else "any")


def decide(figures, alpha=ALPHA):
	"""Verdicts of a question's figures: exactly one primary (rules 1-5)."""
	prim = [f for f in figures if f.primary]
	if len(prim) != 1:
		raise ValueError("a question needs exactly one primary figure, has %d" % len(prim))
	sec = [f for f in figures if not f.primary]
	pd = holm([f.p_diff() for f in sec])
	pe = holm([f.p_equiv() for f in sec])
	out = []
	for f in figures:
		if f.primary:
			p_d, p_e, a = f.p_diff(), f.p_equiv(), alpha
		else:
			i = sec.index(f)
			p_d, p_e, a = pd[i], pe[i], alpha / len(sec)
		answer, need = _answer(f, p_d, p_e, alpha)
		if need is not None and not f.primary and f.n >= 2:
			# power for the Holm worst case: alpha / k
			need = f.pairs_needed(a)
			answer = "inconclusive (need %s %d pairs)" % (
				"more than" if need >= MAX_PAIRS else "about", need)
		out.append(Verdict(f, answer, p_d, p_e, need, _change(f, answer, need, alpha)))
	return out


# ---- rule 6: the machine ----

def read_cpu_jiffies(stat_text):
	"""(busy, steal, total) jiffies summed over CPUs from /proc/stat's first line."""
	a = [int(x) for x in stat_text.splitlines()[0].split()[1:]]
	user, nice, system, idle, iowait, irq, softirq = a[:7]
	steal = a[7] if len(a) > 7 else 0
	busy = user + nice + system + irq + softirq
	return busy, steal, busy + steal + idle + iowait


def quiet(c, ncpu, min_pairs=MIN_PAIRS, max_load=None, max_steal=MAX_STEAL_PCT,
	  max_foreign=MAX_FOREIGN_PCT):
	"""Reasons not to call verdicts ([] when quiet).  c: dict with pairs, load_before,
	steal_pct, foreign_pct (None when not measured)."""
	max_load = MAX_LOAD_PER_CPU * ncpu if max_load is None else max_load
	why = []
	if c["pairs"] < min_pairs:
		why.append("%d pairs, fewer than %d" % (c["pairs"], min_pairs))
	if c["load_before"] > max_load:
		why.append("1-min load %.2f before the run, above %.2f" % (c["load_before"], max_load))
	if c.get("steal_pct") is not None and c["steal_pct"] > max_steal:
		why.append("CPU steal %.1f %% during the run, above %g %%" % (c["steal_pct"], max_steal))
	if c.get("foreign_pct") is not None and c["foreign_pct"] > max_foreign:
		why.append("other processes took %.1f %% of the CPUs during the run, above %g %%"
			   % (c["foreign_pct"], max_foreign))
	return why


PF_KTHREAD = 0x00200000


def _proc_stat(pid):
	"""(ppid, flags, utime + stime + cutime + cstime) of /proc/PID/stat, or None."""
	try:
		with open("/proc/%s/stat" % pid) as f:
			a = f.read().rsplit(")", 1)[1].split()
	except (OSError, IndexError):
		return None
	return int(a[1]), int(a[6]), sum(int(x) for x in a[11:15])


class CpuMeter:
	"""The machine while rrbench runs: 1-min load, CPU steal and the CPU time
	of processes that are neither ours (this process, its descendants, the
	children it reaped) nor kernel threads (loop workers, writeback: they
	serve everyone), from /proc/stat and /proc/PID/stat.  Samples (sample(),
	from any thread) add up what happened since the one before: kernel
	threads come and go, so theirs is counted thread by thread (a thread
	that ended since the last sample loses its last interval: sample often)."""

	KEYS = ("busy", "steal", "total", "mine", "kthreads")

	def __init__(self, me):
		import threading
		self.me = me
		self.loads = []
		self.lock = threading.Lock()
		self.prev = None
		self.acc = dict.fromkeys(self.KEYS, 0)
		self.first = self.last = None

	def _snapshot(self):
		with open("/proc/stat") as f:
			busy, steal, total = read_cpu_jiffies(f.read())
		procs = {}
		for d in os.listdir("/proc"):
			if d.isdigit():
				st = _proc_stat(d)
				if st:
					procs[int(d)] = st
		mine, kthreads = 0, {}
		for pid, (ppid, flags, t) in procs.items():
			if flags & PF_KTHREAD:
				kthreads[pid] = t
				continue
			p, seen = pid, 0
			while p and p != self.me and p in procs and seen < 64:
				p, seen = procs[p][0], seen + 1
			if p == self.me:
				mine += t
		with open("/proc/loadavg") as f:
			load = float(f.read().split()[0])
		return dict(busy=busy, steal=steal, total=total, mine=mine, kthreads=kthreads), load

	def sample(self):
		"""Take a sample; returns the running totals (a mark for figures())."""
		snap, load = self._snapshot()
		with self.lock:
			self.loads.append(load)
			a = self.prev
			if a is not None:
				for k in ("busy", "steal", "total", "mine"):
					self.acc[k] += snap[k] - a[k]
				self.acc["kthreads"] += sum(t - a["kthreads"].get(pid, 0)
							    for pid, t in snap["kthreads"].items())
			self.prev = snap
			mark = dict(self.acc, nload=len(self.loads))
			if self.first is None:
				self.first = mark
			self.last = mark
			return mark

	def figures(self, a=None, b=None):
		"""steal_pct, foreign_pct between marks a and b (default: the first
		and the last sample; None before two), load_max and load_median of
		the 1-min loads sampled between them."""
		a, b = a or self.first, b or self.last
		loads = self.loads[a["nload"] - 1:b["nload"]] if a and b else self.loads
		out = dict(steal_pct=None, foreign_pct=None,
			   load_max=max(loads) if loads else None,
			   load_median=statistics.median(loads) if loads else None)
		if a is None or b is a or b["total"] <= a["total"]:
			return out
		total = b["total"] - a["total"]
		foreign = (b["busy"] - a["busy"]) - (b["mine"] - a["mine"]) - (b["kthreads"] - a["kthreads"])
		out["steal_pct"] = 100.0 * (b["steal"] - a["steal"]) / total
		out["foreign_pct"] = min(100.0, max(0.0, 100.0 * foreign / total))
		return out
