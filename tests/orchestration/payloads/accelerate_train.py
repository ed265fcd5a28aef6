"""The Accelerate template's test payload: a tiny linear model, a few SGD steps on data that
depends on (seed, step, rank), then one JSON line per rank to the file given as argv[1]:
rank, world size, the distributed type, first and last loss, and a hash of the weights."""

import hashlib
import json
import sys

import torch
from accelerate import Accelerator

accelerator = Accelerator(cpu=not torch.cuda.is_available())
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
target = torch.arange(8, dtype=torch.float32) / 8
losses = []
for step in range(20):
    gen = torch.Generator().manual_seed(1000 * step + accelerator.process_index)
    x = torch.randn(16, 8, generator=gen)
    loss = torch.nn.functional.mse_loss(model(x).squeeze(1), x @ target)
    optimizer.zero_grad()
    accelerator.backward(loss)
    optimizer.step()
    losses.append(loss.item())
weights = accelerator.unwrap_model(model).weight.detach().numpy().tobytes()
with open(sys.argv[1], "a") as f:
    print(json.dumps({"rank": accelerator.process_index, "world": accelerator.num_processes,
                      "type": str(accelerator.distributed_type), "first": losses[0],
                      "last": losses[-1], "sha": hashlib.sha256(weights).hexdigest()}), file=f)
