#!/usr/bin/env python
"""rank_debugger.py: pdb on one rank of a torchrun job while the other ranks wait, under a deadline.

The chosen rank runs your script under pdb, stopped before its first line (or, from your code,
``breakpoint_on_rank(R)`` stops rank R at the line after the call). The other ranks wait for it
in the rendezvous store (torchrun's TCPStore, or the process group's store once
``init_process_group`` ran), not in a collective: the first pdb command that resumes the rank
(``c``, ``n``, ``s``, ``r``, ``unt``) lets them go on, ``q`` stops them. If nobody resumes it
within ``--timeout-s``, each waiting rank prints one line naming the rank it waited for and exits
with status 1, and torchrun ends the job.

pdb reads the terminal that torchrun was started from: torchrun starts each rank in a session of
its own, so ``/dev/tty`` does not open there, and the rank opens the terminal its stdin or stderr
is instead. Without one (a batch job, ``--remote``), pdb is served on a TCP port, bound to
127.0.0.1 unless ``--bind`` says otherwise, behind a random token written to a 0600 file; the
client, ``connect``, sends the token first. From another machine, forward the port with
``ssh -L`` rather than binding to a public address.

How to launch::

    torchrun --nproc-per-node 4 rank_debugger.py --rank 2 -- train.py --lr 1e-3
    torchrun --nproc-per-node 4 rank_debugger.py --rank 2 --remote --port 5678 -- train.py
    python rank_debugger.py connect 127.0.0.1:5678 --token-file rank_debugger.rank2.token

or from your script (this file beside it, or on PYTHONPATH)::

    from rank_debugger import breakpoint_on_rank
    breakpoint_on_rank(2, timeout_s=600)

Example output (2-core cloud VM, a 2-rank gloo job whose line 7 is an all-reduce; rank 1
debugged, the commands ``b 7``, ``c``, ``p rank, t`` and ``c`` typed at its prompt)::

    $ torchrun --nproc-per-node 2 rank_debugger.py --rank 1 -- train.py
    rank_debugger.py: rank 1 of 2 on vm (pid 19511) is in pdb; the other ranks wait up to 600 s for it to resume
    > /tmp/job/train.py(1)<module>()
    -> import os
    (Pdb) b 7
    Breakpoint 1 at /tmp/job/train.py:7
    (Pdb) c
    > /tmp/job/train.py(7)<module>()
    -> dist.all_reduce(t)
    (Pdb) p rank, t
    (1, tensor([1.]))
    (Pdb) c
    rank 1: sum 1
    rank 0: sum 1

and when nobody resumes it (``--timeout-s 1``), rank 0 says, before torchrun ends the job::

    rank_debugger.py: error: rank 0 waited 1 s for rank 1 (in pdb) to resume; nobody did

Exit status: the script's own (0 when it ends normally, 1 when it raises); 1 on a rank that
waited in vain, whose debugged rank quit or failed, or when nobody connected within the timeout;
2 usage. ``connect``: 0 when the session ends, 1 when the rank refuses the token or cannot be
reached, 2 usage.
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import math
import os
import pdb
import secrets
import select
import socket
import sys
import tempfile
import threading
import time
import traceback
import types

PROG = "rank_debugger.py"
KEY = "rank_debugger"       # prefix of this script's keys in the store
CONNECT_S = 30.0            # the longest a rank waits to reach the store, a client to reach a rank
POLL_S = 0.5               # how often a waiting rank asks the store
HANDSHAKE_S = 10.0          # the longest a connection may take to send its token
_calls = 0                  # breakpoints so far in this process: every rank counts the same


class RankPdb(pdb.Pdb):
    """pdb that tells the waiting ranks (``release``) when the user first resumes the program."""

    def __init__(self, release, **kwargs):
        super().__init__(nosigint=True, **kwargs)
        self.release, self.released, self.user_quit = release, False, False

    def postcmd(self, stop, line):
        self.user_quit |= bool(stop and self.quitting)      # q, exit, Ctrl-D
        if stop and not self.released:      # a command that resumes the program or quits
            self.released = True
            self.release("quit" if self.quitting else "resume")
        return super().postcmd(stop, line)


# --- where the other ranks wait --------------------------------------------------------------------

def open_store(launch, timeout_s: float):
    """The store every rank reaches: the process group's once it exists, else torchrun's."""
    import datetime

    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.distributed_c10d._get_default_store()
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        raise ScriptError(f"{launch.world} ranks, but no torchrun store and no process group yet: "
                          "launch with torchrun, or call breakpoint_on_rank after init_process_group",
                          EXIT_USAGE)
    with deadline(CONNECT_S + 5, f"rank {launch.rank}: reaching the store at {launch.master}"):
        return dist.TCPStore(launch.addr, launch.port, is_master=False, wait_for_workers=False,
                             timeout=datetime.timedelta(seconds=min(CONNECT_S, timeout_s)))


def wait_for(store, key: str, me: int, debugged: int, timeout_s: float) -> None:
    """Wait up to ``timeout_s`` for the debugged rank's word; exit 1 in one line without it. It
    asks the store twice a second (``check`` returns at once) rather than block in ``wait``."""
    start = time.monotonic()
    with deadline(timeout_s + 30, f"rank {me}: waiting for rank {debugged} (in pdb)"):
        try:
            while not store.check([key]):
                if time.monotonic() - start >= timeout_s:
                    die(f"rank {me} waited {timeout_s:g} s for rank {debugged} (in pdb) to resume; nobody did")
                time.sleep(POLL_S)
            word = store.get(key).decode()
        except Exception as exc:  # noqa: BLE001 - the store gone with its host
            die(f"rank {me} lost the store after {time.monotonic() - start:.0f} s of waiting for rank "
                f"{debugged} ({type(exc).__name__}: {(str(exc).splitlines() or [''])[0]})")
    if word != "resume":
        die(f"rank {me} stops: rank {debugged} (in pdb) {word}")


# --- where pdb reads and writes ----------------------------------------------------------------------

def open_terminal():
    """The terminal as (input, output) text files: /dev/tty, else the terminal stdin or stderr is
    (torchrun starts each rank in a session of its own, without a controlling terminal, where
    /dev/tty fails with ENXIO); None without one."""
    paths = ["/dev/tty"] + [os.ttyname(fd) for fd in (0, 2, 1) if os.isatty(fd)]
    for path in paths:
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
        except OSError:
            continue
        return os.fdopen(fd, "r", encoding="utf-8", errors="replace"), os.fdopen(os.dup(fd), "w", buffering=1)
    return None


def write_token(path: str) -> str:
    """A fresh random token, written to ``path`` (mode 0600, through a rename)."""
    token = secrets.token_urlsafe(24)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".token-")  # 0600
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.replace(tmp, path)
    return token


def serve(me: str, bind: str, port: int, token_file: str, timeout_s: float, sock=None):
    """Listen on bind:port and return the first connection that sends the token, as a text file;
    a wrong token is answered, closed and logged. ScriptError after ``timeout_s`` without one."""
    if sock is None:
        sock = listen(bind, port)
    host, port = sock.getsockname()[:2]
    token = write_token(token_file)
    say(f"{PROG}: {me}: pdb waits up to {timeout_s:g} s for a client on {host}:{port}; run: "
        f"python {PROG} connect {host}:{port} --token-file {token_file}", sys.stderr)
    end = time.monotonic() + timeout_s
    with sock:
        while (left := end - time.monotonic()) > 0:
            sock.settimeout(left)
            try:
                conn, peer = sock.accept()
            except TimeoutError:
                break
            conn.settimeout(HANDSHAKE_S)
            try:
                sent = read_line(conn)
            except OSError:
                sent = b""
            if hmac.compare_digest(sent.strip(), token.encode()):
                conn.settimeout(None)
                conn.sendall(f"{PROG}: connected to pdb on {me}\n".encode())
                return (conn.makefile("r", encoding="utf-8", errors="replace"),
                        conn.makefile("w", encoding="utf-8", errors="replace"))
            say(f"{PROG}: {me}: refused a client from {peer[0]} (wrong token)", sys.stderr)
            with conn:
                try:
                    conn.sendall(f"{PROG}: wrong token\n".encode())
                except OSError:
                    pass
    raise ScriptError(f"{me}: nobody connected to {host}:{port} within {timeout_s:g} s")


def read_line(conn, limit: int = 512) -> bytes:
    """One line from a socket, byte by byte: a buffered reader would swallow what follows it."""
    line = b""
    while not line.endswith(b"\n") and len(line) < limit and (byte := conn.recv(1)):
        line += byte
    return line


def listen(bind: str, port: int):
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(bind).version == 6 else socket.AF_INET
        return socket.create_server((bind, port), family=family)
    except OSError as err:
        raise ScriptError(f"--bind {bind} --port {port}: cannot listen there ({os.strerror(err.errno)})",
                          EXIT_USAGE) from None


# --- the breakpoint ------------------------------------------------------------------------------------

def start(rank: int, timeout_s: float, remote: bool, bind: str, port: int, token_file: str | None,
          sock=None) -> RankPdb | None:
    """On every rank: the debugged one gets its RankPdb (its io chosen, the others told when it
    resumes); the others return None once it has resumed, or exit 1 in one line."""
    global _calls
    launch = Launch()
    if not 0 <= rank < launch.world:
        raise ScriptError(f"--rank {rank} is outside the job's ranks 0-{launch.world - 1}", EXIT_USAGE)
    _calls += 1
    run = f"{os.environ.get('TORCHELASTIC_RUN_ID', '')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    key = f"{KEY}/{run}/{_calls}"
    store = open_store(launch, timeout_s) if launch.world > 1 else None
    if launch.rank != rank:
        wait_for(store, key, launch.rank, rank, timeout_s)
        return None
    me = f"rank {rank} of {launch.world} on {launch.host} (pid {os.getpid()})"

    def release(word: str) -> None:
        if store is not None:
            store.set(key, word)
    try:
        files = None if remote else open_terminal()
        if files is None:
            if not remote:
                say(f"{PROG}: {me}: no terminal to read from; serving pdb over TCP instead", sys.stderr)
            files = serve(me, bind, port, token_file or f"rank_debugger.rank{rank}.token", timeout_s, sock)
    except BaseException as exc:
        release(f"failed: {exc}")
        raise
    files[1].write(f"{PROG}: {me} is in pdb; the other ranks wait up to {timeout_s:g} s for it to resume\n")
    return RankPdb(release, stdin=files[0], stdout=files[1])


def breakpoint_on_rank(rank: int, timeout_s: float = 600.0, remote: bool = False, bind: str = "127.0.0.1",
                       port: int = 0, token_file: str | None = None) -> None:
    """Stop rank ``rank`` in pdb at the caller's next line; every rank must call this, as it would
    a collective. The others wait up to ``timeout_s`` seconds for it to resume, else exit 1."""
    try:
        debugger = start(rank, timeout_s, remote, bind, port, token_file)
    except ScriptError as exc:
        die(str(exc), exc.status)
    if debugger is not None:
        debugger.set_trace(sys._getframe(1))   # last statement: pdb stops in the caller, not here


def run_script(path: str, args: list[str], debugger: RankPdb | None) -> int:
    """Run ``path`` as ``__main__`` (as ``python path args`` would), under ``debugger`` if given."""
    with open(path, "rb") as f:
        code = compile(f.read(), path, "exec")
    sys.modules.setdefault("rank_debugger", sys.modules[__name__])  # its breakpoint_on_rank is this one
    main_module = types.ModuleType("__main__")
    main_module.__dict__.update(__file__=path, __builtins__=__builtins__)
    sys.modules["__main__"], sys.argv, sys.path[0] = main_module, [path, *args], os.path.dirname(path)
    try:
        if debugger is None:
            exec(code, main_module.__dict__)
        else:
            debugger.run(code, main_module.__dict__)
            if debugger.user_quit:
                raise ScriptError(f"rank {Launch().rank} quit in pdb before the script ended")
    except (ScriptError, SystemExit, KeyboardInterrupt):
        raise
    except Exception:  # noqa: BLE001 - whatever the script raises ends it as python would
        traceback.print_exc()           # the script's own traceback, as python would print it
        return EXIT_FAILURE
    finally:
        if debugger is not None and not debugger.released:
            debugger.release("failed before it resumed")
    return EXIT_OK


# --- the client ------------------------------------------------------------------------------------------

def connect(address: str, token_file: str) -> int:
    """Send the token, then copy stdin to the rank and its pdb's output to stdout until it closes."""
    host, _, port_text = address.rpartition(":")
    host = host.strip("[]")
    if not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ScriptError(f"{address!r} is not HOST:PORT (e.g. 127.0.0.1:5678)", EXIT_USAGE)
    token = read_input(token_file, "--token-file", limit=1 << 20).decode(errors="replace").strip()
    if not token or len(token.split()) != 1:
        raise ScriptError(f"--token-file {token_file}: holds no token (one word, as the rank wrote it)",
                          EXIT_USAGE)
    try:
        sock = socket.create_connection((host, int(port_text)), timeout=CONNECT_S)
        sock.sendall(token.encode() + b"\n")
        first = read_line(sock).decode(errors="replace")
    except OSError as err:
        raise ScriptError(f"cannot reach {host}:{port_text} ({err.strerror or err})") from None
    if not first.startswith(f"{PROG}: connected"):
        raise ScriptError(f"{host}:{port_text} refused the token in {token_file} "
                          f"({first.strip().removeprefix(PROG + ': ') or 'closed'})")
    sys.stdout.write(first)
    sys.stdout.flush()
    sock.settimeout(None)
    with sock:
        inputs = [sock, sys.stdin]
        while True:
            ready, _, _ = select.select(inputs, [], [])
            if sock in ready:
                data = sock.recv(65536)
                if not data:
                    return EXIT_OK
                sys.stdout.buffer.write(data)
                sys.stdout.flush()
            if sys.stdin in ready:
                data = os.read(sys.stdin.fileno(), 65536)
                if data:
                    sock.sendall(data)
                else:                            # Ctrl-D: pdb sees the end of its input
                    sock.shutdown(socket.SHUT_WR)
                    inputs = [sock]


# --- command line --------------------------------------------------------------------------------------------

def address(text: str) -> str:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IP address (e.g. 127.0.0.1, ::1)") from None
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Run a script with pdb on one rank while the others wait under a deadline; "
        "or connect to a rank's pdb served over TCP.",
        usage="%(prog)s --rank R [--timeout-s S] [--remote] [--bind ADDR] [--port P] [--token-file F] "
              "-- script.py [args ...]\n       %(prog)s connect HOST:PORT --token-file F")
    p.add_argument("--debug", action="store_true", help="on failure, print the traceback too")
    p.add_argument("--rank", type=number(int, 0), help="the rank to debug")
    p.add_argument("--timeout-s", type=number(float, 0, 7 * 86400, lo_open=True), default=600.0,
                   help="how long the other ranks (and a --remote rank) wait, in seconds (default 600)")
    p.add_argument("--remote", action="store_true", help="serve pdb over TCP even where there is a terminal")
    p.add_argument("--bind", type=address, default="127.0.0.1",
                   help="address the remote pdb listens on (default 127.0.0.1: reach it with ssh -L)")
    p.add_argument("--port", type=number(int, 0, 65535), default=0, help="its TCP port (default 0: any free one)")
    p.add_argument("--token-file", type=nonempty,
                   help="where the token goes (default rank_debugger.rank<R>.token); connect reads it")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- script.py [args ...], or connect HOST:PORT")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["connect"]:
        args = parser.parse_args(argv[2:])
        if len(argv) < 2 or argv[1].startswith("-") or args.command or not args.token_file:
            parser.error("connect needs HOST:PORT and --token-file F")
        return connect(argv[1], args.token_file)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.rank is None or not command:
        parser.error("give --rank R and, after --, the script to run")
    script = os.path.abspath(command[0])
    if not os.path.isfile(script):
        raise ScriptError(f"{command[0]}: no such script (give a .py file after --)", EXIT_USAGE)
    if args.token_file:
        check_output(args.token_file, "--token-file", inputs=(script,))
    if not ipaddress.ip_address(args.bind).is_loopback:
        say(f"{PROG}: warning: --bind {args.bind} is not loopback: anyone who reaches this port may try "
            "tokens; prefer 127.0.0.1 and ssh -L", sys.stderr)
    launch = Launch()
    if args.rank >= launch.world:
        raise ScriptError(f"--rank {args.rank} is outside the job's ranks 0-{launch.world - 1}", EXIT_USAGE)
    sock = None
    if args.rank == launch.rank and args.remote:   # a port in use is a usage error, found at once
        sock = listen(args.bind, args.port)
    debugger = start(args.rank, args.timeout_s, args.remote, args.bind, args.port, args.token_file, sock)
    return run_script(script, command[1:], debugger)


# --- script contract and shared code (CONTRIBUTING.md, "Script contract"): what this script uses, ---
# --- generated from tools/script_contract.py and tools/script_shared.py by `python tools/script_contract.py sync`. ---

EXIT_OK, EXIT_FAILURE, EXIT_USAGE, EXIT_FINDING, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class ScriptError(Exception):
    """A failure the user can act on. ``run_main`` prints it as the one line
    ``PROG: error: MESSAGE`` and exits with ``status`` (EXIT_FAILURE unless given)."""

    def __init__(self, message: str, status: int = EXIT_FAILURE):
        super().__init__(message)
        self.status = status


def number(kind=float, lo=None, hi=None, lo_open=False):
    """An argparse ``type`` that accepts a finite ``kind`` (int or float) in [lo, hi] (``lo``
    excluded when ``lo_open``); nan, inf and out-of-range values are usage errors naming the
    option."""
    def parse(text: str):
        shown = text if len(text) <= 40 else f"{text[:12]}... ({len(text)} characters)"
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{shown!r} is not {what}") from None
        # An int is always finite; math.isfinite on one beyond a float's range raises OverflowError.
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{shown!r} is not a finite number")
        if lo is not None and (value <= lo if lo_open else value < lo):
            raise argparse.ArgumentTypeError(f"{shown} must be {'>' if lo_open else '>='} {lo:g}")
        if hi is not None and value > hi:
            raise argparse.ArgumentTypeError(f"{shown} must be <= {hi:g}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def nonempty(text: str) -> str:
    """An argparse ``type`` for names and paths: the empty string is a usage error."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def env_int(name: str, default: int | None = None, lo: int = 0) -> int:
    """The integer environment variable ``name`` (``default`` when unset or empty, an error when
    there is no default); a non-integer or a value below ``lo`` raises ScriptError naming it."""
    text = os.environ.get(name, "").strip()
    if not text:
        if default is None:
            raise ScriptError(f"environment variable {name} is not set", EXIT_USAGE)
        return default
    try:
        value = int(text)
    except ValueError:
        raise ScriptError(f"environment variable {name}={text!r} is not an integer", EXIT_USAGE) from None
    if value < lo:
        raise ScriptError(f"environment variable {name}={value} must be >= {lo}", EXIT_USAGE)
    return value


OUTPUTS: dict[str, str] = {}  # real path -> the option that writes it, filled by check_output


def check_output(path: str, option: str, inputs=()) -> str:
    """Check, before any work, that ``path`` (given as ``option``) can receive a result: a
    regular file or nothing yet, not one of ``inputs`` (files, or folders read whole, such as a
    checkpoint being resumed) nor inside one, not a path another option of this run writes, in
    an existing folder where a file can be created. Returns the path; raises ScriptError naming
    the option otherwise. A folder option checks each file it will write here, under its name."""
    folder = os.path.dirname(os.path.abspath(path)) or "/"
    if os.path.isdir(path):
        raise ScriptError(f"{option} {path}: is a folder; give a file name", EXIT_USAGE)
    # write_atomic renames over the path: it would replace a device or pipe (/dev/null, a FIFO).
    if os.path.exists(path) and not os.path.isfile(path):
        raise ScriptError(f"{option} {path}: is not a regular file; give a file name", EXIT_USAGE)
    real = os.path.realpath(path)
    for item in inputs:
        if os.path.realpath(item) == real:
            raise ScriptError(f"{option} {path}: is also an input; write the result elsewhere", EXIT_USAGE)
        if os.path.isdir(item) and real.startswith(os.path.join(os.path.realpath(item), "")):
            raise ScriptError(f"{option} {path}: is inside {item}, which this run reads; write the "
                              "result elsewhere", EXIT_USAGE)
    if OUTPUTS.get(real, option) != option:
        raise ScriptError(f"{option} {path}: {OUTPUTS[real]} writes there too; give each output "
                          "its own path", EXIT_USAGE)
    if not os.path.isdir(folder):
        what = "is not a folder" if os.path.exists(folder) else "does not exist"
        raise ScriptError(f"{option} {path}: {folder} {what}", EXIT_USAGE)
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        raise ScriptError(f"{option} {path}: cannot write in {folder} ({err.strerror})", EXIT_USAGE) from None
    OUTPUTS[real] = option
    return path


class deadline:
    """``with deadline(seconds, "what"):`` bounds a wait that has no timeout of its own (or one
    that retries): after ``seconds`` it prints ``PROG: error: WHAT did not finish within S s``
    and ends the process at once (os._exit, since the stuck call cannot be unwound)."""

    def __init__(self, seconds: float, what: str):
        self.timer = threading.Timer(seconds, self._expire, (seconds, what))
        self.timer.daemon = True

    @staticmethod
    def _expire(seconds: float, what: str) -> None:
        sys.stdout.flush()
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {what} did not finish within {seconds:g} s\n")
        sys.stderr.flush()
        os._exit(EXIT_FAILURE)

    def __enter__(self):
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.timer.cancel()


def stdout_reader_gone() -> bool:
    """True when stdout is a pipe whose reading end was closed (poll reports POLLERR on it)."""
    import select
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no fileno (a test's StringIO), closed
        return False


def reader_left(exc: BaseException | None = None) -> bool:
    """True when ``exc`` (by default the exception being handled), or the one it was raised from,
    is the BrokenPipeError of a reader that closed stdout (``| head -1``): no error. stdout then
    goes to /dev/null, so that neither a later write nor the flush at exit fails again."""
    exc = sys.exc_info()[1] if exc is None else exc
    if not (isinstance(exc, BrokenPipeError) or isinstance(getattr(exc, "__cause__", None), BrokenPipeError)):
        return False
    if not stdout_reader_gone():
        return False
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    return True


def say(line: str, stream=None) -> None:
    """Write ``line`` and its newline to ``stream`` (stdout) in one write, and flush: the ranks of
    a job share the launcher's stdout and stderr, and print() writes the newline apart, so two
    ranks' lines could run together. A reader of stdout that left (``| head -1``) ends no rank,
    since the others would fail in their next collective without it: the rank goes on."""
    stream = sys.stdout if stream is None else stream
    try:
        stream.write(line + "\n")
        stream.flush()
    except BrokenPipeError:
        if stream is not sys.stdout or not reader_left():
            raise


def die(message: str | None, status: int = EXIT_FAILURE, debug: bool = False) -> None:
    """End a rank of a distributed script at once: ``PROG: error: MESSAGE`` (its first line) on
    stderr, after the traceback of the exception being handled when ``debug``, then
    os._exit(status); no line when ``message`` is None. Not sys.exit: after a failed collective,
    process-group teardown can wait for peers that are gone, and a rank that hangs on its way out
    is what these scripts exist to prevent. Called while handling the BrokenPipeError of a reader
    that closed stdout (``| head -1``), it exits quietly with EXIT_OK, as run_main does; output
    that a reader gone meanwhile can no longer take is dropped."""
    if reader_left():
        message, status = None, EXIT_OK
    elif debug and sys.exc_info()[1] is not None:
        traceback.print_exc()
    try:
        sys.stdout.flush()
    except (OSError, ValueError):  # a reader gone meanwhile, a closed stdout: the exit drops it
        pass
    if message is not None:
        first = " ".join(str(message).strip().splitlines()[:1]) or "unknown error"
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {first}\n")
        sys.stderr.flush()
    os._exit(status)


def run_main(main, argv=None) -> None:
    """Run ``main(argv)`` and exit with its status; a failure becomes one line on stderr
    (``PROG: error: ...``): ScriptError with its status, Ctrl-C with EXIT_INTERRUPTED (Interrupted
    with its own), anything else with EXIT_FAILURE. ``--debug`` (before any ``--``) shows the
    traceback as well. A reader that closed stdout (``| head -1``) ends the run quietly, with the
    status it had (0), even where a failure was raised from its BrokenPipeError."""
    args = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in (args[:args.index("--")] if "--" in args else args)
    status = None
    try:
        try:
            status = main(argv)
        finally:
            sys.stdout.flush()  # a reader that left (`| head -1`) shows here, not at exit
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - DCP's CheckpointException is a BaseException
        if reader_left(exc):
            # The reader of stdout stopped reading, as `| head -1` does: exit quietly with the
            # status the run had so far (0), like `cat`, so a `set -o pipefail` job does not fail.
            context = exc.__context__
            sys.exit(context.code if isinstance(context, SystemExit) else status or EXIT_OK)
        if debug:
            traceback.print_exc()
        if isinstance(exc, ScriptError):
            status, message = exc.status, str(exc)
        elif isinstance(exc, KeyboardInterrupt):  # Ctrl-C, or Interrupted: SIGTERM too
            status = getattr(exc, "status", EXIT_INTERRUPTED)
            message = "interrupted" if status == EXIT_INTERRUPTED else f"interrupted by {exc}"
        else:
            status, message = EXIT_FAILURE, f"{type(exc).__name__}: {exc}"
        lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
        sys.stdout.flush()
        sys.stderr.write(f"{os.path.basename(sys.argv[0])}: error: {lines[0] if lines else type(exc).__name__}\n")
    sys.exit(status or EXIT_OK)


def read_input(path: str, option: str, limit: int = 64 << 20, wait_s: float = 10.0) -> bytes:
    """The bytes of the input ``path`` given as ``option``: a regular file, or a pipe (``<(cmd)``,
    a FIFO) read until its writer closes it, at most ``limit`` bytes and ``wait_s`` seconds.
    Raises ScriptError (usage) naming the option and the path when it is missing, a folder, a
    device such as /dev/zero, larger than ``limit``, a pipe still open after ``wait_s``, or
    unreadable."""
    import select
    import stat
    import time

    def refuse(why: str):
        return ScriptError(f"{option} {path}: {why}", EXIT_USAGE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO without a writer must not block
    except FileNotFoundError:
        raise refuse("does not exist") from None
    except OSError as err:
        raise refuse(f"cannot read it ({err.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise refuse("is a folder; give a file")
        if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
            raise refuse("is not a regular file or a pipe")
        chunks, size, end = [], 0, time.monotonic() + wait_s
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while size <= limit:
            if stat.S_ISFIFO(mode) and not poller.poll(max(0.0, end - time.monotonic()) * 1000):
                raise refuse(f"a pipe that gave no end of data within {wait_s:g} s")
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:  # the poll saw the writer go, then a new one come
                continue
            except OSError as err:
                raise refuse(f"cannot read it ({err.strerror})") from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise refuse(f"larger than {limit >> 20} MiB, more than this input ever holds")
    return b"".join(chunks)


class Launch:
    """This process's place in a distributed run, from the environment: torchrun's (or any
    env:// launch's) RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE when RANK or WORLD_SIZE is
    set; else plain srun's SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID when it started more than
    one task; else a lone process, rank 0 of 1. ``launcher`` says which: "torchrun", "env", "srun"
    or "python". Each variable is read with env_int, so one that is not an integer is a usage
    error naming it; so are fewer ranks than ``min_world``, a rank outside the world and, for more
    than one rank, a missing MASTER_ADDR or MASTER_PORT or a port outside 1-65535. ``addr`` and
    ``port`` are where rank 0 (or torchrun's agent) hosts the rendezvous; ``master`` is
    "ADDR:PORT", None for a lone process (it makes a group of one without a network port)."""

    def __init__(self, min_world: int = 1):
        import socket
        env = os.environ
        self.host = socket.gethostname()
        if "RANK" in env or "WORLD_SIZE" in env:
            self.launcher = "torchrun" if "TORCHELASTIC_RUN_ID" in env else "env"
            names = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
        elif "SLURM_PROCID" in env and env_int("SLURM_NTASKS", 1, lo=1) > 1:
            self.launcher, names = "srun", ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")
        else:
            self.launcher, names = "python", None
        self.rank, self.world = (env_int(names[0]), env_int(names[1], lo=1)) if names else (0, 1)
        self.local_rank = env_int(names[2], 0) if names else 0
        self.local_world = env_int("LOCAL_WORLD_SIZE", 1, lo=1)
        if self.world < min_world:
            raise ScriptError(f"needs at least {min_world} ranks (world size is {self.world}); launch "
                              f"with torchrun --nproc-per-node {min_world} (or more), or srun", EXIT_USAGE)
        if self.rank >= self.world:
            raise ScriptError(f"rank {self.rank} is outside world size {self.world} (check "
                              f"{names[0]} and {names[1]})", EXIT_USAGE)
        self.addr, self.port, self.master = None, None, None
        if self.launcher != "python":
            self._read_master()

    def _read_master(self) -> None:
        missing = [name for name in ("MASTER_ADDR", "MASTER_PORT") if not os.environ.get(name, "").strip()]
        if missing and self.world > 1:
            both = len(missing) > 1
            raise ScriptError(
                f"MASTER_ADDR and MASTER_PORT must be set for rank {self.rank} of {self.world} "
                f"(launched by {self.launcher}): environment variable{'s' * both} "
                f"{' and '.join(missing)} {'are' if both else 'is'} not set; export "
                f"{'them' if both else 'it'} (the first node's address and a free port) or launch "
                "with torchrun", EXIT_USAGE)
        if not missing:
            self.addr, self.port = os.environ["MASTER_ADDR"].strip(), env_int("MASTER_PORT")
            if not 1 <= self.port <= 65535:
                raise ScriptError(f"environment variable MASTER_PORT={self.port} is not a TCP port "
                                  "(1-65535)", EXIT_USAGE)
            self.master = f"{self.addr}:{self.port}"

    def me(self) -> str:
        return f"rank {self.rank} on {self.host}"

    def command(self, argv=None) -> str:
        """The command line of the run, for a results file: ``command_line()`` with the launcher's
        own in front of it (``torchrun --nnodes N --nproc-per-node M``, ``srun --ntasks N``)."""
        line = command_line(argv)
        if self.launcher == "torchrun":
            nnodes = os.environ.get("GROUP_WORLD_SIZE", "1")
            return f"torchrun --nnodes {nnodes} --nproc-per-node {self.local_world} {line.removeprefix('python ')}"
        return f"srun --ntasks {self.world} {line}" if self.launcher == "srun" else line


def command_line(argv=None, script: str | None = None) -> str:
    """``python SCRIPT ARGS``, how this script was run, for a results file's ``command``: SCRIPT
    is sys.argv[0] relative to the current folder, ARGS sys.argv[1:]; where main was called with
    ``argv`` (a test, a calculator page) ARGS are ``argv``, and SCRIPT is ``script`` (the file's
    name) when sys.argv[0] names another program."""
    import shlex
    path = sys.argv[0]
    if argv is not None and script and os.path.basename(path) != script:
        path = script
    path = os.path.relpath(path) if os.path.exists(path) else path
    return shlex.join(["python", path, *(sys.argv[1:] if argv is None else argv)])
# --- end of script contract ---


if __name__ == "__main__":
    run_main(main)
