"""A real SLURM cluster on localhost for the Orchestration chapter's tests (test infrastructure).

The session fixture ``slurm_cluster`` starts (through ``running_cluster``, which a module can
call with other slurm.conf settings for a cluster of its own), under a temporary directory:

* ``munged`` with its own key and socket (so it never touches a system munge);
* ``slurmctld -D -c -i`` (no saved state, ignore errors in it) and two ``slurmd -D -N nodeX`` on
  distinct ports: a 2-node emulated cluster, partition ``debug``, 2 CPUs per node;

and waits until both nodes are idle. The ``slurm`` fixture hands it to a test and, afterwards,
cancels what the test left running and resumes drained/downed nodes, so tests stay independent.
At the end of the session (also after failures) everything is stopped: ``scontrol shutdown``,
then SIGTERM/SIGKILL to leftovers, then munged; the finalizer asserts that no daemon it started
is left behind. It ends only its own processes, found by id (the daemons it started, and the
slurmstepd whose environment names its slurm.conf): a developer's or another session's cluster on
the same machine survives the run.

Every client command runs under a timeout; jobs are followed by polling ``squeue`` (``sbatch
--wait`` backs off to multi-second sleeps). Jobs see the repository's virtualenv first on PATH,
so ``python`` and ``torchrun`` in the templates are the tested ones.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import require_tool
from tests.launchers import REPO, free_port, launch_fixture, require_ranks

NODES = ("node1", "node2")
CPUS_PER_NODE = 2
DAEMONS = ("munged", "slurmctld", "slurmd", "slurmstepd")
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


def _daemons(conf: Path) -> dict[int, str]:
    """pid -> name of the running munged/slurm* processes of the cluster whose configuration is
    ``conf``: the fixture starts each daemon with SLURM_CONF=conf in its environment, and slurmd
    passes its environment on to the slurmstepd of each job. Another cluster on the machine (a
    developer's, another test session's) has another SLURM_CONF, or none, and is left alone."""
    found = {}
    marker = f"SLURM_CONF={conf}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            name = (entry / "comm").read_text().strip()
            if name in DAEMONS and marker in (entry / "environ").read_bytes().split(b"\0"):
                found[int(entry.name)] = name
        except OSError:  # gone, or another user's
            continue
    return found


def _parse_fields(text: str) -> dict[str, str]:
    """``Key=Value Key2=Value two`` (scontrol -o output) -> dict; values may contain spaces."""
    fields = {}
    for m in re.finditer(r"(\S+?)=(.*?)(?=\s+\S+?=|$)", text.strip()):
        fields[m[1]] = m[2]
    return fields


class Cluster:
    """Handle on the running cluster: client commands with timeouts and job polling."""

    def __init__(self, root: Path, settings: dict[str, str] | None = None):
        self.root = root
        self.settings = settings or {}  # slurm.conf keys that replace (or add to) the defaults
        self.conf = root / "slurm.conf"
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SQUEUE_"))
                    and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
        self.env.update({
            "SLURM_CONF": str(self.conf),
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
            # Default output file of jobs that name none (and of templates' #SBATCH --output):
            # under the cluster's directory, never in the repository. --output wins over it.
            "SBATCH_OUTPUT": str(root / "jobs" / "%x-%j.out"),
        })

    # -- client commands ------------------------------------------------------------------
    def run(self, args: list[str], timeout: float = 30, check: bool = True,
            env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
        """Run a command with the cluster's environment, under ``timeout`` seconds."""
        try:
            res = subprocess.run(args, cwd=cwd, env={**self.env, **(env or {})},
                                 capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"{args} did not return within {timeout} s: {exc.stdout} {exc.stderr}")
        if check and res.returncode != 0:
            pytest.fail(f"{' '.join(map(str, args))} exited {res.returncode}:\n"
                        f"{res.stdout}\n{res.stderr}\n{self.logs_tail()}")
        return res

    def sbatch(self, *args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> int:
        """Submit with ``sbatch --parsable ARGS`` (from the repository root unless ``cwd``);
        return the job id."""
        res = self.run(["sbatch", "--parsable", *map(str, args)], env=env, cwd=cwd)
        return int(res.stdout.strip().split(";")[0])

    def job(self, job_id: int | str) -> dict[str, str]:
        """``scontrol -o show job ID`` as a dict (JobState, Reason, Restarts, NodeList, ...).
        For an array parent this is the first record."""
        res = self.run(["scontrol", "-o", "show", "job", str(job_id)])
        return _parse_fields(res.stdout.splitlines()[0])

    def jobs(self, job_id: int | str) -> list[dict[str, str]]:
        """All records of ``scontrol -o show job ID`` (one per array task)."""
        res = self.run(["scontrol", "-o", "show", "job", str(job_id)])
        return [_parse_fields(line) for line in res.stdout.splitlines() if line.strip()]

    def in_queue(self, job_id: int | str) -> bool:
        res = self.run(["squeue", "-h", "-j", str(job_id), "-o", "%i"], check=False)
        return bool(res.stdout.strip())

    def wait_gone(self, job_id: int | str, timeout: float = 60) -> None:
        """Poll squeue every 0.2 s until the job (every task of an array) has left the queue."""
        deadline = time.monotonic() + timeout
        while self.in_queue(job_id):
            if time.monotonic() > deadline:
                pytest.fail(f"job {job_id} still queued after {timeout} s: {self.job(job_id)}\n"
                            f"{self.logs_tail()}")
            time.sleep(0.2)

    def wait_state(self, job_id: int | str, states: set[str], timeout: float = 60) -> dict:
        """Poll until the job's JobState is in ``states``; return its record."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.job(job_id)
            if info.get("JobState") in states:
                return info
            if time.monotonic() > deadline:
                pytest.fail(f"job {job_id} not in {states} after {timeout} s: {info}\n"
                            f"{self.logs_tail()}")
            time.sleep(0.2)

    def wait_reason(self, job_id: int | str, reasons: set[str], timeout: float = 30) -> dict:
        """Poll until the job is PENDING with a Reason in ``reasons`` (the scheduler sets it
        on its next pass); return its record."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.job(job_id)
            if info.get("JobState") == "PENDING" and info.get("Reason") in reasons:
                return info
            if time.monotonic() > deadline:
                pytest.fail(f"job {job_id} not pending for {reasons} after {timeout} s: {info}")
            time.sleep(0.2)

    def wait_file_text(self, path: Path, text: str, timeout: float = 60) -> str:
        """Poll until ``path`` contains ``text``; return its content."""
        deadline = time.monotonic() + timeout
        while True:
            content = path.read_text() if path.exists() else ""
            if text in content:
                return content
            if time.monotonic() > deadline:
                pytest.fail(f"{path} has no {text!r} after {timeout} s:\n{content}")
            time.sleep(0.2)

    def node(self, name: str) -> dict[str, str]:
        return _parse_fields(self.run(["scontrol", "-o", "show", "node", name]).stdout)

    def idle_nodes(self) -> int:
        res = self.run(["sinfo", "-h", "-t", "idle", "-o", "%D"], check=False)
        return sum(int(x) for x in res.stdout.split() if x.isdigit())

    def wait_idle(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.idle_nodes() < len(NODES):
            if time.monotonic() > deadline:
                pytest.fail(f"nodes not idle after {timeout} s:\n"
                            f"{self.run(['sinfo', '-N', '-l'], check=False).stdout}\n"
                            f"{self.logs_tail()}")
            time.sleep(0.2)

    def reset(self) -> None:
        """Cancel every job, resume every node, wait until the cluster is idle again."""
        self.run(["scancel", "--user", pwd.getpwuid(os.getuid()).pw_name], check=False)
        deadline = time.monotonic() + 60
        while self.run(["squeue", "-h", "-o", "%i"], check=False).stdout.strip():
            if time.monotonic() > deadline:
                pytest.fail("jobs still queued 60 s after scancel")
            time.sleep(0.2)
        for name in NODES:
            state = self.node(name).get("State", "")
            if "DRAIN" in state or "DOWN" in state:
                self.run(["scontrol", "update", f"nodename={name}", "state=resume"], check=False)
        self.wait_idle()

    def logs_tail(self, lines: int = 15) -> str:
        out = []
        for log in sorted((self.root / "log").glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(out)

    # -- daemons --------------------------------------------------------------------------
    def start(self) -> None:
        root = self.root
        user = pwd.getpwuid(os.getuid()).pw_name
        for sub in ("munge", "state", "log", "run", "spool", "jobcomp", "jobs"):
            (root / sub).mkdir(mode=0o755, exist_ok=True)
        (root / "munge").chmod(0o755)  # 0700 makes clients fail: "Socket is inaccessible"
        keydir = root / "munge-key"
        keydir.mkdir(mode=0o700)
        key, sock = keydir / "munge.key", root / "munge" / "munge.socket"
        subprocess.run(["mungekey", "-c", "-k", str(key), "-b", "1024"], check=True, timeout=30,
                       capture_output=True)
        self._spawn("munged", ["munged", "-F", f"--key-file={key}", f"--socket={sock}",
                               f"--pid-file={root / 'run' / 'munged.pid'}",
                               f"--log-file={root / 'log' / 'munged.log'}",
                               f"--seed-file={root / 'munge' / 'munge.seed'}"])
        self._wait(lambda: sock.exists(), "munged socket", 20)

        ctld_port = free_port()
        node_ports = [free_port() for _ in NODES]
        node_lines = "\n".join(
            f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} "
            f"CPUs={CPUS_PER_NODE} RealMemory=2000 State=UNKNOWN"
            for name, port in zip(NODES, node_ports, strict=True))
        conf = f"""\
ClusterName=booktest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={node_ports[0]}
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock},cred_expire=5
StateSaveLocation={root / 'state'}
SlurmdSpoolDir={root / 'spool'}/%n
SlurmctldPidFile={root / 'run'}/slurmctld.pid
SlurmdPidFile={root / 'run'}/slurmd-%n.pid
SlurmctldLogFile={root / 'log'}/slurmctld.log
SlurmdLogFile={root / 'log'}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={root / 'jobcomp' / 'jobcomp.txt'}
MailProg=/bin/true
ReturnToService=2
KillWait=5
SchedulerParameters=sched_interval=1,bf_interval=1
MinJobAge=600
{node_lines}
PartitionName=debug Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP
"""
        lines = conf.splitlines()
        for key, value in self.settings.items():
            lines = [line for line in lines if not line.startswith(f"{key}=")]
            lines.insert(-len(NODES) - 1, f"{key}={value}")  # before the nodes and partition
        self.conf.write_text("\n".join(lines) + "\n")
        self._spawn("slurmctld", ["slurmctld", "-D", "-c", "-i", "-f", str(self.conf)])
        for name in NODES:
            self._spawn(f"slurmd-{name}", ["slurmd", "-D", "-N", name, "-f", str(self.conf)])
        self.wait_idle(timeout=60)

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.stdout", "w")
        self.procs[name] = subprocess.Popen(args, env=self.env, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def _wait(self, ready, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} while waiting for "
                                       f"{what}:\n{self.logs_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.1)

    def daemons(self) -> dict[int, str]:
        """pid -> name of this cluster's daemons still running (the ones it started, and the
        slurmstepd of its jobs); nothing of another cluster on the machine."""
        own = _daemons(self.conf)
        own.update({p.pid: name for name, p in self.procs.items() if p.poll() is None})
        return own

    def stop(self) -> None:
        """Cancel jobs, shut SLURM down, stop munged; SIGTERM then SIGKILL what remains."""
        slurm = {n: p for n, p in self.procs.items() if n != "munged"}
        if any(p.poll() is None for p in slurm.values()):
            subprocess.run(["scancel", "--user", pwd.getpwuid(os.getuid()).pw_name],
                           env=self.env, capture_output=True, timeout=15, check=False)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                q = subprocess.run(["squeue", "-h", "-o", "%i"], env=self.env,
                                   capture_output=True, text=True, timeout=15, check=False)
                if q.returncode != 0 or not q.stdout.strip():
                    break
                time.sleep(0.2)
            # slurmstepd processes outlive their job by a moment (epilog, I/O flush).
            while time.monotonic() < deadline + 15 and "slurmstepd" in self.daemons().values():
                time.sleep(0.2)
            subprocess.run(["scontrol", "shutdown"], env=self.env, capture_output=True,
                           timeout=15, check=False)
        for proc in [*slurm.values(), self.procs.get("munged")]:
            if proc is None or proc.poll() is not None:
                continue
            if proc is self.procs.get("munged"):
                proc.terminate()  # munged stops on SIGTERM; the slurm daemons on shutdown
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)


@contextlib.contextmanager
def running_cluster(settings: dict[str, str] | None = None):
    """Start a cluster (``settings``: slurm.conf keys that replace or add to the defaults), yield
    it, and stop it, also after a failure; fail if a daemon it started is left behind."""
    for tool in ("sbatch", "srun", "squeue", "scontrol", "scancel", "sinfo", "salloc",
                 "slurmctld", "slurmd", "munged", "mungekey"):
        require_tool(tool)
    # Not under pytest's 0700 tmp dirs: munged wants every directory above its socket
    # searchable by all ("Socket is inaccessible"). A short path also keeps the socket
    # address under the 108-byte limit.
    root = Path(tempfile.mkdtemp(prefix="book-slurm-"))
    root.chmod(0o755)
    cluster = Cluster(root, settings)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        time.sleep(0.3)
        left = cluster.daemons()  # only what this fixture started, by process id
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert not left, f"daemons left behind after shutdown (now killed): {left}"
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm_cluster():
    with running_cluster() as cluster:
        yield cluster


@pytest.fixture
def slurm(slurm_cluster):
    """The running cluster, idle at the start of the test and reset (jobs cancelled, nodes
    resumed) after it."""
    require_ranks("SLURM jobs")
    slurm_cluster.wait_idle()
    yield slurm_cluster
    slurm_cluster.reset()


launch = launch_fixture("orchestration")

FINISHED = re.compile(r"finished step (\d+) loss \S+ weights_sha256 ([0-9a-f]{64})")


@pytest.fixture(scope="session")
def reference_hash(launch, tmp_path_factory):
    """weights_sha256 of uninterrupted runs, by number of steps (plain python, no SLURM)."""
    cache = {}

    def get(steps: int) -> str:
        if steps not in cache:
            ckpt = tmp_path_factory.mktemp("reference")
            res = launch.python("train_requeue.py", ["--ckpt-dir", str(ckpt), "--steps", str(steps)])
            assert res.returncode == 0, res.output
            cache[steps] = FINISHED.search(res.stdout)[2]
        return cache[steps]

    return get
