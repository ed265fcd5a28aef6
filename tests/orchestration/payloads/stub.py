"""A stand-in for srun, scontrol and the container or framework launchers, chosen by the name
it is called under. It appends {"prog", "argv", "env"} as a JSON line to $STUB_LOG. As srun it
then runs the command after its options once per node (SLURM_NODEID, SLURM_PROCID = 0, 1, ...);
as scontrol it answers `show hostnames` and `show node` for a two-node cluster."""

import json
import os
import subprocess
import sys

prog = os.path.basename(sys.argv[0])
args = sys.argv[1:]
keep = ("SLURM_NODEID", "SLURM_PROCID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
        "MASTER_PORT", "HOSTFILE")
if prog != "scontrol":
    with open(os.environ["STUB_LOG"], "a") as f:
        print(json.dumps({"prog": prog, "argv": args,
                          "env": {k: os.environ[k] for k in keep if k in os.environ}}), file=f)
if prog == "scontrol":
    if args[:2] == ["show", "hostnames"]:
        print("gpu-a\ngpu-b")
    elif args[:2] == ["show", "node"]:
        print(f"NodeName={args[2]} Arch=x86_64 NodeAddr=10.0.0.{ord(args[2][-1]) - 96} "
              f"NodeHostName={args[2]}")
elif prog == "srun":
    command = args[next(i for i, a in enumerate(args) if not a.startswith("-")):]
    if command[0] == "apptainer":  # apptainer exec OPTIONS IMAGE CMD...: run CMD as the task
        command = command[command.index(os.environ["IMAGE"]) + 1:]
    for node in range(int(os.environ["SLURM_NNODES"])):
        env = {**os.environ, "SLURM_NODEID": str(node), "SLURM_PROCID": str(node),
               "SLURM_LOCALID": "0", "SLURM_NTASKS": os.environ["SLURM_NNODES"]}
        subprocess.run(command, env=env, check=True)
