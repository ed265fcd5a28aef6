"""The careless-input runs fork from a torch-preloaded server (tests/preloaded.py): on a sample of
cases from several scripts (torch and standard library only, one distributed), a forked run and a
real `python SCRIPT` give the same exit status, the same stdout and the same error lines."""

import importlib
import os
import select
import subprocess
import sys

import pytest

from tests import bad_input, preloaded

# (test module, script under scripts/): the tables the sample is drawn from.
TABLES = [
    ("tests.compute.test_mamf_finder", "compute/mamf_finder.py"),
    ("tests.compute.test_upgrade_cost", "compute/upgrade_cost.py"),
    ("tests.debug.test_make_tiny_model", "debug/make_tiny_model.py"),
    ("tests.inference.test_kv_cache_calculator", "inference/kv_cache_calculator.py"),
    ("tests.network.test_all_reduce_bench", "network/all_reduce_bench.py"),
]


def _sample():
    for module, script in TABLES:
        cases = [c for c in importlib.import_module(module).BAD_INPUT if not c.fresh_process]
        for case in cases[::4]:  # every fourth: each kind of check, a quarter of the time
            yield pytest.param(script, case, id=f"{script}:{case.id}")


def _normalised(text: str, fill: dict[str, str]) -> str:
    return text.replace(fill["tmp"], "{tmp}").replace(fill["port"], "{port}")


@pytest.mark.parametrize("script, case", list(_sample()))
def test_a_forked_run_answers_as_a_real_interpreter(script, case, tmp_path):
    answers = []
    for fresh in (True, False):
        tmp = tmp_path / ("fresh" if fresh else "forked")
        tmp.mkdir()
        path, argv, env, fill = bad_input.prepare(script, case, tmp)
        proc = bad_input.run(path, argv, env, tmp, case, fresh_process=fresh)
        errors = [line for line in proc.stderr.splitlines() if ": error: " in line]
        answers.append((proc.returncode, _normalised(proc.stdout, fill), [_normalised(e, fill) for e in errors]))
    assert answers[0] == answers[1]


def test_the_child_sees_argv_path_cwd_environment_and_stdio_as_a_real_run(tmp_path):
    probe = tmp_path / "probe.py"
    env = {"PROBE": "1", "PATH": "/usr/bin"}
    probe.write_text(
        "import os, sys, signal\n"
        "print(sys.argv, sys.path[0], os.getcwd(), os.environ.get('PROBE'),\n"
        f"      sorted(os.environ) == sorted({sorted(env)!r}),\n"
        "      __name__, sys.stdin.read(), os.getsid(0) == os.getpid(),\n"
        "      signal.getsignal(signal.SIGINT) is signal.default_int_handler)\n"
        "print('to stderr', file=sys.stderr)\n"
        "sys.exit(3)\n", encoding="utf-8")
    real = subprocess.run([sys.executable, str(probe), "a b", "--x"], cwd=tmp_path, env=env,
                                        capture_output=True, text=True, timeout=60, start_new_session=True,
                                        stdin=subprocess.DEVNULL)
    forked = preloaded.run(probe, ["a b", "--x"], tmp_path, env, timeout=60)
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)
    assert real.returncode == 3 and "True" in real.stdout


def test_a_module_run_sees_what_python_dash_m_gives(tmp_path):
    """``-m MODULE`` (how tests/launchers.py starts torchrun): argv[0] the module's file, sys.path[0]
    the folder it starts in, ``__name__`` "__main__", and its package's modules found from there."""
    (tmp_path / "probe_pkg").mkdir()
    (tmp_path / "probe_pkg" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "probe_pkg" / "run.py").write_text(
        "import os, sys\n"
        "print(sys.argv, sys.path[0] == os.getcwd(), __name__, __spec__.name, 'probe_pkg' in sys.modules)\n",
        encoding="utf-8")
    env = {"PATH": "/usr/bin"}
    real = subprocess.run([sys.executable, "-m", "probe_pkg.run", "--x"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60, start_new_session=True, stdin=subprocess.DEVNULL)
    forked = preloaded.run("-m probe_pkg.run", ["--x"], tmp_path, env, timeout=60)
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)
    module_file = str(tmp_path / "probe_pkg" / "run.py")
    assert real.stdout.startswith(f"[{module_file!r}, '--x'] True __main__ probe_pkg.run True")


def test_an_uncaught_exception_and_a_hang_end_as_in_a_real_run(tmp_path):
    crash = tmp_path / "crash.py"
    crash.write_text("raise ValueError('boom')\n", encoding="utf-8")
    forked = preloaded.run(crash, [], tmp_path, {"PATH": "/usr/bin"}, timeout=60)
    assert forked.returncode == 1 and forked.stderr.strip().endswith("ValueError: boom")
    hang = tmp_path / "hang.py"
    hang.write_text("import time\nprint('started', flush=True)\ntime.sleep(600)\n", encoding="utf-8")
    with pytest.raises(subprocess.TimeoutExpired):
        preloaded.run(hang, [], tmp_path, {"PATH": "/usr/bin"}, timeout=2)


# Prints a line, waits until its reader has closed stdout (poll reports POLLERR on the pipe), then
# prints once more: the write fails at once when unbuffered, at the interpreter's exit otherwise.
WRITES_AFTER_READER_LEFT = """import select, sys, time
print("first", flush=True)
poller = select.poll()
poller.register(sys.stdout.fileno(), 0)
while not any(events & select.POLLERR for _, events in poller.poll(0)):
    time.sleep(0.01)
print("after the reader left")
"""


@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_a_closed_stdout_ends_as_in_a_real_run(tmp_path, unbuffered):
    """Status 1 and a BrokenPipeError traceback for a failed write; status 120 and "Exception
    ignored" when only the exit's flush fails (what tests/test_closed_stdout.py relies on)."""
    probe = tmp_path / "probe.py"
    probe.write_text(WRITES_AFTER_READER_LEFT, encoding="utf-8")
    env = {"PATH": "/usr/bin", "PYTHONUNBUFFERED": unbuffered}
    read_fd, write_fd = os.pipe()
    real = subprocess.Popen([sys.executable, str(probe)], cwd=tmp_path, env=env, stdout=write_fd,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    os.close(write_fd)
    os.read(read_fd, 1)
    os.close(read_fd)
    real_err = real.communicate(timeout=60)[1]
    fifo = tmp_path / "stdout.fifo"
    os.mkfifo(fifo)
    read_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    forked = preloaded.start(probe, [], tmp_path, env, stdout=fifo)
    select.select([read_fd], [], [], 60)
    os.read(read_fd, 1)
    os.close(read_fd)
    forked_err = forked.wait(60).stderr
    assert (forked.process.exitcode, forked_err.splitlines()[-1]) == (real.returncode, real_err.splitlines()[-1])
    assert real.returncode == (1 if unbuffered else 120)
    assert "Exception ignored" in forked_err if not unbuffered else "Traceback" in forked_err
