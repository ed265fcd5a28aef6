"""Tests of scripts/compute/numa_affinity.py: the plan on a synthetic two-socket, four-GPU sysfs
tree, the real binding (os.sched_setaffinity + exec) on this machine's CPUs, torchrun and
srun-style local ranks, and the no-GPU explanation."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import RANKS

SCRIPT = "numa_affinity.py"
# One os.write per line: the tests run Python unbuffered, where print() writes each argument
# separately and two ranks' lines interleave ("AFFINITYAFFINITY [1] 1 1" failed a CI run).
PRINT_AFFINITY = [sys.executable, "-c",
                  "import os; os.write(1, f'AFFINITY {sorted(os.sched_getaffinity(0))} "
                  "{os.environ.get(\"LOCAL_RANK\")} {os.environ.get(\"RANK\")}\\n'.encode())"]


def fake_sysfs(root: Path, nodes: dict[int, str], gpus: list[tuple[str, int, str]],
               others: int = 2) -> Path:
    """A minimal /sys: NUMA nodes with cpulists, GPUs (address, node, local_cpulist) and a few
    non-GPU PCI devices that must be ignored."""
    for node, cpus in nodes.items():
        d = root / "devices" / "system" / "node" / f"node{node}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
    pci = root / "bus" / "pci" / "devices"
    for address, node, cpus in gpus:
        d = pci / address
        d.mkdir(parents=True)
        (d / "class").write_text("0x030200\n")
        (d / "vendor").write_text("0x10de\n")
        (d / "numa_node").write_text(f"{node}\n")
        (d / "local_cpulist").write_text(cpus + "\n")
    for i in range(others):  # a NIC and a bridge of another vendor/class
        d = pci / f"0000:00:0{i}.0"
        d.mkdir(parents=True)
        (d / "class").write_text("0x020000\n" if i else "0x060400\n")
        (d / "vendor").write_text("0x15b3\n")
    return root


@pytest.fixture
def two_socket(tmp_path) -> Path:
    # Deliberately listed out of bus order: the script must sort by PCI address.
    return fake_sysfs(tmp_path / "sys", {0: "0-7", 1: "8-15"}, [
        ("0000:c1:00.0", 1, "8-15"), ("0000:41:00.0", 0, "0-7"),
        ("0000:81:00.0", 1, "8-15"), ("0000:01:00.0", 0, "0-7")])


def test_plan_maps_ranks_to_their_gpus_numa_node(launch, two_socket, tmp_path):
    out = tmp_path / "plan.json"
    res = launch.python(SCRIPT, ["--sysfs-root", str(two_socket), "--print", "--json", str(out)])
    assert res.returncode == 0, res.output
    plan = json.loads(out.read_text())
    assert [g["address"] for g in plan["gpus"]] == ["0000:01:00.0", "0000:41:00.0",
                                                    "0000:81:00.0", "0000:c1:00.0"]
    assert [(r["local_rank"], r["numa_node"], r["cpulist"]) for r in plan["ranks"]] == [
        (0, 0, "0-7"), (1, 0, "0-7"), (2, 1, "8-15"), (3, 1, "8-15")]
    assert "numactl --cpunodebind=1 --membind=1" in res.stdout


def test_split_gives_disjoint_shares(launch, two_socket, tmp_path):
    out = tmp_path / "plan.json"
    res = launch.python(SCRIPT, ["--sysfs-root", str(two_socket), "--print", "--split",
                                 "--json", str(out)])
    assert res.returncode == 0, res.output
    cpulists = [r["cpulist"] for r in json.loads(out.read_text())["ranks"]]
    assert cpulists == ["0-3", "4-7", "8-11", "12-15"]


def test_cuda_visible_devices_reorders(launch, two_socket, tmp_path):
    out = tmp_path / "plan.json"
    res = launch.python(SCRIPT, ["--sysfs-root", str(two_socket), "--print", "--json", str(out)],
                        env={"CUDA_VISIBLE_DEVICES": "3,0"})
    assert res.returncode == 0, res.output
    ranks = json.loads(out.read_text())["ranks"]
    assert [(r["gpu"], r["numa_node"]) for r in ranks] == [("0000:c1:00.0", 1), ("0000:01:00.0", 0)]


# The first two CPUs this process may run on: a CI container's cpuset need not start at CPU 0.
USABLE = sorted(os.sched_getaffinity(0))[:2]


@RANKS
@pytest.mark.skipif(len(USABLE) < 2, reason="needs two usable CPUs")
def test_binds_and_execs_under_torchrun(launch, tmp_path):
    # Two GPUs on two nodes, each node one of this machine's usable CPUs: each torchrun rank
    # must end up running the command pinned to exactly its GPU's CPU.
    a, b = USABLE
    sysfs = fake_sysfs(tmp_path / "sys", {0: str(a), 1: str(b)},
                       [("0000:01:00.0", 0, str(a)), ("0000:81:00.0", 1, str(b))])
    res = launch.torchrun(SCRIPT, ["--sysfs-root", str(sysfs), "--", *PRINT_AFFINITY], nproc=2,
                          env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert res.returncode == 0, res.output
    seen = sorted(line.split(" ", 1)[1] for line in res.stdout.splitlines()
                  if line.startswith("AFFINITY"))
    assert seen == [f"[{a}] 0 0", f"[{b}] 1 1"], res.output


@pytest.mark.skipif(len(USABLE) < 2, reason="needs two usable CPUs")
def test_srun_local_id_selects_the_gpu(launch, tmp_path):
    a, b = USABLE
    sysfs = fake_sysfs(tmp_path / "sys", {0: str(a), 1: str(b)},
                       [("0000:01:00.0", 0, str(a)), ("0000:81:00.0", 1, str(b))])
    res = launch.python(SCRIPT, ["--sysfs-root", str(sysfs), "--", *PRINT_AFFINITY],
                        env={"SLURM_LOCALID": "1", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert res.returncode == 0, res.output
    assert f"AFFINITY [{b}] None None" in res.stdout
    assert f"local rank 1 -> GPU 0000:81:00.0 NUMA node 1 cpus {b}" in res.stderr


def test_without_gpus_explains_and_runs_unbound(launch, tmp_path):
    sysfs = fake_sysfs(tmp_path / "sys", {0: "0-1"}, [])
    res = launch.python(SCRIPT, ["--sysfs-root", str(sysfs), "--", *PRINT_AFFINITY])
    assert res.returncode == 0, res.output
    assert "no GPU found" in res.stdout and "node0 cpus 0-1" in res.stdout
    assert f"AFFINITY {sorted(os.sched_getaffinity(0))}" in res.stdout


def sysfs_files(cpulist: str = "0-7", numa_node: str | bytes = "0", ngpus: int = 4) -> dict:
    """The files of a small fake /sys under ``sys/`` for :class:`Case` (one node, ``ngpus`` GPUs)."""
    files = {"sys/devices/system/node/node0/cpulist": cpulist}
    for i in range(ngpus):
        d = f"sys/bus/pci/devices/0000:{i:02x}:00.0/"
        files.update({d + "class": "0x030200\n", d + "vendor": "0x10de\n", d + "numa_node": numa_node,
                      d + "local_cpulist": cpulist})
    return files


SYSFS = ["--sysfs-root", "sys"]
GOOD = sysfs_files()
BAD_INPUT = [
    Case("nothing-to-do", SYSFS, "nothing to do: give a command after -- or use --print", files=GOOD),
    Case("env-local-rank-not-integer", [*SYSFS, "--print"],
         r"environment variable LOCAL_RANK='abc' is not an integer", env={"LOCAL_RANK": "abc"},
         files=GOOD),
    Case("env-slurm-localid-not-integer", [*SYSFS, "--print"],
         r"environment variable SLURM_LOCALID='1.5' is not an integer",
         env={"SLURM_LOCALID": "1.5"}, files=GOOD),
    Case("env-local-rank-negative", [*SYSFS, "--print"],
         "environment variable LOCAL_RANK=-1 must be >= 0", env={"LOCAL_RANK": "-1"}, files=GOOD),
    Case("local-rank-negative", [*SYSFS, "--local-rank", "-1", "--", "true"],
         "--local-rank: -1 must be >= 0", files=GOOD),
    Case("local-rank-beyond-gpus", [*SYSFS, "--", "true"], r"local rank 4 but 4 GPU\(s\) visible",
         env={"LOCAL_RANK": "4"}, files=GOOD),
    Case("nranks-zero", [*SYSFS, "--print", "--nranks", "0"], "--nranks: 0 must be >= 1", files=GOOD),
    Case("nranks-nan", [*SYSFS, "--print", "--nranks", "nan"], "--nranks: 'nan' is not an integer",
         files=GOOD),
    Case("nranks-huge", [*SYSFS, "--print", "--nranks", "1000000000"], "--nranks: .* must be <= 65536",
         files=GOOD),
    Case("cpulist-malformed", [*SYSFS, "--print"], r"cpulist: malformed cpu list '0-x'",
         files=sysfs_files(cpulist="0-x")),
    Case("cpulist-huge", [*SYSFS, "--print"], r"names cpu 4000000000; at most 65535",
         files=sysfs_files(cpulist="0-4000000000")),
    Case("cpulist-not-utf8", [*SYSFS, "--print"], r"node0/cpulist: not UTF-8 text",
         files={**GOOD, "sys/devices/system/node/node0/cpulist": b"0-\xff"}),
    Case("numa-node-not-integer", [*SYSFS, "--print"], r"numa_node: 'one' is not an integer",
         files=sysfs_files(numa_node="one")),
    Case("sysfs-root-missing", ["--sysfs-root", "nowhere", "--print"],
         "--sysfs-root nowhere: not a folder"),
    # checked before binding and exec: the command never runs
    Case("json-unwritable-before-exec", [*SYSFS, "--json", "/proc/plan.json", "--", "true"],
         "cannot write in /proc", files=GOOD),
    Case("command-not-found", [*SYSFS, "--", "no-such-command-xyz"],
         "cannot run 'no-such-command-xyz'", status=127, files=GOOD),
    # --sysfs-root is read (the node and GPU files under it): --json inside it, here over one of
    # the files read, is "inside an input folder" (CONTRIBUTING.md, "Script contract")
    Case("json-inside-sysfs-root", [*SYSFS, "--print", "--json", "sys/devices/system/node/node0/cpulist"],
         r"--json sys/devices/system/node/node0/cpulist: is inside sys, which this run reads", files=GOOD),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_bad_input(case, tmp_path):
    check_refused("compute/numa_affinity.py", case, tmp_path)
