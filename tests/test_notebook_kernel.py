"""Kernels forked from the preloaded server (tests/notebook_kernel.py) behave as fresh ones: the
same answers to a probe of what a notebook can see, figures shown inline, an interrupt that stops
a cell, and no kernel left behind when its launcher is killed."""

import os
import signal
import time

import psutil
import pytest
from nbval.kernel import CURRENT_ENV_KERNEL_NAME, start_new_kernel

from tests import notebook_kernel

PROBE = """import os, signal, sys
import matplotlib, matplotlib.pyplot as plt
print(sys.argv[0].rsplit('/', 1)[-1], os.getcwd(), os.environ.get('PROBE'), matplotlib.get_backend(),
      signal.getsignal(signal.SIGTERM), sys.path[0] != os.path.dirname(notebook_kernel_file))
plt.plot([1, 2])
plt.show()
"""


@pytest.fixture(scope="module")
def preloaded_kernels():
    folder, stop = notebook_kernel.start_server()
    saved = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = folder
    yield
    stop()
    if saved is None:
        os.environ.pop("JUPYTER_PATH")
    else:
        os.environ["JUPYTER_PATH"] = saved


OVERLAP = """import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.plot([0, 1])
ax.annotate('label one', (0.5, 0.5))
ax.annotate('label two', (0.5, 0.5))
plt.show()
"""


def _run(kernel_name: str, code: str, cwd, timeout: float = 60):
    km, kc = start_new_kernel(kernel_name=kernel_name, cwd=str(cwd), env={**os.environ, "PROBE": "seen"})
    outputs = []
    try:
        kc.execute_interactive(f"notebook_kernel_file = {notebook_kernel.__file__!r}\n" + code, timeout=timeout,
                               output_hook=lambda msg: outputs.append(msg))
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    text = "".join(m["content"].get("text", "") for m in outputs if m["msg_type"] == "stream")
    images = [m for m in outputs if m["msg_type"] == "display_data" and "image/png" in m["content"]["data"]]
    errors = [f"{m['content']['ename']}: {m['content']['evalue']}" for m in outputs if m["msg_type"] == "error"]
    return text, images, errors


@pytest.mark.slow
def test_a_forked_kernel_answers_the_probe_as_a_fresh_one(preloaded_kernels, tmp_path):
    fresh = _run(CURRENT_ENV_KERNEL_NAME, PROBE, tmp_path)
    forked = _run(notebook_kernel.KERNEL_NAME, PROBE, tmp_path)
    assert forked[0] == fresh[0] and "ipykernel_launcher.py" in fresh[0] and str(tmp_path) in fresh[0]
    assert "seen module://matplotlib_inline.backend_inline" in forked[0]
    assert len(forked[1]) == len(fresh[1]) == 1  # the figure, shown inline
    assert forked[2] == fresh[2] == []


@pytest.mark.slow
def test_a_figure_with_text_over_text_is_an_error_of_its_cell(preloaded_kernels, tmp_path):
    """What nbval sees when a notebook's labels overlap: the cell's figure is not shown, an error is."""
    _, images, errors = _run(notebook_kernel.KERNEL_NAME, OVERLAP, tmp_path)
    assert not images
    assert errors == ["LabelOverlap: text drawn over other text: axes: 'label one' overlaps 'label two'"]
    _, images, errors = _run(notebook_kernel.KERNEL_NAME, OVERLAP.replace("(0.5, 0.5))\nplt", "(0.1, 0.9))\nplt"),
                             tmp_path)
    assert len(images) == 1 and not errors  # moved apart, it shows


def test_an_interrupt_stops_a_cell_and_a_killed_launcher_takes_its_kernel(preloaded_kernels, tmp_path):
    km, kc = start_new_kernel(kernel_name=notebook_kernel.KERNEL_NAME, cwd=str(tmp_path))
    try:
        launcher = psutil.Process(km.provisioner.process.pid)
        msg_id = kc.execute("import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)")
        pid = None
        while pid is None:
            msg = kc.get_iopub_msg(timeout=30)
            if msg["msg_type"] == "stream":
                pid = int(msg["content"]["text"].split()[0])
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=30)
        while reply["parent_header"]["msg_id"] != msg_id:  # start_new_kernel's own requests, answered late
            reply = kc.get_shell_msg(timeout=30)
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
        assert pid != launcher.pid and psutil.pid_exists(pid)
        launcher.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the kernel outlived its launcher"
            time.sleep(0.05)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
