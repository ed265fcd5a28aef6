"""The Lightning template's test payload: the same tiny model as accelerate_train.py, trained
with Lightning Fabric (ranks from SLURMEnvironment); one JSON line per rank to argv[1]."""

import hashlib
import json
import os
import sys

import torch
from lightning_fabric import Fabric

fabric = Fabric(accelerator="cpu" if not torch.cuda.is_available() else "cuda", strategy="ddp",
                num_nodes=int(os.environ["LIGHTNING_NUM_NODES"]),
                devices=int(os.environ["LIGHTNING_DEVICES"]))
fabric.launch()  # under srun: starts nothing, only joins the process group
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = fabric.setup(model, optimizer)
target = torch.arange(8, dtype=torch.float32) / 8
losses = []
for step in range(20):
    gen = torch.Generator().manual_seed(1000 * step + fabric.global_rank)
    x = torch.randn(16, 8, generator=gen)
    loss = torch.nn.functional.mse_loss(model(x).squeeze(1), x @ target)
    optimizer.zero_grad()
    fabric.backward(loss)
    optimizer.step()
    losses.append(loss.item())
weights = model.module.weight.detach().numpy().tobytes()
with open(sys.argv[1], "a") as f:
    print(json.dumps({"rank": fabric.global_rank, "world": fabric.world_size,
                      "type": type(fabric._connector.cluster_environment).__name__,
                      "first": losses[0], "last": losses[-1],
                      "sha": hashlib.sha256(weights).hexdigest()}), file=f)
