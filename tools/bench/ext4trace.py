"""ext4's allocation tracepoints as records: the one parser for a tracefs
text capture of the kernel's ext4 (``cat /sys/kernel/tracing/trace``, or
``trace_pipe``) and for rrfuse's ``-o alloc_trace=FILE``, which writes the
same lines.

Five events are read, with the fields and order Linux 6.18 prints
(``/sys/kernel/tracing/events/ext4/EVENT/format``):

  ext4_request_blocks    dev M,N ino I flags F len L lblk B goal G
                         lleft A lright B pleft P pright Q
  ext4_mballoc_alloc     dev M,N inode I orig g/s/l@b goal g/s/l@b
                         result g/s/l@b blks N grps N cr CR flags F
                         tail N broken N
  ext4_mballoc_prealloc  dev M,N inode I orig g/s/l@b result g/s/l@b
  ext4_free_blocks       dev M,N ino I mode 0M block B count C flags F
  ext4_discard_preallocations  dev M,N ino I len: N
                         (a file's preallocations dropped: what a replay needs)

Other lines (comments, other events) are skipped; ``parse(..., strict=True)``
refuses a line of these four that does not have their shape.  Each record
is a dict: the line head's ``task``, ``pid``, ``cpu``, ``ts`` (seconds) and
``event``, then the event's fields as ints (``dev`` a ``(major, minor)``
pair; ``flags`` and ``cr`` as the text printed, flags also split into the
set ``flagset``; extents as ``{"group", "start", "len", "lblk"}``).

Used as a program: ``ext4trace.py FILE [--dev M,N]`` prints the count of
each event and the blocks requested, found and freed.
"""
import collections
import re
import sys

EVENTS = ("ext4_request_blocks", "ext4_mballoc_alloc", "ext4_mballoc_prealloc", "ext4_free_blocks",
          "ext4_discard_preallocations")

# tracefs's head: task-pid (the task's name may hold spaces and dashes; the pid is the last
# "-digits"), [cpu], the flag columns (4 on kernels before 5.16, 5 after), timestamp.
HEAD = re.compile(r"^\s*(?P<task>.*?)-(?P<pid>\d+)\s+(?:\(\s*[-\d]+\)\s+)?\[(?P<cpu>\d+)\]\s+"
                  r"(?:(?P<flags>\S{4,5})\s+)?(?P<ts>\d+\.\d+):\s+(?P<event>\w+):\s?(?P<rest>.*)$")

EXT = r"(\d+)/(-?\d+)/(\d+)@(\d+)"
BODY = {
    "ext4_request_blocks": re.compile(
        r"dev (\d+),(\d+) ino (\d+) flags (\S*) ?len (\d+) lblk (\d+) goal (\d+) "
        r"lleft (\d+) lright (\d+) pleft (\d+) pright (\d+)\s*$"),
    "ext4_mballoc_alloc": re.compile(
        r"dev (\d+),(\d+) inode (\d+) orig %s goal %s result %s blks (\d+) grps (\d+) "
        r"cr (\S+) flags (\S*) ?tail (\d+) broken (\d+)\s*$" % (EXT, EXT, EXT)),
    "ext4_mballoc_prealloc": re.compile(
        r"dev (\d+),(\d+) inode (\d+) orig %s result %s\s*$" % (EXT, EXT)),
    "ext4_free_blocks": re.compile(
        r"dev (\d+),(\d+) ino (\d+) mode (0[0-7]*) block (\d+) count (\d+) flags (\S*)\s*$"),
    "ext4_discard_preallocations": re.compile(r"dev (\d+),(\d+) ino (\d+) len: (\d+)\s*$"),
}


def _ext(v):
    g, s, n, b = v
    return {"group": int(g), "start": int(s), "len": int(n), "lblk": int(b)}


def _flagset(text):
    return frozenset(f for f in text.split("|") if f)


def _fields(event, m):
    v = m.groups()
    rec = {"dev": (int(v[0]), int(v[1])), "ino": int(v[2])}
    if event == "ext4_request_blocks":
        rec.update(flags=v[3], len=int(v[4]), lblk=int(v[5]), goal=int(v[6]), lleft=int(v[7]),
                   lright=int(v[8]), pleft=int(v[9]), pright=int(v[10]))
    elif event == "ext4_mballoc_alloc":
        rec.update(orig=_ext(v[3:7]), goal=_ext(v[7:11]), result=_ext(v[11:15]), blks=int(v[15]),
                   grps=int(v[16]), cr=v[17], flags=v[18], tail=int(v[19]), broken=int(v[20]))
    elif event == "ext4_mballoc_prealloc":
        rec.update(orig=_ext(v[3:7]), result=_ext(v[7:11]))
    elif event == "ext4_discard_preallocations":
        rec.update(len=int(v[3]))
    else:
        rec.update(mode=int(v[3], 8), block=int(v[4]), count=int(v[5]), flags=v[6])
    rec["flagset"] = _flagset(rec.get("flags", ""))
    return rec


def parse_line(line, strict=False):
    """The record of one line, or None for a line that is none of the four events."""
    h = HEAD.match(line.rstrip("\n"))
    if not h or h.group("event") not in BODY:
        return None
    m = BODY[h.group("event")].match(h.group("rest"))
    if not m:
        if strict:
            raise ValueError("not the kernel's %s line: %r" % (h.group("event"), line))
        return None
    rec = {"task": h.group("task").strip(), "pid": int(h.group("pid")), "cpu": int(h.group("cpu")),
           "ts": float(h.group("ts")), "event": h.group("event")}
    rec.update(_fields(rec["event"], m))
    return rec


def parse(lines, dev=None, strict=False):
    """Records of an iterable of lines (or a file's path), in order; dev (major, minor) keeps one device's."""
    if isinstance(lines, str):
        with open(lines) as f:
            return parse(f, dev, strict)
    out = []
    for line in lines:
        rec = parse_line(line, strict)
        if rec and (dev is None or rec["dev"] == tuple(dev)):
            out.append(rec)
    return out


def placed(rec):
    """The blocks a request itself got, as {"group", "start", "len", "lblk"}, from its
    ext4_mballoc_alloc or ext4_mballoc_prealloc record: the result may be a whole
    preallocation window, of which the request's logical blocks take their part (a
    locality group's window, HINT_GRP_ALLOC, is taken from its front)."""
    o, r = rec["orig"], rec["result"]
    if rec["event"] == "ext4_mballoc_prealloc" or "HINT_GRP_ALLOC" in rec["flagset"]:
        return {"group": r["group"], "start": r["start"], "len": min(o["len"], r["len"]), "lblk": o["lblk"]}
    lo = max(o["lblk"], r["lblk"])
    hi = min(o["lblk"] + o["len"], r["lblk"] + r["len"])
    return {"group": r["group"], "start": r["start"] + lo - r["lblk"], "len": max(hi - lo, 0), "lblk": lo}


def data_requests(recs):
    """Each data request (ext4_request_blocks with HINT_DATA) with the answer the
    allocator gave it: [{"req": record, "ans": record or None, "placed": extent or
    None}], in the trace's order.  A request and its answer are on one task (the
    answer is traced as the allocation context is released, after any other
    task's lines may have come between), and the answer's ``orig`` repeats the
    request's logical block: the answer is the next one of that (pid, inode,
    logical block).  Metadata requests (extent-tree nodes, directories: no
    HINT_DATA on the kernel's side, inode 0 on rrfuse's) are left out: the two
    sides do not name them alike."""
    out, waiting = [], {}
    for r in recs:
        if r["event"] == "ext4_request_blocks":
            if "HINT_DATA" in r["flagset"]:
                e = {"req": r, "ans": None, "placed": None}
                out.append(e)
                waiting.setdefault((r["pid"], r["ino"], r["lblk"]), []).append(e)
        elif r["event"] in ("ext4_mballoc_alloc", "ext4_mballoc_prealloc"):
            q = waiting.get((r["pid"], r["ino"], r["orig"]["lblk"]))
            if q:
                e = q.pop(0)
                e["ans"], e["placed"] = r, placed(r)
    return out


def pair(ka, kb):
    """Pairs the data requests of two traces of one workload (kernel's: ka,
    rrfuse's: kb; lists from data_requests) by (inode, logical block).

    Concurrency reorders requests: two writers' requests interleave differently
    on each side, and a flusher's turn falls elsewhere, so pairing is by key and
    never by position.  A key asked more than once (a file rewritten, an inode
    number reused after a delete, a request answered short and asked again for
    its rest is another key) is paired in order of occurrence per key: the n-th
    request for a key on one side with the n-th on the other.  What is left on
    either side is unpaired.  Returns [(a, b)] in the order of ka, and the
    unpaired of each side."""
    by_key = {}
    for e in kb:
        by_key.setdefault((e["req"]["ino"], e["req"]["lblk"]), []).append(e)
    pairs, only_a = [], []
    for e in ka:
        q = by_key.get((e["req"]["ino"], e["req"]["lblk"]))
        if q:
            pairs.append((e, q.pop(0)))
        else:
            only_a.append(e)
    left = {id(e) for q in by_key.values() for e in q}
    only_b = [e for e in kb if id(e) in left]
    return pairs, only_a, only_b


def _place(e):
    return (e["placed"]["group"], e["placed"]["start"])


def _same(a, b, what):
    pa, pb = a["placed"], b["placed"]
    if pa is None or pb is None:
        return pa is None and pb is None
    if what == "start":
        return (pa["group"], pa["start"]) == (pb["group"], pb["start"])
    return pa[what] == pb[what]


def _how(e):
    return "prealloc" if e["ans"]["event"] == "ext4_mballoc_prealloc" else e["ans"]["cr"]


def describe(e):
    """One request and where it went: ino 12 lblk 0 len 16 -> 1/2048+16 (prealloc)."""
    r, p = e["req"], e["placed"]
    head = "ino %d lblk %d len %d goal %d" % (r["ino"], r["lblk"], r["len"], r["goal"])
    if p is None:
        return head + " -> (no answer)"
    return head + " -> %d/%d+%d (%s)" % (p["group"], p["start"], p["len"], _how(e))


def compare(kernel_recs, rrfuse_recs, context=2):
    """Request-by-request comparison of two traces of one workload: counts, the
    shares of paired requests placed at the same start, in the same group and
    with the same length, and the first divergence (in the kernel's order) with
    the requests around it on both sides."""
    ka, kb = data_requests(kernel_recs), data_requests(rrfuse_recs)
    pairs, only_a, only_b = pair(ka, kb)
    n = len(pairs)
    res = {"kernel_requests": len(ka), "rrfuse_requests": len(kb), "paired": n,
           "unpaired_kernel": len(only_a), "unpaired_rrfuse": len(only_b)}
    for what in ("start", "group", "len"):
        same = sum(_same(a, b, what) for a, b in pairs)
        res["same_" + what] = same
        res["same_%s_pct" % what] = round(100.0 * same / n, 1) if n else None
    # Of the requests placed alike, those answered alike too: by the same event (a search,
    # or a preallocation's use), a search by the same criterion, as its trace names it.
    alike = [(a, b) for a, b in pairs if _same(a, b, "start") and a["placed"]]
    res["same_how"] = sum(_how(a) == _how(b) for a, b in alike)
    res["same_how_pct"] = round(100.0 * res["same_how"] / len(alike), 1) if alike else None
    # The places chosen, whoever got each: where concurrency serves two files' requests in
    # another order than on the kernel, each file takes the place the other took there.
    left = collections.Counter(_place(a) for a, _ in pairs if a["placed"])
    res["same_place"] = 0
    for _, b in pairs:
        if b["placed"] and left[_place(b)]:
            left[_place(b)] -= 1
            res["same_place"] += 1
    res["same_place_pct"] = round(100.0 * res["same_place"] / n, 1) if n else None
    res["first_divergence"] = None
    for i, (a, b) in enumerate(pairs):
        if not _same(a, b, "start"):
            lo, hi = max(0, i - context), min(n, i + context + 1)
            res["first_divergence"] = {
                "index": i, "of": n,
                "around": [{"mark": "> " if j == i else "  ", "kernel": describe(pairs[j][0]),
                            "rrfuse": describe(pairs[j][1])} for j in range(lo, hi)]}
            break
    for name, side in (("first_unpaired_kernel", only_a), ("first_unpaired_rrfuse", only_b)):
        res[name] = [describe(e) for e in side[:context + 1]]
    return res


def summary(recs):
    """Counts by event, and the blocks requested, found by searches, used from preallocations and freed."""
    s = {e: 0 for e in EVENTS}
    for r in recs:
        s[r["event"]] += 1
    s["requested"] = sum(r["len"] for r in recs if r["event"] == "ext4_request_blocks")
    s["found"] = sum(r["result"]["len"] for r in recs if r["event"] == "ext4_mballoc_alloc")
    s["from_prealloc"] = sum(r["result"]["len"] for r in recs if r["event"] == "ext4_mballoc_prealloc")
    s["freed"] = sum(r["count"] for r in recs if r["event"] == "ext4_free_blocks")
    return s


def main(argv):
    dev = None
    if len(argv) == 4 and argv[2] == "--dev":
        dev = tuple(int(x) for x in argv[3].split(","))
    elif len(argv) != 2:
        sys.stderr.write("usage: ext4trace.py FILE [--dev MAJOR,MINOR]\n")
        return 2
    for k, v in summary(parse(argv[1], dev, strict=True)).items():
        print("%s %d" % (k, v))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
