"""Tests of scripts/training/layer_bench.py: micro-benchmarks of a pre-norm transformer block.

Each subcommand runs for real at tiny sizes and its --json validates against
tools/schemas/layer_bench.schema.json. The activation bytes that autograd saves (counted with
saved_tensors_hooks) must equal the block's formula exactly, in bf16 and fp32, and that formula
must differ from memory_estimator.py's Korthikanti term by exactly what the block does not share
with Korthikanti's (no dropout masks, a SwiGLU MLP, LayerNorm statistics). torch.compile must
recompile when a second sequence length is fed. SIGTERM in the middle of a sweep keeps the rows
measured before it. No timing is asserted: only the consistency of the timing fields.
"""

from __future__ import annotations

import json
import signal

import pytest

from tests.bad_input import Case, check_refused
from tests.launchers import ONE_PROCESS, REPO, import_script, interrupt_when
from tools.results import problems

SCRIPT = "layer_bench.py"
TINY = ["--device", "cpu", "--hidden", "64", "--heads", "2", "--seq-len", "32", "--batch", "1",
        "--warmup", "0", "--iters", "1"]


def run(launch, tmp_path, args: list[str]) -> dict:
    out = tmp_path / "r.json"
    res = launch.python(SCRIPT, [*args, *TINY, "--json", str(out)], timeout=120)
    assert res.returncode == 0, res.output
    doc = json.loads(out.read_text())
    assert problems(doc, "--json") == []
    return doc


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_saved_activations_equal_the_formula(launch, tmp_path, dtype):
    doc = run(launch, tmp_path, ["activations", "--dtype", dtype, "--points", "1x16", "3x8",
                                 *(["--ddp"] if dtype == "bf16" else [])])
    assert [(r["batch"], r["seq_len"]) for r in doc["results"]] == [(1, 16), (3, 8)]
    for r in doc["results"]:
        assert r["measured_bytes"] == r["formula_bytes"], r
    if dtype == "bf16":  # DDP's buckets hold one more copy of every gradient
        assert doc["ddp"]["bucket_bytes"] == doc["ddp"]["grad_bytes"] > 0


def test_formula_against_the_memory_estimator():
    lb = import_script(REPO / "scripts" / "training" / SCRIPT)
    me = import_script(REPO / "scripts" / "training" / "memory_estimator.py")
    s, b, h, a, f = 128, 2, 256, 4, 704
    ours = lb.block_activation_bytes(s, b, h, a, f, e=2, stat=2)
    theirs = me.activation_bytes_per_layer(s, b, h, a, flash_attention=True, ffn=f)
    # no dropout masks (-2sbh), SwiGLU keeps 4 ffn-wide tensors where a GeLU MLP keeps 2 (+4sbf),
    # two LayerNorms' mean and rstd (+4sb x 2 bytes)
    assert ours - theirs == -2 * s * b * h + 4 * s * b * f + 8 * s * b


@pytest.mark.slow  # dynamo traces the block three times: ~4 s on a quiet machine
def test_compile_recompiles_for_a_second_shape(launch, tmp_path):
    doc = run(launch, tmp_path, ["compile", "--backend", "eager"])
    eager, compiled = doc["results"]
    assert (eager["mode"], eager["recompiles"], eager["compile_s"]) == ("eager", 0, 0)
    assert compiled["mode"] == "compile (eager)" and compiled["recompiles"] >= 1
    assert compiled["compile_s"] > 0 and doc["backend"] == "eager" and doc["dynamic"] is False


def test_swiglu_widths_and_fwd_bwd_ratios(launch, tmp_path):
    doc = run(launch, tmp_path, ["swiglu", "--span", "16", "--step", "8"])
    widths = [r["ffn"] for r in doc["results"]]
    assert widths == list(range(152, 184 + 1, 8))  # 8/3 x 64 = 170.7, +-16, on multiples of 8
    assert [r["multiple_of"] for r in doc["results"]] == [0, 0, 0, 0, 0]  # 192 would be 64's
    for r in doc["results"]:
        flops = 6 * 32 * 64 * r["ffn"]
        assert r["tflops"] == pytest.approx(flops / (r["forward_ms"] / 1e3) / 1e12)
    doc = run(launch, tmp_path, ["fwd-bwd", "--layers", "linear", "softmax", "embedding"])
    assert [r["layer"] for r in doc["results"]] == ["linear", "softmax", "embedding"]
    for r in doc["results"]:
        assert r["bwd_over_fwd"] == pytest.approx(r["backward_ms"] / r["forward_ms"])


BAD_INPUT = [
    Case("no-test", [], r"the following arguments are required: test"),
    Case("test-unknown", ["train"], r"argument test: invalid choice: 'train'"),
    Case("heads-do-not-divide", ["swiglu", "--hidden", "100", "--heads", "3"],
         r"--hidden 100 is not a multiple of --heads 3"),
    Case("iters-zero", ["fwd-bwd", "--iters", "0"], r"--iters: 0 must be >= 1"),
    Case("hidden-nan", ["swiglu", "--hidden", "nan"], r"--hidden: 'nan' is not"),
    Case("point-malformed", ["activations", "--points", "2by128"], r"--points: '2by128' is not BATCHxSEQ"),
    Case("point-zero", ["activations", "--points", "0x128"], r"--points: 0x128: batch must be in"),
    Case("shape-too-large", ["fwd-bwd", "--seq-len", "65536", "--batch", "64"],
         r"batch x seq-len x the widest layer is over"),
    Case("too-many-widths", ["swiglu", "--span", "4096", "--step", "1"], r"over 1000 widths"),
    Case("layer-unknown", ["fwd-bwd", "--layers", "conv"], r"--layers: invalid choice: 'conv'"),
    Case("bucket-cap-zero", ["activations", "--ddp", "--bucket-cap-mb", "0"],
         r"--bucket-cap-mb: 0 must be > 0"),
    Case("backend-empty", ["compile", "--backend", ""], r"--backend: must not be empty"),
    Case("threads-zero", ["fwd-bwd", "--threads", "0"], r"--threads: 0 must be >= 1"),
    Case("cuda-absent", ["swiglu", "--device", "cuda"], r"--device cuda, but torch sees no CUDA",
         status=1, env={"CUDA_VISIBLE_DEVICES": ""}),
    Case("abbreviated-option", ["swiglu", "--hid", "64"], r"unrecognized arguments: --hid"),
]


@ONE_PROCESS
@pytest.mark.parametrize("case", [c.param() for c in BAD_INPUT])
def test_careless_input_is_refused(case, tmp_path):
    check_refused(f"training/{SCRIPT}", case, tmp_path)


def test_sigterm_in_a_sweep_writes_the_rows_measured(tmp_path):
    """scancel or a job's time limit in the middle of the SwiGLU sweep (570 widths): the rows
    printed so far are written, marked interrupted, and the run says so and exits 143."""
    out = tmp_path / "sweep.json"
    tiny = [a for a in TINY if a not in ("--heads", "2")] + ["--heads", "4"]
    res = interrupt_when(REPO / "scripts" / "training" / SCRIPT,
                         ["swiglu", *tiny, "--span", "400", "--step", "1", "--json", str(out)],
                         lambda lines: len(lines) >= 4, signal.SIGTERM)  # the header and 3 rows
    assert res.returncode == 143 and "Traceback" not in res.stderr, res.stderr
    doc = json.loads(out.read_text())
    assert problems(doc, "--json") == [] and doc["interrupted"] is True
    printed = [line.split() for line in res.stdout.splitlines()[1:] if not line.startswith("#")]
    assert 3 <= len(doc["results"]) == len(printed) < 570
    assert f"# interrupted after {len(printed)} row(s)" in res.stdout
    assert [r["ffn"] for r in doc["results"]] == [int(row[0]) for row in printed]
