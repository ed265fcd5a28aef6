"""Tests of scripts/training/train_example.py, run for real: two CPU processes with gloo under
torchrun, DDP and FSDP2.

Timings vary from run to run, so no test asserts a speed; they check that the loss falls, that
the logged numbers obey their definitions (tokens/s from the step time, TFLOPS from 6N + 12LaT,
MFU from the peak), that a DDP checkpoint resumes under FSDP with the same losses an uninterrupted
run had, and that a stalled rank ends the job after the short post-first-step timeout.

The metrics logger (--metrics-jsonl, --tensorboard) is checked against independent computations:
the global gradient norm against ``torch.nn.utils.get_total_norm`` over the parameters'
gradients (the norm ``clip_grad_norm_`` clips to), the per-block norms and the update-to-weight
ratio ||w_after - w_before|| / ||w_after|| against the weights before and after each optimizer
step, the FSDP norms (sharded gradients, reduced over ranks) against the DDP run's at the same
steps, the learning rate against the warmup + cosine formula of Loshchilov and Hutter
(https://arxiv.org/abs/1608.03983, eq. 5, to 0.1 x the peak), and, in-process, that the script
reads tensors back to the host only on logging steps.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.bad_input import Case, check_refused, launcher_cases
from tests.launchers import ONE_PROCESS, RANKS

pytestmark = RANKS  # starts two or more ranks or SLURM jobs

SCRIPT = "train_example.py"
SMALL = ["--layers", "2", "--hidden", "64", "--heads", "4", "--seq-len", "64",
         "--batch-size", "4", "--vocab", "256"]
PEAK = 0.05  # a made-up peak, only to exercise the MFU column on a CPU
# Both fixture runs use the same schedule and clipping, so the FSDP run resumes the DDP one exactly.
LR, WARMUP, CLIP = 3e-3, 3, 0.55
TRAINING = ["--lr", str(LR), "--lr-schedule", "cosine", "--warmup-steps", str(WARMUP),
            "--clip-grad", str(CLIP)]
# Every key the Training metrics page (metrics.md) lists for a CPU run (CUDA adds the allocator's six).
METRIC_KEYS = {"step", "loss", "lr", "grad_norm", "grad_norm_max", "grad_norm_blocks",
               "grad_norm_other", "clipped", "clipped_steps", "update_ratio_blocks",
               "loss_spikes", "step_ms", "data_ms", "tokens_per_s", "model_tflops", "mfu",
               "peak_rss_mib"}
CUDA_KEYS = {"active_mib", "reserved_mib", "max_allocated_mib", "max_reserved_mib",
             "alloc_retries", "ooms"}


@pytest.fixture(scope="module")
def ddp_run(launch, tmp_path_factory):
    """12 DDP steps with checkpoints at steps 6 and 12."""
    out = tmp_path_factory.mktemp("ddp")
    res = launch.torchrun(SCRIPT, ["--strategy", "ddp", "--steps", "12", *SMALL,
                                   "--checkpoint-dir", str(out / "ckpt"),
                                   "--checkpoint-every", "6", "--peak-tflops", str(PEAK),
                                   "--gc-every", "5", "--json", str(out / "run.json"),
                                   *TRAINING, "--metrics-jsonl", str(out / "metrics.jsonl"),
                                   "--tensorboard", str(out / "tb")],
                          timeout=120)
    assert res.returncode == 0, res.output
    return res, out


@pytest.fixture(scope="module")
def fsdp_resumed(launch, ddp_run, tmp_path_factory):
    """FSDP2 run resuming from the DDP checkpoint of step 6, to step 12, profiling steps 9-10."""
    _, ddp_out = ddp_run
    out = tmp_path_factory.mktemp("fsdp")
    res = launch.torchrun(SCRIPT, ["--strategy", "fsdp", "--steps", "12", *SMALL,
                                   "--resume-from", str(ddp_out / "ckpt" / "step_00000006"),
                                   "--checkpoint-dir", str(out / "ckpt"),
                                   "--checkpoint-every", "12", "--profile-steps", "9:10",
                                   "--profile-dir", str(out / "prof"), *TRAINING,
                                   "--json", str(out / "run.json"),
                                   "--metrics-jsonl", str(out / "metrics.jsonl")], timeout=120)
    assert res.returncode == 0, res.output
    return res, out


def test_ddp_loss_goes_down(ddp_run):
    _, out = ddp_run
    losses = [r["loss"] for r in json.loads((out / "run.json").read_text())["steps"]]
    assert len(losses) == 12
    # Starts near ln(vocab) (uniform guess) and falls clearly within 12 steps.
    assert losses[0] == pytest.approx(math.log(256), abs=0.5)
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.5


def test_ddp_logged_numbers_follow_their_definitions(ddp_run):
    res, out = ddp_run
    report = json.loads((out / "run.json").read_text())
    assert (report["strategy"], report["backend"], report["world_size"]) == ("ddp", "gloo", 2)
    layers, d, vocab, seq = 2, 64, 256, 64
    n = layers * 12 * d * d + d * vocab
    assert report["matmul_params"] == n
    assert report["flops_per_token"] == 6 * n + 12 * layers * d * seq  # PaLM appendix B
    assert report["tokens_per_step"] == 2 * 4 * seq
    for r in report["steps"]:
        assert r["tokens_per_s"] == pytest.approx(report["tokens_per_step"] / (r["step_ms"] / 1e3))
        assert r["model_tflops"] == pytest.approx(
            report["flops_per_token"] * r["tokens_per_s"] / 2 / 1e12)
        assert r["mfu"] == pytest.approx(r["model_tflops"] / PEAK)
        assert 0 <= r["data_ms"] < r["step_ms"]
        assert r["peak_rss_mib"] > 50  # a torch process on CPU: the field is the RSS in MiB
    # The summary's mean is total tokens over total time of every step but the first.
    later = report["steps"][1:]
    assert report["mean_tokens_per_s"] == pytest.approx(
        report["tokens_per_step"] * len(later) / sum(r["step_ms"] / 1e3 for r in later), rel=1e-6)
    assert "mean" in res.stdout and "(steps 2-12)" in res.stdout
    # One printed row per step, in order, with the loss as recorded.
    rows = [line.split() for line in res.stdout.splitlines()
            if line.strip() and line.split()[0].isdigit()]
    assert [int(r[0]) for r in rows] == list(range(1, 13))
    assert [float(r[1]) for r in rows] == pytest.approx(
        [r["loss"] for r in report["steps"]], abs=1e-4)


def test_ddp_writes_dcp_checkpoints(ddp_run):
    res, out = ddp_run
    for step in (6, 12):
        folder = out / "ckpt" / f"step_{step:08d}"
        assert (folder / ".metadata").is_file()
        assert len(list(folder.glob("*.distcp"))) == 2  # one file per rank
        assert f"# checkpoint: {folder}" in res.stdout


def test_fsdp_resumes_from_ddp_checkpoint_with_identical_losses(ddp_run, fsdp_resumed):
    # DCP stores tensors by name, independent of how they were sharded: a DDP checkpoint loads
    # into FSDP2 shards, and with the data a function of the step the losses repeat.
    _, ddp_out = ddp_run
    res, out = fsdp_resumed
    ddp = {r["step"]: r["loss"] for r in json.loads((ddp_out / "run.json").read_text())["steps"]}
    report = json.loads((out / "run.json").read_text())
    assert report["strategy"] == "fsdp" and report["start_step"] == 6
    fsdp = {r["step"]: r["loss"] for r in report["steps"]}
    assert sorted(fsdp) == list(range(7, 13))
    for step, loss in fsdp.items():
        assert loss == pytest.approx(ddp[step], rel=1e-4), step
    assert fsdp[12] < fsdp[7]  # and FSDP keeps training
    assert "# resumed from" in res.stdout
    assert (out / "ckpt" / "step_00000012" / ".metadata").is_file()


def test_profiler_window_writes_a_trace_per_rank(fsdp_resumed):
    _, out = fsdp_resumed
    for rank in (0, 1):
        trace = json.loads((out / "prof" / f"trace_rank{rank}.json").read_text())
        names = {e.get("name", "") for e in trace["traceEvents"]}
        # Steps 9 and 10 only, each with its forward, backward and optimizer ranges.
        assert {"train_step_9", "train_step_10", "forward", "backward", "optimizer"} <= names
        assert not {"train_step_8", "train_step_11"} & names
        assert "[memory]" in names  # profile_memory=True: the allocator's events


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def expected_lr(step: int, steps: int) -> float:
    """Linear warmup, then cosine from LR to 0.1 x LR at the last step (SGDR eq. 5, one cycle)."""
    if step <= WARMUP:
        return LR * step / WARMUP
    low, tau = 0.1 * LR, (step - WARMUP) / (steps - WARMUP)
    return low + 0.5 * (LR - low) * (1 + math.cos(math.pi * tau))


def test_metrics_page_lists_every_logged_key():
    """The Training metrics page (en and zh) names every key a record can hold."""
    from tests.launchers import REPO
    for lang in ("en", "zh"):
        page = (REPO / "book" / lang / "training" / "metrics.md").read_text(encoding="utf-8")
        assert not [k for k in METRIC_KEYS | CUDA_KEYS if f"`{k}`" not in page], lang


def test_metrics_jsonl_has_every_key_per_logged_step(ddp_run):
    _, out = ddp_run
    lines = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in lines] == list(range(1, 13))  # --log-every 1: every step
    assert lines == json.loads((out / "run.json").read_text())["steps"]  # the same records
    clipped = 0
    for r in lines:
        assert set(r) == METRIC_KEYS, set(r) ^ METRIC_KEYS
        numbers = [v for k, v in r.items() if k != "clipped"]
        numbers = [x for v in numbers for x in (v if isinstance(v, list) else [v])]
        assert all(isinstance(x, (int, float)) and math.isfinite(x) for x in numbers), r
        assert len(r["grad_norm_blocks"]) == len(r["update_ratio_blocks"]) == 2  # --layers 2
        # The global norm is the norm of its parts: the blocks and everything else.
        assert r["grad_norm"] == pytest.approx(
            math.sqrt(sum(g * g for g in r["grad_norm_blocks"]) + r["grad_norm_other"] ** 2),
            rel=1e-5)
        assert r["grad_norm_max"] == pytest.approx(r["grad_norm"])  # a window of one step
        assert r["clipped"] == (r["grad_norm"] > CLIP)
        clipped += r["clipped"]
        assert r["clipped_steps"] == clipped
        assert r["lr"] == pytest.approx(expected_lr(r["step"], 12), rel=1e-9)
        assert all(0 < u < 1 for u in r["update_ratio_blocks"])
        assert r["loss_spikes"] == 0  # a falling loss is no spike
    assert lines[-1]["lr"] == pytest.approx(0.1 * LR)


def test_fsdp_reduces_sharded_norms_to_the_ddp_values(ddp_run, fsdp_resumed):
    # Same weights, data and clipping from step 7 on: each FSDP rank holds half of every
    # gradient, so only a correct reduction over the ranks gives DDP's norms.
    _, ddp_out = ddp_run
    _, out = fsdp_resumed
    ddp = {r["step"]: r for r in read_jsonl(ddp_out / "metrics.jsonl")}
    fsdp = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in fsdp] == list(range(7, 13))
    for r in fsdp:
        d = ddp[r["step"]]
        assert set(r) == METRIC_KEYS
        for key in ("grad_norm", "grad_norm_other", "lr"):
            assert r[key] == pytest.approx(d[key], rel=1e-4), (r["step"], key)
        for key in ("grad_norm_blocks", "update_ratio_blocks"):
            assert r[key] == pytest.approx(d[key], rel=1e-3), (r["step"], key)
        assert r["clipped"] == d["clipped"]


def test_tensorboard_events_hold_the_logged_scalars(ddp_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    _, out = ddp_run
    assert list((out / "tb").glob("events.out.tfevents.*"))
    events = EventAccumulator(str(out / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    expected = {"loss", "lr", "grad_norm", "grad_norm_max", "grad_norm_other", "clipped",
                "clipped_steps", "loss_spikes", "step_ms", "data_ms", "tokens_per_s",
                "model_tflops", "mfu", "peak_rss_mib", "grad_norm/block_0", "grad_norm/block_1",
                "update_ratio/block_0", "update_ratio/block_1"}
    assert expected <= tags, expected - tags
    logged = read_jsonl(out / "metrics.jsonl")
    for tag, get in (("loss", lambda r: r["loss"]),
                     ("update_ratio/block_1", lambda r: r["update_ratio_blocks"][1])):
        scalars = events.Scalars(tag)
        assert [e.step for e in scalars] == [r["step"] for r in logged]
        assert [e.value for e in scalars] == pytest.approx([get(r) for r in logged], rel=1e-6)


def test_logging_reads_back_only_on_logging_steps(monkeypatch, tmp_path, capsys):
    """In-process run (one rank): every tensor read of the script itself (.item(), .tolist(),
    .cpu(), float(t), ...) happens on a logging step, once per step, after its optimizer step;
    the logged norms, clipping and update ratios match independent computations."""
    import gc

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from tests.launchers import REPO, import_script
    script = REPO / "scripts" / "training" / SCRIPT
    module = import_script(script)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        monkeypatch.delenv(var, raising=False)
    clip = 0.64  # between the gradient norms of these 7 steps (0.61 to 0.66): some clip
    state = {"backward": 0, "step": 0, "model": None}
    reads, pre, post, blocks_pre, ratios = [], {}, {}, {}, {}

    def counted(name, original):
        def wrapper(self, *args, **kwargs):
            if sys._getframe(1).f_code.co_filename == str(script):
                reads.append((state["backward"], state["step"], name))
            return original(self, *args, **kwargs)
        return wrapper
    for name in ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__",
                 "__format__"):
        monkeypatch.setattr(torch.Tensor, name, counted(name, getattr(torch.Tensor, name)))

    ddp_init = DistributedDataParallel.__init__

    def keep_model(self, module, *args, **kwargs):
        state["model"] = module
        ddp_init(self, module, *args, **kwargs)
    monkeypatch.setattr(DistributedDataParallel, "__init__", keep_model)

    def norm(tensors):
        return float(torch.nn.utils.get_total_norm([t for t in tensors if t is not None]))

    def grads(mod):
        return [p.grad for p in mod.parameters()]
    backward = torch.Tensor.backward

    def backward_then_measure(self, *args, **kwargs):
        backward(self, *args, **kwargs)
        state["backward"] += 1
        model = state["model"]
        pre[state["backward"]] = norm(grads(model))  # before the script clips
        blocks_pre[state["backward"]] = [norm(grads(b)) for b in model.blocks]
    monkeypatch.setattr(torch.Tensor, "backward", backward_then_measure)
    adamw_step = torch.optim.AdamW.step

    def step_and_measure(self, *args, **kwargs):
        model = state["model"]
        post[state["backward"]] = norm(grads(model))  # after clipping
        before = [[p.detach().clone() for p in b.parameters()] for b in model.blocks]
        result = adamw_step(self, *args, **kwargs)
        state["step"] += 1
        ratios[state["step"]] = [
            norm([p.detach() - q for p, q in zip(b.parameters(), old, strict=True)])
            / norm([p.detach() for p in b.parameters()])
            for b, old in zip(model.blocks, before, strict=True)]
        return result
    monkeypatch.setattr(torch.optim.AdamW, "step", step_and_measure)

    path = tmp_path / "metrics.jsonl"
    args = module.parse_args(["--strategy", "ddp", "--steps", "7", "--log-every", "3", *SMALL,
                              "--clip-grad", str(clip), "--gc-every", "0",
                              "--metrics-jsonl", str(path)])
    try:
        assert module.run(args) == 0
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        gc.enable()
    logged = read_jsonl(path)
    steps = [r["step"] for r in logged]
    assert steps == [1, 3, 6, 7]
    # One batched read per logging step, after its optimizer step, before the next backward.
    assert [(b, s) for b, s, _ in reads] == [(s, s) for s in steps], reads
    assert {name for *_, name in reads} == {"tolist"}
    assert any(v > clip for v in pre.values()) and any(v < clip for v in pre.values()), pre
    for r in logged:
        s = r["step"]
        assert r["grad_norm"] == pytest.approx(pre[s], rel=1e-5)
        assert r["grad_norm_blocks"] == pytest.approx(blocks_pre[s], rel=1e-5)
        assert r["clipped"] == (pre[s] > clip)
        assert post[s] == pytest.approx(min(pre[s], clip), rel=1e-4)  # clipped to the limit
        assert r["update_ratio_blocks"] == pytest.approx(ratios[s], rel=1e-4)
    assert "# done: 7 steps" in capsys.readouterr().out


def test_tensorboard_without_the_package_is_a_usage_error(monkeypatch, tmp_path):
    import importlib.util

    from tests.launchers import REPO, import_script
    module = import_script(REPO / "scripts" / "training" / SCRIPT)
    for var in ("RANK", "WORLD_SIZE", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tensorboard" else find_spec(name, *a))
    with pytest.raises(module.ScriptError, match="--tensorboard needs the tensorboard package") \
            as err:
        module.parse_args(["--tensorboard", str(tmp_path / "tb")])
    assert err.value.status == 2 and not (tmp_path / "tb").exists()


def test_auto_resume_refuses_a_finished_run(launch, ddp_run):
    # --checkpoint-dir alone resumes from its newest checkpoint; at step 12 of 12 there is
    # nothing left to do, which must be an error rather than a silent no-op.
    _, out = ddp_run
    res = launch.torchrun(SCRIPT, ["--strategy", "ddp", "--steps", "12", *SMALL,
                                   "--checkpoint-dir", str(out / "ckpt")], timeout=120)
    assert res.returncode != 0
    assert any("is at step 12" in line for line in launch.error_lines(res.stderr)), res.stderr


def test_stalled_rank_fails_after_the_short_timeout(launch):
    # Rank 1 stops at step 3. The first-step timeout is 600 s; only if the script shortened it
    # to --timeout-s after step 1 does rank 0 give up within the launcher's 90 s limit.
    res = launch.torchrun(SCRIPT, ["--strategy", "ddp", "--steps", "6", *SMALL,
                                   "--timeout-s", "3", "--first-step-timeout-s", "600"],
                          env={"TRAIN_EXAMPLE_STALL": "1:3"}, timeout=90)
    assert res.returncode != 0
    errors = launch.error_lines(res.stderr)
    assert errors and "Timed out" in errors[0], res.stderr


BAD_INPUT = [
    # Outputs into the checkpoint being resumed (issue 30): refused, the checkpoint untouched.
    Case("json-into-the-resumed-checkpoint", ["--resume-from", "ck", "--json", "ck/.metadata"],
         r"--json ck/\.metadata: is inside ck, which this run reads",
         files={"ck/.metadata": b"x", "ck/__0_0.distcp": b"\x00" * 64}),
    Case("metrics-into-the-auto-resumed-checkpoint",
         ["--checkpoint-dir", "cks", "--metrics-jsonl", "cks/step_00000001/__0_0.distcp"],
         r"--metrics-jsonl cks/step_00000001/__0_0\.distcp: is inside cks/step_00000001, which this run reads",
         files={"cks/step_00000001/.metadata": b"x", "cks/step_00000001/__0_0.distcp": b"\x00" * 64}),
    Case("strategy-unknown", ["--strategy", "zero4"], "invalid choice"),
    Case("steps-zero", ["--steps", "0"], "--steps: 0 must be >= 1"),
    Case("lr-nan", ["--lr", "nan"], "--lr: 'nan' is not a finite number"),
    Case("lr-inf", ["--lr", "inf"], "--lr: 'inf' is not a finite number"),
    Case("timeout-negative", ["--timeout-s", "-5"], "--timeout-s: -5 must be > 0"),
    Case("hidden-not-divisible", ["--hidden", "60", "--heads", "8"], "not divisible by --heads"),
    Case("checkpoint-every-without-dir", ["--checkpoint-every", "5"], "needs --checkpoint-dir"),
    Case("checkpoint-dir-is-file", ["--checkpoint-every", "5", "--checkpoint-dir", "f"],
         "f is a file, not a folder", files={"f": "x"}),
    Case("checkpoint-dir-unwritable", ["--checkpoint-every", "5", "--checkpoint-dir", "/proc/ck"],
         "--checkpoint-dir /proc/ck: cannot write there"),
    Case("checkpoint-dir-empty", ["--checkpoint-dir", ""], "--checkpoint-dir: must not be empty"),
    Case("resume-missing", ["--resume-from", "/nonexistent/step_00000001"],
         "no such checkpoint folder"),
    # Another script's checkpoint: a torch.save file, or a folder holding one (no DCP .metadata).
    Case("resume-from-a-file", ["--resume-from", "other/checkpoint.pt"],
         r"other/checkpoint.pt: is a file; expected a checkpoint folder \(step_XXXXXXXX",
         files={"other/checkpoint.pt": b"PK\x03\x04"}),
    Case("resume-from-foreign-folder", ["--resume-from", "other"],
         r"--resume-from other: not a torch.distributed.checkpoint folder \(no \.metadata; "
         r"found checkpoint.pt\): expected a step_XXXXXXXX folder", files={"other/checkpoint.pt": b"PK"}),
    Case("checkpoint-dir-is-file-resume-only", ["--checkpoint-dir", "f"],
         "--checkpoint-dir f: is a file, not a folder", files={"f": "x"}),
    Case("first-step-timeout-huge", ["--first-step-timeout-s", "1e300"],
         "--first-step-timeout-s: 1e300 must be <= 604800"),
    Case("seed-negative", ["--seed", "-1"], "--seed: -1 must be >= 0"),
    Case("model-too-big-for-memory", ["--layers", "1024", "--hidden", "65536", "--heads", "64"],
         r"the model \(5\.28e\+13 parameters\) needs .* GiB per rank .*make --layers"),
    Case("profile-steps-reversed", ["--profile-steps", "5:3"], "need 1 <= A <= B"),
    Case("profile-after-last-step", ["--steps", "4", "--profile-steps", "2:8"], "ends after --steps"),
    Case("metrics-jsonl-folder-missing", ["--metrics-jsonl", "no/m.jsonl"], "no does not exist"),
    Case("metrics-jsonl-is-folder", ["--metrics-jsonl", "{tmp}"], "--metrics-jsonl .*: is a folder"),
    Case("metrics-jsonl-is-device", ["--metrics-jsonl", "/dev/null"], "is not a regular file"),
    Case("metrics-jsonl-is-json", ["--json", "r.json", "--metrics-jsonl", "./r.json"],
         "--metrics-jsonl .*: --json writes there too; give each output its own path"),
    Case("tensorboard-dir-is-file", ["--tensorboard", "f"], "--tensorboard f: .*f is a file",
         files={"f": "x"}),
    Case("tensorboard-dir-empty", ["--tensorboard", ""], "--tensorboard: must not be empty"),
    Case("clip-grad-negative", ["--clip-grad", "-1"], "--clip-grad: -1 must be >= 0"),
    Case("warmup-longer-than-run", ["--steps", "4", "--warmup-steps", "5"], "longer than --steps"),
    Case("spike-factor-one", ["--spike-factor", "1"], "--spike-factor: 1 must be > 1"),
    Case("profile-dir-is-file", ["--profile-steps", "1:2", "--profile-dir", "f"],
         "--profile-dir f: .*f is a file", files={"f": "x"}),
    Case("env-master-addr-missing", ["--steps", "2"], "environment variable MASTER_ADDR is not set",
         env={"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "{port}"}),
    Case("env-master-port-out-of-range", ["--steps", "2"],
         "environment variable MASTER_PORT=70000 is not a TCP port",
         env={"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "70000"}),
    Case("env-slurm-ntasks-text", [], "SLURM_NTASKS='x' is not an integer",
         env={"SLURM_PROCID": "0", "SLURM_NTASKS": "x"}),
    Case("env-stall-hook-text", ["--steps", "1", *SMALL], "TRAIN_EXAMPLE_STALL='x' is not RANK:STEP",
         env={"TRAIN_EXAMPLE_STALL": "x"}),
    *launcher_cases(["--steps", "2"], ["--first-step-timeout-s", "1"]),
]


@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
@ONE_PROCESS
def test_bad_input(case, tmp_path):
    check_refused("training/train_example.py", case, tmp_path)


def test_foreign_and_truncated_checkpoints_are_explained(ddp_run, tmp_path):
    """Resuming from another script's checkpoint or from a truncated shard is one line saying
    what was expected and what was found, not a PyTorch traceback."""
    _, out = ddp_run
    foreign = tmp_path / "foreign"
    shutil.copytree(out / "ckpt" / "step_00000006", foreign)
    (foreign / ".metadata").write_bytes(b"not a pickle")
    check_refused("training/train_example.py", Case(
        "garbage-metadata", ["--steps", "12", *SMALL, "--resume-from", "foreign"],
        r"foreign/\.metadata: cannot read the checkpoint's metadata .*truncated or damaged", status=1), tmp_path)
    truncated = tmp_path / "truncated"
    shutil.copytree(out / "ckpt" / "step_00000006", truncated)
    for shard in truncated.glob("*.distcp"):
        shard.write_bytes(shard.read_bytes()[:100])
    check_refused("training/train_example.py", Case(
        "truncated", ["--steps", "12", *SMALL, "--resume-from", "truncated"],
        r"truncated: .*cannot read .*truncated or damaged", status=1),
        tmp_path)


def test_impossible_mfu_is_reported(launch, tmp_path):
    """A --peak-tflops below what the device achieves gives an MFU above 100%: the run keeps its
    numbers but says, on stderr, that the peak is wrong."""
    res = launch.python(SCRIPT, ["--steps", "2", *SMALL, "--peak-tflops", "1e-9"], timeout=120)
    assert res.returncode == 0, res.output
    assert any(": warning: MFU up to " in line and "below the" in line and "--peak-tflops" in line
               for line in res.stderr.splitlines()), res.stderr


def test_help_does_not_import_torch(launch):
    code = (f"import runpy, sys\nsys.argv = [{str(launch.scripts / SCRIPT)!r}, '--help']\n"
            "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print('TORCH_IMPORTED' if 'torch' in sys.modules else 'TORCH_NOT_IMPORTED')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30,
                         env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert "TORCH_NOT_IMPORTED" in res.stdout and "--strategy" in res.stdout


@pytest.mark.gpu
def test_fsdp_on_all_gpus_logs_cuda_memory(launch, tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    n = torch.cuda.device_count()
    path = tmp_path / "gpu.json"
    res = launch.torchrun(SCRIPT, ["--strategy", "fsdp", "--steps", "20", "--layers", "4",
                                   "--hidden", "512", "--heads", "8", "--seq-len", "512",
                                   "--json", str(path)], nproc=n, timeout=300)
    assert res.returncode == 0, res.output
    report = json.loads(path.read_text())
    assert report["backend"] == "nccl" and report["dtype"] == "bfloat16"
    steps = report["steps"]
    assert steps[-1]["loss"] < steps[0]["loss"] - 0.5
    for r in steps:
        assert set(r) == (METRIC_KEYS - {"peak_rss_mib"}) | CUDA_KEYS
        assert 0 < r["max_allocated_mib"] <= r["max_reserved_mib"]
        assert 0 < r["active_mib"] <= r["reserved_mib"] <= r["max_reserved_mib"]
        assert r["ooms"] == 0


def test_known_peaks_are_catalogue_rows():
    """The MFU column's peak on a known GPU is the catalogue's dense bf16 figure: each entry names
    a row that the built-in table holds (a renamed row would otherwise vanish from it)."""
    from tests.launchers import REPO, import_script
    module = import_script(REPO / "scripts" / "training" / SCRIPT)
    catalogue = {r["name"]: r for r in yaml.safe_load(
        (REPO / "data/compute/accelerators.yml").read_text(encoding="utf-8"))["rows"]}
    for _, row in module.KNOWN_PEAKS:
        assert module.row_named(module.ACCELERATOR_ROWS, row)["bf16_dense"] == catalogue[row]["bf16_dense"]
