"""scripts/orchestration/run_watchdog.py: its checks on their own (RSS slope, file-system
thresholds, stale heartbeat and log, alert command and rate limiting), careless input, signals,
and, on the suite's 2-node SLURM cluster (tests/orchestration/conftest.py), a cancelled job, a
drained node, a completed job and a tmpfs that fills up while it is watched."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import ONE_PROCESS, RANKS, REPO, clean_env, import_script, interrupt_when

pytestmark = RANKS  # starts two or more ranks or SLURM jobs

SCRIPT = "run_watchdog.py"
PATH = REPO / "scripts" / "orchestration" / SCRIPT


@pytest.fixture(scope="module")
def wd():
    return import_script(PATH)


def watchdog_args(wd, *argv):
    return wd.parse_args(list(argv))


# -- units ---------------------------------------------------------------------------------------
def test_rss_slope_of_a_synthetic_series(wd):
    # 2 hours sampled every minute, growing 150 MB/h, with +-20 MB of saw-tooth noise.
    series = [(60.0 * i, 4000 + 150 * i / 60 + (20 if i % 2 else -20)) for i in range(121)]
    assert wd.slope_per_hour(series) == pytest.approx(150, rel=0.02)
    flat = [(60.0 * i, 4000 + (20 if i % 2 else -20)) for i in range(121)]
    assert abs(wd.slope_per_hour(flat)) < 1
    shrinking = [(t, 5000 - v / 10) for t, v in series]
    assert wd.slope_per_hour(shrinking) < 0
    assert wd.slope_per_hour([(0.0, 1.0)]) == 0 == wd.slope_per_hour([(5.0, 1.0), (5.0, 9.0)])


def test_fs_thresholds_above_and_below_the_actual_free_space(wd, tmp_path):
    st = os.statvfs(tmp_path)
    free_gb = st.f_bavail * st.f_frsize / 1e9
    inodes_pct = 100 * st.f_favail / st.f_files
    status, kind, message = wd.fs_status(str(tmp_path), free_gb / 2, inodes_pct / 2)
    assert (status, kind) == ("ok", "ok"), message
    status, kind, message = wd.fs_status(str(tmp_path), free_gb * 2 + 1, inodes_pct / 2)
    assert (status, kind) == ("finding", "space") and "below" in message
    if inodes_pct < 99.9:
        status, kind, _ = wd.fs_status(str(tmp_path), 0, min(100, inodes_pct + 0.1))
        assert (status, kind) == ("finding", "inodes")
    # The same through the command line: a threshold above the free space is exit 3.
    fine = subprocess.run([sys.executable, str(PATH), "--once", "--fs", f"{tmp_path}:{free_gb / 2}"],
                          capture_output=True, text=True, timeout=30, env=clean_env())
    full = subprocess.run([sys.executable, str(PATH), "--once", "--fs", f"{tmp_path}:{free_gb * 2 + 1}:0"],
                          capture_output=True, text=True, timeout=30, env=clean_env())
    assert fine.returncode == 0, fine.stdout + fine.stderr
    assert full.returncode == 3, full.stdout + full.stderr
    assert re.search(rf"finding: fs:{tmp_path}: [\d.e+]+ GB free \(below ", full.stdout), full.stdout


def test_fs_spec_parses_thresholds_and_colons_in_paths(wd):
    assert wd.fs_spec("/data") == ("/data", None, None)
    assert wd.fs_spec("/data:500") == ("/data", 500.0, None)
    assert wd.fs_spec("/data::5") == ("/data", None, 5.0)
    assert wd.fs_spec("/mnt/a:b:10:2") == ("/mnt/a:b", 10.0, 2.0)


def test_heartbeat_and_log_go_stale(wd, tmp_path):
    beat, log = tmp_path / "heartbeat", tmp_path / "train.log"
    beat.touch()
    log.write_text("step 1\n")
    dog = wd.Watchdog(watchdog_args(wd, "--heartbeat", str(beat), "--log", str(log),
                                    "--stale-after", "50"))
    assert dog.progress("heartbeat", str(beat))[0] == "ok"
    assert dog.progress("log", str(log))[0] == "ok"
    old = time.time() - 100
    os.utime(beat, (old, old))
    status, kind, message = dog.progress("heartbeat", str(beat))
    assert (status, kind) == ("finding", "stale")
    assert re.search(r"no progress for (9\d|10\d) s", message), message
    # A log rewritten with the same size is no progress; one that grows is.
    dog.log_size = (log.stat().st_size, time.time() - 100)
    log.write_text("step 2\n")
    assert dog.progress("log", str(log))[:2] == ("finding", "stale")
    log.write_text("step 2\nstep 3\n")
    assert dog.progress("log", str(log))[0] == "ok"
    # Never created: counted from the watchdog's start.
    dog.start -= 100
    assert dog.progress("heartbeat", str(tmp_path / "never"))[:2] == ("finding", "stale")


def alert_dog(wd, tmp_path, *extra):
    return wd.Watchdog(watchdog_args(
        wd, "--fs", str(tmp_path), "--alert-cmd", f"echo \"$WATCHDOG_MESSAGE\" >> {tmp_path}/sent",
        "--events", str(tmp_path / "events.jsonl"), *extra))


def test_alert_rate_limiting_and_recovery(wd, tmp_path, capsys):
    dog = alert_dog(wd, tmp_path, "--realert-after", "3600")
    full = [("fs:/x", "finding", "space", "/x: 1 GB free (below 10 GB)")]
    for _ in range(3):
        assert dog.handle(full) is True
    assert len((tmp_path / "sent").read_text().splitlines()) == 1  # once per --realert-after
    assert dog.handle([("fs:/x", "ok", "ok", "/x: 50 GB free")]) is False
    dog.handle(full)  # a new occurrence after a recovery alerts at once
    dog.handle([("fs:/x", "finding", "inodes", "/x: 1% inodes free")])  # another kind: alerts
    assert len((tmp_path / "sent").read_text().splitlines()) == 3
    dog.args.realert_after = 0
    dog.handle(full)
    assert len((tmp_path / "sent").read_text().splitlines()) == 4
    events = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert {"time", "check", "status", "message"} <= set(events[0])
    assert [e["status"] for e in events].count("alert-sent") == 4
    assert capsys.readouterr().out.count("finding: fs:/x") == 4


def test_alert_command_gets_the_message_in_the_environment_only(wd, tmp_path):
    out = tmp_path / "got"
    dog = wd.Watchdog(watchdog_args(wd, "--fs", str(tmp_path), "--alert-cmd",
                                    f'printf "%s|%s|%s" "$WATCHDOG_MESSAGE" "$WATCHDOG_CHECK" '
                                    f'"$WATCHDOG_STATUS" > {out}'))
    sneaky = f"reason 'x'; touch {tmp_path}/pwned; \"$(touch {tmp_path}/pwned2)\""
    dog.handle([("nodes", "finding", "bad:node1", sneaky)])
    message, check, status = out.read_text().split("|")
    assert message.endswith(f"nodes: {sneaky}") and check == "nodes" and status == "finding"
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()


def test_alert_command_that_fails_or_hangs_is_bounded_and_not_fatal(wd, tmp_path, capsys):
    ok, detail = wd.run_alert("echo no route to host >&2; exit 7", "m", "c", "finding", 10)
    assert not ok and detail == "exited with status 7: no route to host"
    start = time.monotonic()
    # The shell's child (sleep) is killed too: communicate() would wait for its stdout otherwise.
    ok, detail = wd.run_alert("sleep 30; echo late", "m", "c", "finding", 0.5)
    assert time.monotonic() - start < 10
    assert not ok and detail == "did not finish within 0.5 s; killed"
    # A child that left the alert's process group and session (setsid) and keeps its stdout is
    # killed too, and the watchdog does not wait for it (it once waited 60 s).
    start = time.monotonic()
    ok, detail = wd.run_alert(f"setsid sh -c 'echo $$ > {tmp_path}/escaped; sleep 60'", "m", "c", "finding", 1)
    assert time.monotonic() - start < 8
    assert not ok and detail == "did not finish within 1 s; killed"
    escaped = int((tmp_path / "escaped").read_text())
    time.sleep(0.2)
    assert not os.path.exists(f"/proc/{escaped}") or " Z " in open(f"/proc/{escaped}/stat").read(), \
        "the escaped child still runs"
    dog = wd.Watchdog(watchdog_args(wd, "--fs", str(tmp_path), "--alert-cmd", "exit 3",
                                    "--events", str(tmp_path / "ev.jsonl")))
    dog.handle([("heartbeat", "finding", "stale", "no progress for 700 s")])
    assert "warning: alert command exited with status 3" in capsys.readouterr().err
    assert '"alert-failed"' in (tmp_path / "ev.jsonl").read_text()


def test_rss_leak_is_found_in_a_growing_process(tmp_path):
    # A child that grows by 2 MB every 50 ms (about 140 GB/hour) and one that does not.
    grow = subprocess.Popen([sys.executable, "-c", "import time\nb = []\nwhile True:\n"
                             "    b.append(bytearray(2_000_000)); time.sleep(0.05)"])
    flat = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        common = ["--rss-window", "2", "--interval", "0.2", "--max-runtime", "2",
                  "--rss-slope-mb-per-h", "10000"]
        leak = subprocess.run([sys.executable, str(PATH), "--rss-pid", str(grow.pid), *common],
                              capture_output=True, text=True, timeout=30, env=clean_env())
        fine = subprocess.run([sys.executable, str(PATH), "--rss-pid", str(flat.pid), *common],
                              capture_output=True, text=True, timeout=30, env=clean_env())
    finally:
        for proc in (grow, flat):
            proc.kill()
            proc.wait()
    assert leak.returncode == 3, leak.stdout + leak.stderr
    assert re.search(rf"finding: rss: pid {grow.pid} RSS .* above 10000 MB/h, a slow leak",
                     leak.stdout)
    assert fine.returncode == 0, fine.stdout + fine.stderr
    assert "finding" not in fine.stdout
    gone = subprocess.run([sys.executable, str(PATH), "--rss-pid", str(flat.pid), "--once"],
                          capture_output=True, text=True, timeout=30, env=clean_env())
    assert gone.returncode == 2 and "no such process" in gone.stderr


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)],
                         ids=["SIGTERM", "SIGINT"])
def test_signal_ends_the_watch_cleanly(tmp_path, sig, status):
    res = interrupt_when(PATH, ["--fs", str(tmp_path), "--interval", "30", "--json",
                                str(tmp_path / "status.json")],
                         lambda lines: any(" ok: " in line for line in lines), sig, timeout=20)
    assert res.returncode == status, res.stdout + res.stderr
    assert f"{sig.name}: stopped" in res.stdout and "Traceback" not in res.stderr
    last = json.loads((tmp_path / "status.json").read_text())
    assert last["checks"][f"fs:{tmp_path}"]["status"] == "ok"


NO_SQUEUE = {"PATH": os.path.dirname(sys.executable)}  # python, and no SLURM commands
BAD_INPUT = [
    Case("nothing-to-watch", ["--once"], "nothing to watch"),
    Case("fs-missing", ["--fs", "/no/such/dir:10"], "--fs /no/such/dir: does not exist"),
    Case("fs-threshold-text", ["--fs", "/tmp:lots"], r"--fs /tmp:lots: does not exist \(thresholds must be numbers"),
    Case("fs-inodes-over-100", ["--fs", "/tmp:1:150"], "MIN_FREE_INODES_PCT 150 must be between"),
    Case("fs-twice", ["--fs", "/tmp:1", "--fs", "/tmp:2"], "--fs /tmp: given twice"),
    Case("job-not-an-id", ["--job", "12; rm -rf /"], "is not a SLURM job id"),
    Case("job-without-squeue", ["--job", "42"], "--job 42: squeue not found on PATH",
         env=NO_SQUEUE),
    Case("interval-zero", ["--fs", "/tmp", "--interval", "0"], "--interval: 0 must be >= 0.1"),
    Case("stale-after-nan", ["--heartbeat", "hb", "--stale-after", "nan"], "not a finite number"),
    Case("heartbeat-folder-missing", ["--heartbeat", "no/hb"], "--heartbeat no/hb: folder .* does not exist"),
    Case("touch-is-folder", ["--fs", "/tmp", "--on-fs-full-touch", "{tmp}"], "is a folder"),
    Case("rss-pid-not-running", ["--rss-pid", "999999999"], "--rss-pid 999999999: no such process"),
    Case("alert-cmd-empty", ["--fs", "/tmp", "--alert-cmd", " "], "--alert-cmd: must not be empty"),
    Case("events-is-heartbeat", ["--heartbeat", "hb", "--events", "hb"], "is also an input",
         files={"hb": ""}),
    Case("events-unwritable", ["--fs", "/tmp", "--events", "/proc/events.jsonl"], "cannot write"),
    Case("interval-inf", ["--fs", "/tmp", "--interval", "inf"], "not a finite number"),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
@ONE_PROCESS
def test_bad_input(case, tmp_path):
    check_refused("orchestration/run_watchdog.py", case, tmp_path)


# -- on the SLURM cluster --------------------------------------------------------------------------
class Watch:
    """run_watchdog.py started in the background with the cluster's environment."""

    def __init__(self, slurm, args):
        self.proc = subprocess.Popen([sys.executable, str(PATH), "--interval", "0.5",
                                      "--max-runtime", "60", *args], env=slurm.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.lines: list[str] = []
        self.queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.queue.put(line)
        self.queue.put(None)

    def wait_for(self, pattern: str, timeout: float = 30) -> str:
        """The first new stdout line matching ``pattern`` within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                break
            self.lines.append(line)
            if re.search(pattern, line):
                return line
        self.stop()
        pytest.fail(f"no line matching {pattern!r}:\n{''.join(self.lines)}{self.proc.stderr.read()}")

    def finish(self, timeout: float = 30) -> tuple[int, str, str]:
        """Wait for the exit; (status, every stdout line, stderr)."""
        err = self.proc.stderr.read()
        self.proc.wait(timeout=timeout)
        while (line := self.queue.get(timeout=5)) is not None:
            self.lines.append(line)
        return self.proc.returncode, "".join(self.lines), err

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def test_cancelled_job_alerts_and_exits_3(slurm, tmp_path):
    job = slurm.sbatch(f"--output={tmp_path}/j.out", "--wrap", "sleep 60")
    watch = Watch(slurm, ["--job", str(job), "--alert-cmd", f'echo "$WATCHDOG_MESSAGE" > {tmp_path}/alert'])
    try:
        watch.wait_for(rf"job:{job}: ok: job {job} RUNNING")
        slurm.run(["scancel", str(job)])
        status, out, err = watch.finish()
    finally:
        watch.stop()
    assert status == 3, out + err
    assert re.search(rf"finding: job:{job}: job {job} CANCELLED", out), out
    assert f"job {job} CANCELLED" in (tmp_path / "alert").read_text()


def test_requeued_job_is_a_finding_and_the_watch_goes_on(slurm, tmp_path):
    job = slurm.sbatch(f"--output={tmp_path}/j.out", "--requeue", "--wrap", "sleep 60")
    watch = Watch(slurm, ["--job", str(job)])
    try:
        watch.wait_for(rf"job:{job}: ok: job {job} RUNNING")
        slurm.run(["scontrol", "requeue", str(job)])
        watch.wait_for(rf"finding: job:{job}: job {job} requeued: ")
        assert watch.proc.poll() is None  # a requeue does not end the watch
        watch.proc.send_signal(signal.SIGINT)
        status, out, err = watch.finish()
    finally:
        watch.stop()
    assert status == 130, out + err


def test_drained_node_under_a_running_job_is_named_with_its_reason(slurm, tmp_path):
    job = slurm.sbatch(f"--output={tmp_path}/j.out", "--wrap", "sleep 60")
    watch = Watch(slurm, ["--job", str(job), "--events", str(tmp_path / "ev.jsonl")])
    try:
        watch.wait_for(r"nodes: ok: ")
        node = slurm.job(job)["NodeList"]
        slurm.run(["scontrol", "update", f"nodename={node}", "state=drain",
                   "reason=test: ECC errors"])
        line = watch.wait_for(r"finding: nodes: ")
        watch.proc.send_signal(signal.SIGTERM)
        status, out, err = watch.finish()
    finally:
        watch.stop()
    assert re.search(rf"job {job}: {node} is drain\w*: test: ECC errors", line), line
    assert status == 143, out + err
    events = [json.loads(x) for x in (tmp_path / "ev.jsonl").read_text().splitlines()]
    assert any(e["check"] == "nodes" and e["status"] == "finding" and node in e["message"]
               for e in events)


def test_completed_job_exits_0(slurm, tmp_path):
    job = slurm.sbatch(f"--output={tmp_path}/j.out", "--wrap", "sleep 1")
    watch = Watch(slurm, ["--job", str(job)])
    try:
        status, out, err = watch.finish()
    finally:
        watch.stop()
    assert status == 0, out + err
    assert f"job {job} COMPLETED" in out and "finding" not in out


def test_filling_tmpfs_alerts_and_touches_the_switch(tmp_path):
    mnt, switch = tmp_path / "mnt", tmp_path / "SAVE"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)],
                         capture_output=True, text=True, timeout=30)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {res.stderr.strip()}")
    proc = None
    try:
        proc = subprocess.Popen([sys.executable, str(PATH), "--fs", f"{mnt}:0.004", "--interval",
                                 "0.3", "--max-runtime", "30", "--on-fs-full-touch", str(switch)],
                                env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        first = proc.stdout.readline()
        first += proc.stdout.readline()
        assert f"fs:{mnt}: ok: 0.00839 GB free" in first, first
        assert not switch.exists()
        with open(mnt / "fill", "wb") as f:  # 6 of 8 MB: 2 MB left, below the 4 MB threshold
            f.write(b"\0" * 6_000_000)
        line = proc.stdout.readline()
        assert re.search(rf"finding: fs:{mnt}: 0.00\d+ GB free \(below 0.004 GB\)", line), line
        assert switch.exists()
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=20)
        assert proc.returncode == 143
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        subprocess.run(["umount", str(mnt)], capture_output=True, timeout=30)
    assert not os.path.ismount(mnt)


def test_help_works_without_slurm():
    res = subprocess.run([sys.executable, str(PATH), "--help"], capture_output=True, text=True,
                         timeout=30, env={**clean_env(), **NO_SQUEUE})
    assert res.returncode == 0 and "--alert-cmd" in res.stdout




def test_requeued_job_keeps_its_excluded_nodes_and_they_can_be_extended(slurm, tmp_path):
    # What the page says about excluding a bad node on requeue: --exclude survives a requeue,
    # and scontrol update adds a node to a pending job's exclusions.
    job = slurm.sbatch(f"--output={tmp_path}/j.out", "--requeue", "--exclude=node2", "--wrap",
                       "sleep 60")
    assert slurm.wait_state(job, {"RUNNING"})["NodeList"] == "node1"
    slurm.run(["scontrol", "requeue", str(job)])
    info = slurm.wait_state(job, {"PENDING"})
    assert info["ExcNodeList"] == "node2" and info["Restarts"] == "1"
    slurm.run(["scontrol", "hold", str(job)])  # keep it pending while it is updated
    slurm.run(["scontrol", "update", f"jobid={job}", "ExcNodeList=node[1-2]"])
    assert slurm.job(job)["ExcNodeList"] == "node[1-2]"
