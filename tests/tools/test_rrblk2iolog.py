"""rrblk2iolog: blkparse's text (and the ftrace blk tracer's) as fio iolog v3.

Parser cases on hand-written blkparse lines; then a real trace of the
kernel's ext4 on a loop device (blktrace + blkparse where the kernel lets
blktrace open its relay files, else the kernel's own blk tracer in tracefs,
which prints the same events), converted, checked against what was written,
and replayed by fio.  The real trace needs root and loop devices."""
import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import REPO, RRFTL, mh, run

TOOL = os.path.join(REPO, "tools", "rrblk2iolog")

# blkparse's default format: dev cpu seq time pid action rwbs extent [proc]
SAMPLE = """\
  7,0    1        1     0.000000000  4242  Q  WS 2048 + 256 [dd]
  7,0    1        2     0.000004000  4242  G  WS 2048 + 256 [dd]
  7,0    1        3     0.000010000  4242  D  WS 2048 + 256 [dd]
  7,0    0        4     0.000500000     0  C  WS 2048 + 256 [0]
  7,0    1        5     0.001000000  4242  Q  RM 8 + 8 [dd]
  7,0    1        6     0.001002000  4242  D  RM 8 + 8 [dd]
  7,0    1        7     0.002000000   811  D FWFSM 4096 + 8 [jbd2/loop0-8]
  7,0    1        8     0.003000000   811  D  FN [kworker/1:1H]
  7,0    1        9     0.004000000  4242  D  DS 10240 + 2048 [fstrim]
  7,0    1       10     0.005000000  4242  D  N 0 (12 34) [dd]
CPU0 (7,0):
 Reads Queued:           1,        4KiB\t Writes Queued:           1,      128KiB
Total (7,0):
 Events (7,0): 10 entries
"""

FTRACE = """\
# tracer: blk
#
              dd-14572   [000] d..1.  7706.036104:   7,0    Q  WS 33112 + 8192 [dd]
              dd-14572   [000] d..1.  7706.036113:   7,0    D  WS 33112 + 2560 [dd]
    kworker/0:1H-46      [000] d..1.  7706.048487:   7,0    D  FN [kworker/0:1H]
"""


def conv(tmp_path, text, *args, ok=(0,)):
    src = tmp_path / "in.txt"
    src.write_text(text)
    out = tmp_path / "out.log"
    r = run([TOOL, str(src), "-o", str(out)] + list(args), ok=ok)
    if r.returncode:
        return r, None, None
    return r, out.read_text().splitlines(), (tmp_path / "out.log.kinds").read_text().splitlines()


def test_blkparse_lines(tmp_path):
    _, log, kinds = conv(tmp_path, SAMPLE, "--device", "/dev/x")
    assert log == [
        "fio version 3 iolog",
        "0 /dev/x add",
        "0 /dev/x open",
        "0 /dev/x write 1048576 131072",
        "992 /dev/x read 4096 4096",
        "1990 /dev/x sync 0 0",             # the preflush
        "1990 /dev/x write 2097152 4096",
        "1990 /dev/x sync 0 0",             # FUA
        "2990 /dev/x sync 0 0",             # an empty flush
        "3990 /dev/x trim 5242880 1048576",
        "4990 /dev/x close",
    ]
    # as rrfuse's FILE.kinds: a letter for every line after "add"
    assert kinds == ["-", "d", "m", "-", "m", "-", "-", "-", "-"]
    assert len(kinds) == len(log) - 2


def test_queue_and_completion_events(tmp_path):
    _, log, _ = conv(tmp_path, SAMPLE, "--event", "Q", "--device", "d")
    assert [l.split()[2:] for l in log[3:-1]] == [["write", "1048576", "131072"],
                                                  ["read", "4096", "4096"]]
    _, log, _ = conv(tmp_path, SAMPLE, "--event", "C", "--device", "d")
    assert log[3] == "0 d write 1048576 131072" and len(log) == 5


def test_ftrace_blk_tracer_lines(tmp_path):
    _, log, _ = conv(tmp_path, FTRACE)
    assert log[1] == "0 /dev/block/7:0 add"
    assert log[3] == "0 /dev/block/7:0 write %d %d" % (33112 * 512, 2560 * 512)
    assert log[4] == "12374 /dev/block/7:0 sync 0 0"


def test_no_events_and_several_devices(tmp_path):
    r, _, _ = conv(tmp_path, "nothing here\n", ok=(1,))
    assert "no D events" in r.stderr
    two = SAMPLE + "  8,0    0       11     0.006000000     1  D  W 0 + 8 [x]\n"
    r, _, _ = conv(tmp_path, two, ok=(2,))
    assert "--dev" in r.stderr
    _, log, _ = conv(tmp_path, two, "--dev", "8,0")
    assert log[3].endswith("write 0 4096") and len(log) == 5


def _kernel_trace(img, mnt, workdir):
    """Write 8 MiB with dd on the kernel's ext4 over a loop device of img,
    traced; returns (text, how)."""
    dev = subprocess.run(["losetup", "-f", "--show", img], capture_output=True, text=True,
                         check=True).stdout.strip()
    name = os.path.basename(dev)
    how = None
    bt = None
    tracing = "/sys/kernel/tracing"
    try:
        subprocess.run(["mount", "-t", "ext4", dev, mnt], check=True)
        if shutil.which("blktrace") and shutil.which("blkparse"):
            bt = subprocess.Popen(["blktrace", "-d", dev, "-o", "bt", "-D", workdir],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            time.sleep(1)
            if bt.poll() is None:
                how = "blktrace"
        if how is None:
            if not os.path.exists(tracing + "/trace"):
                subprocess.run(["mount", "-t", "tracefs", "none", tracing])
            if not os.path.exists("/sys/block/%s/trace/enable" % name) or \
               not os.path.exists(tracing + "/current_tracer"):
                pytest.skip("neither blktrace nor the kernel's blk tracer works here")
            for path, val in ((tracing + "/tracing_on", "0"), (tracing + "/trace", ""),
                              ("/sys/block/%s/trace/enable" % name, "1"),
                              (tracing + "/current_tracer", "blk"), (tracing + "/tracing_on", "1")):
                with open(path, "w") as f:
                    f.write(val + "\n")
            how = "ftrace blk tracer"
        subprocess.run(["dd", "if=/dev/zero", "of=" + mnt + "/f", "bs=1M", "count=8",
                        "conv=fsync", "status=none"], check=True)
        os.sync()
        if how == "blktrace":
            bt.send_signal(2)
            bt.wait(timeout=30)
            text = subprocess.run(["blkparse", "-i", "bt", "-D", workdir], capture_output=True,
                                  text=True, check=True).stdout
        else:
            with open(tracing + "/tracing_on", "w") as f:
                f.write("0\n")
            text = open(tracing + "/trace").read()
        return text, how
    finally:
        if bt is not None and bt.poll() is None:
            bt.kill()
            bt.wait()
        if how == "ftrace blk tracer":
            for path, val in ((tracing + "/current_tracer", "nop"),
                              ("/sys/block/%s/trace/enable" % name, "0")):
                with open(path, "w") as f:
                    f.write(val + "\n")
        subprocess.run(["umount", mnt])
        subprocess.run(["losetup", "-d", dev])


def test_kernel_ext4_trace_replays(tmp_path):
    if os.geteuid() != 0 or not mh.loop_works():
        pytest.skip("needs root and loop devices (a kernel ext4 mount on a loop device)")
    if shutil.which("fio") is None:
        pytest.skip("needs fio (apt-get install fio)")
    img = str(tmp_path / "k.img")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["fallocate", "-l", "64M", img], check=True)
    subprocess.run(["mke2fs", "-q", "-t", "ext4", "-b", "4096", "-F", img], check=True)
    text, how = _kernel_trace(img, str(mnt), str(tmp_path))
    src = tmp_path / "blk.txt"
    src.write_text(text)
    out = str(tmp_path / "k.log")
    run([TOOL, str(src), "-o", out, "--device", img])
    lines = open(out).read().splitlines()
    recs = [l.split() for l in lines[3:-1]]
    wrote = sum(int(r[4]) for r in recs if r[2] == "write")
    data = sum(int(r[4]) for r, k in zip(recs, open(out + ".kinds").read().split()[1:])
               if r[2] == "write" and k == "d")
    assert data >= 8 << 20, (how, data)     # the file, and the journal's blocks besides
    assert wrote >= data
    assert any(r[2] == "sync" for r in recs), how   # conv=fsync: the journal commit's flush
    offs = [int(r[3]) + int(r[4]) for r in recs if r[2] in ("read", "write")]
    assert max(offs) <= 64 << 20
    target = str(tmp_path / "replay.img")
    subprocess.run(["truncate", "-s", "64M", target], check=True)
    r = subprocess.run(["fio", "--name=replay", "--read_iolog=" + out, "--replay_redirect=" + target,
                        "--ioengine=psync", "--replay_no_stall=1", "--output-format=json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    job = json.loads(r.stdout[r.stdout.index("{"):])["jobs"][0]
    assert job["write"]["io_bytes"] == wrote, how
    if os.path.exists(RRFTL):
        f = run([RRFTL, out, "--capacity", "64M", "--op", "7"]).stdout
        assert "write amplification:" in f
