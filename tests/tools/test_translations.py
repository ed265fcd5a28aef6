"""Tests for tools/translations.py: translation records, states, stamping and the CLI.

Most tests build a throw-away tree under tmp_path; ``test_real_repo_*`` check the
actual book (English/Chinese pairing and records must be complete; stale pages
only warn, but a stale Chinese script summary fails: the appendix shows the English one then).
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
from mkdocs.exceptions import PluginError

from tests.conftest import require_tool
from tools import translations as tr

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, str(REPO / "tools" / "translations.py")]
# this checkout's tools/ package, not the one installed (editable) from another checkout
CLI_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}

EN_PAGE = "# Bandwidth\n\nThe all-reduce bandwidth of a node.\n"
ZH_BODY = "# 带宽\n\n节点的 all-reduce 带宽。\n\n```\ncode --- not front matter\n```\n"
EN_NOTEBOOK = """\
# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Latency

# %%
print("latency")
"""
ZH_NOTEBOOK = EN_NOTEBOOK.replace("# # Latency", "# # 延迟")


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_bytes(text.encode("utf-8"))
    return path


def record(sha: str) -> str:
    return f"---\ntranslation:\n  source_sha256: {sha}\n---\n"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A small repo: one ok page, one ok notebook."""
    en = write(tmp_path / "book/en/network/bandwidth.md", EN_PAGE)
    write(tmp_path / "book/zh/network/bandwidth.md", record(tr.english_sha256(en)) + ZH_BODY)
    nb = write(tmp_path / "notebooks/network/latency.py", EN_NOTEBOOK)
    write(tmp_path / "notebooks/network/latency.zh.py", ZH_NOTEBOOK)
    tr.stamp(tmp_path / "notebooks/network/latency.zh.py", tmp_path)
    assert tr.read_record(tmp_path / "notebooks/network/latency.zh.py") == tr.english_sha256(nb)
    return tmp_path


def states(root: Path) -> dict[str, str]:
    return {s.zh_path.relative_to(root).as_posix(): s.state for s in tr.statuses(root)}


def cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "--root", str(root), *args], capture_output=True, text=True, env=CLI_ENV)


# ----------------------------------------------------------------- hashing and records

def test_hash_normalises_crlf_only(tmp_path):
    lf = write(tmp_path / "lf.md", b"a\nb\n")
    crlf = write(tmp_path / "crlf.md", b"a\r\nb\r\n")
    other = write(tmp_path / "other.md", b"a\nb \n")
    assert tr.english_sha256(lf) == tr.english_sha256(crlf)
    assert tr.english_sha256(lf) != tr.english_sha256(other)
    assert len(tr.english_sha256(lf)) == 64


def test_read_record_keeps_other_front_matter(tmp_path):
    sha = "ab" * 32
    page = write(tmp_path / "p.md", f"---\ntitle: 带宽\ntranslation:\n  source_sha256: {sha}\nhide: [toc]\n---\n# x\n")
    assert tr.read_record(page) == sha
    assert tr.read_record(write(tmp_path / "none.md", "# no front matter\n")) is None
    assert tr.read_record(write(tmp_path / "bad.md", "---\ntranslation: [\n---\n")) is None


def test_all_states_detected(tree):
    assert states(tree) == {"book/zh/network/bandwidth.md": "ok", "notebooks/network/latency.zh.py": "ok"}
    # stale after editing English
    (tree / "book/en/network/bandwidth.md").write_text(EN_PAGE + "\nMore text.\n", encoding="utf-8")
    # missing zh
    write(tree / "book/en/network/latency.md", "# Latency\n")
    # orphan zh (no English source)
    write(tree / "book/zh/network/orphan.md", record("cd" * 32) + "# 孤儿\n")
    # no record, and an invalid record
    write(tree / "book/en/storage/io.md", "# IO\n")
    write(tree / "book/zh/storage/io.md", "# 输入输出\n")
    write(tree / "book/en/storage/fs.md", "# FS\n")
    write(tree / "book/zh/storage/fs.md", record("not-a-hash") + "# 文件系统\n")
    assert states(tree) == {
        "book/zh/network/bandwidth.md": "stale",
        "book/zh/network/latency.md": "missing-zh",
        "book/zh/network/orphan.md": "missing-en",
        "book/zh/storage/fs.md": "no-record",
        "book/zh/storage/io.md": "no-record",
        "notebooks/network/latency.zh.py": "ok",
    }
    st = tr.page_status(tree / "book/en/network/bandwidth.md", tree / "book/zh/network/bandwidth.md")
    assert st.state == "stale" and st.recorded != st.current and st.kind == "page"


def test_crlf_checkout_of_english_is_not_stale(tree):
    en = tree / "book/en/network/bandwidth.md"
    en.write_bytes(en.read_bytes().replace(b"\n", b"\r\n"))
    assert states(tree)["book/zh/network/bandwidth.md"] == "ok"


def test_pairs_ignore_symlinks_helpers_and_checkpoints(tree):
    (tree / "book/en/network/latency.ipynb").symlink_to("../../../notebooks/network/latency.ipynb")
    write(tree / "notebooks/network/_helpers.py", "def f():\n    return 1\n")
    write(tree / "notebooks/network/.ipynb_checkpoints/latency-checkpoint.py", EN_NOTEBOOK)
    assert len(tr.pairs(tree)) == 2
    # a .py with a paired .ipynb is a notebook even without a header
    write(tree / "notebooks/network/plain.py", "# %%\nx = 1\n")
    write(tree / "notebooks/network/plain.ipynb", "{}")
    assert states(tree)["notebooks/network/plain.zh.py"] == "missing-zh"


def test_counterpart(tree):
    assert tr.counterpart(tree / "book/en/a/b.md", tree) == tree / "book/zh/a/b.md"
    assert tr.counterpart(tree / "book/zh/a/b.md", tree) == tree / "book/en/a/b.md"
    assert tr.counterpart(tree / "notebooks/a/n.py", tree) == tree / "notebooks/a/n.zh.py"
    assert tr.counterpart(tree / "notebooks/a/n.zh.py", tree) == tree / "notebooks/a/n.py"
    with pytest.raises(ValueError):
        tr.counterpart(tree / "tools/x.md", tree)


def test_status_for_resolves_what_mkdocs_sees(tree):
    """The hook entry point: Chinese pages and notebook symlinks map to a Status; English to None."""
    assert tr.status_for(tree / "book/zh/network/bandwidth.md", tree).state == "ok"
    assert tr.status_for(tree / "book/en/network/bandwidth.md", tree) is None
    write(tree / "notebooks/network/latency.zh.ipynb", "{}")
    link = tree / "book/zh/network/latency.ipynb"
    link.symlink_to("../../../notebooks/network/latency.zh.ipynb")
    st = tr.status_for(link, tree)
    assert st.kind == "notebook" and st.state == "ok"
    (tree / "notebooks/network/latency.py").write_text(EN_NOTEBOOK + "# edit\n", encoding="utf-8")
    assert tr.status_for(link, tree).state == "stale"
    assert tr.status_for(tree / "README.md", tree) is None
    tr.stamp(link, tree)  # stamping the notebook link writes the .zh.py source
    assert tr.status_for(link, tree).state == "ok"


# ----------------------------------------------------------------- stamping

def test_stamp_makes_stale_page_ok_and_keeps_body(tree):
    zh = tree / "book/zh/network/bandwidth.md"
    front = "---\ntitle: 带宽\ntranslation:\n  source_sha256: " + "00" * 32 + "  # old\nhide:\n  - toc\n---\n"
    write(zh, front + ZH_BODY)
    assert states(tree)["book/zh/network/bandwidth.md"] == "stale"
    previous, sha = tr.stamp(zh, tree)
    assert previous == "00" * 32 and sha == tr.english_sha256(tree / "book/en/network/bandwidth.md")
    assert states(tree)["book/zh/network/bandwidth.md"] == "ok"
    text = zh.read_text(encoding="utf-8")
    assert text.endswith("---\n" + ZH_BODY)
    assert text.startswith("---\ntitle: 带宽\ntranslation:\n")
    assert "hide:\n  - toc\n---\n" in text


@pytest.mark.parametrize("front", [
    "",                                              # no front matter at all
    "---\n---\n",                                    # empty front matter
    "---\ntitle: x\nsearch:\n  boost: 2\n---\n",     # other keys, no translation
    "---\ntranslation:\n  translator: 张三\n---\n",  # translation block without hash
])
def test_stamp_adds_record_and_keeps_body_bytes(tree, front):
    zh = write(tree / "book/zh/network/bandwidth.md", front + ZH_BODY)
    tr.stamp(zh, tree)
    data = zh.read_bytes()
    assert data.endswith(ZH_BODY.encode())
    assert tr.page_status(tree / "book/en/network/bandwidth.md", zh).state == "ok"
    if "translator" in front:
        assert tr._load_header(zh)["translation"]["translator"] == "张三"


def test_stamp_crlf_page_keeps_crlf(tree):
    zh = write(tree / "book/zh/network/bandwidth.md", (record("11" * 32) + ZH_BODY).replace("\n", "\r\n"))
    tr.stamp(zh, tree)
    data = zh.read_bytes()
    assert b"\n" not in data.replace(b"\r\n", b"")
    assert data.endswith(ZH_BODY.replace("\n", "\r\n").encode())
    assert states(tree)["book/zh/network/bandwidth.md"] == "ok"


def test_stamp_is_idempotent(tree):
    zh = tree / "book/zh/network/bandwidth.md"
    before = zh.read_bytes()
    tr.stamp(zh, tree)
    assert zh.read_bytes() == before


def test_stamp_refuses_english_and_orphans(tree):
    with pytest.raises(ValueError):
        tr.stamp(tree / "book/en/network/bandwidth.md", tree)
    orphan = write(tree / "book/zh/network/orphan.md", "# 孤儿\n")
    with pytest.raises(FileNotFoundError):
        tr.stamp(orphan, tree)
    inline = write(tree / "book/zh/network/bandwidth.md", "---\ntranslation: {source_sha256: x}\n---\n")
    with pytest.raises(tr.StampError):
        tr.stamp(inline, tree)


# ----------------------------------------------------------------- notebooks

def test_notebook_stamp_keeps_cells_and_header(tree):
    zh = tree / "notebooks/network/latency.zh.py"
    text = zh.read_text(encoding="utf-8")
    assert text.startswith("# ---\n# jupyter:\n")
    assert text.endswith(ZH_NOTEBOOK.split("# ---\n", 2)[2])  # cells unchanged
    assert "#     name: python3\n" in text  # kernelspec kept
    # editing the English notebook makes it stale, stamping fixes it
    en = tree / "notebooks/network/latency.py"
    en.write_text(EN_NOTEBOOK + "\n# %%\nprint(2)\n", encoding="utf-8")
    assert states(tree)["notebooks/network/latency.zh.py"] == "stale"
    tr.stamp(zh, tree)
    assert states(tree)["notebooks/network/latency.zh.py"] == "ok"


def test_notebook_without_header_gets_one(tree):
    zh = write(tree / "notebooks/network/latency.zh.py", "# %%\nprint('延迟')\n")
    assert states(tree)["notebooks/network/latency.zh.py"] == "no-record"
    tr.stamp(zh, tree)
    assert zh.read_text(encoding="utf-8").endswith("\n\n# %%\nprint('延迟')\n")
    assert states(tree)["notebooks/network/latency.zh.py"] == "ok"


def test_notebook_record_survives_jupytext_sync(tree):
    """The record is notebook metadata: jupytext carries it .py -> .ipynb -> .py."""
    jupytext = pytest.importorskip("jupytext")
    zh = tree / "notebooks/network/latency.zh.py"
    sha = tr.read_record(zh)
    nb = jupytext.read(zh)
    assert nb.metadata["book"]["translation"]["source_sha256"] == sha
    ipynb = zh.with_suffix(".ipynb")
    jupytext.write(nb, ipynb)
    assert json.loads(ipynb.read_text(encoding="utf-8"))["metadata"]["book"]["translation"]["source_sha256"] == sha
    back = tree / "notebooks/network/roundtrip.zh.py"
    jupytext.write(jupytext.read(ipynb), back, fmt="py:percent")
    assert tr.read_record(back) == sha
    # and the command-line sync used by the notebook pipeline
    exe = shutil.which("jupytext", path=str(Path(sys.executable).parent)) or shutil.which("jupytext")
    if exe:
        subprocess.run([exe, "--set-formats", "ipynb,py:percent", str(zh)], check=True, capture_output=True)
        meta = json.loads(ipynb.read_text(encoding="utf-8"))["metadata"]
        assert meta["book"]["translation"]["source_sha256"] == sha
        assert tr.read_record(zh) == sha


# ----------------------------------------------------------------- CLI

def test_cli_exit_codes(tree):
    assert cli(tree, "status").returncode == 0
    r = subprocess.run([*CLI, "status", "--root", str(tree)], capture_output=True, text=True, env=CLI_ENV)
    assert r.returncode == 0 and "bandwidth.md" in r.stdout  # --root after the subcommand
    en = tree / "book/en/network/bandwidth.md"
    en.write_text(EN_PAGE + "edit\n", encoding="utf-8")
    r = cli(tree, "status")
    assert r.returncode == 0 and "stale" in r.stdout
    assert cli(tree, "status", "--strict").returncode == 1
    data = json.loads(cli(tree, "status", "--json").stdout)
    assert {d["zh"]: d["state"] for d in data}["book/zh/network/bandwidth.md"] == "stale"
    r = cli(tree, "stamp", "book/zh/network/bandwidth.md")  # root-relative path works
    assert r.returncode == 0, r.stderr
    assert cli(tree, "status", "--strict").returncode == 0
    write(tree / "book/en/network/new.md", "# New\n")
    assert cli(tree, "status").returncode == 1  # missing-zh
    write(tree / "book/zh/network/new.md", "# 新\n")
    assert cli(tree, "status").returncode == 1  # no-record
    assert cli(tree, "stamp", str(tree / "book/zh/network/new.md")).returncode == 0
    assert cli(tree, "status").returncode == 0
    write(tree / "book/zh/network/orphan.md", record("ab" * 32))
    assert cli(tree, "status").returncode == 1  # missing-en
    assert cli(tree, "stamp", "book/zh/network/orphan.md").returncode == 1


def test_cli_empty_tree_fails(tmp_path):
    assert cli(tmp_path, "status").returncode == 1


def test_cli_diff_shows_english_changes_since_record(tree):
    require_tool("git")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    git = lambda *a: subprocess.run(["git", "-C", str(tree), *a], check=True, capture_output=True, env=env)  # noqa: E731
    git("init", "-q")
    git("add", "-A")
    git("commit", "-qm", "translated")
    en = tree / "book/en/network/bandwidth.md"
    en.write_text(EN_PAGE + "A brand new paragraph.\n", encoding="utf-8")
    git("commit", "-qam", "english edit")
    r = cli(tree, "diff", "book/zh/network/bandwidth.md")
    assert r.returncode == 0, r.stderr
    assert "+A brand new paragraph." in r.stdout
    tr.stamp(tree / "book/zh/network/bandwidth.md", tree)
    r = cli(tree, "diff", "book/zh/network/bandwidth.md")
    assert r.returncode == 0 and "up to date" in r.stdout


# ----------------------------------------------------------------- script summaries

SCRIPT = '"""s.py: measure the\nthing.\n\nUsage: python scripts/network/s.py\n"""\nprint(1)\n'
PURPOSE = "s.py: measure the thing."  # the first paragraph, on one line


def summaries_file(entries: dict[str, tuple[str, str]]) -> str:
    return "# the Chinese summaries\n\n" + "\n".join(
        f"{script}:\n  zh: {zh}\n  source_sha256: {sha}\n" for script, (zh, sha) in entries.items())


@pytest.fixture
def summarised(tree: Path) -> Path:
    """The small repo plus an English page that embeds one script, and that script's Chinese summary."""
    write(tree / "book/en/network/bandwidth.md", EN_PAGE + "\n<!-- embed-script: scripts/network/s.py -->\n")
    tr.stamp(tree / "book/zh/network/bandwidth.md", tree)
    write(tree / "scripts/network/s.py", SCRIPT)
    entry = ("s.py：测量这件事。", tr.text_sha256(PURPOSE))
    write(tree / tr.SUMMARIES, summaries_file({"scripts/network/s.py": entry}))
    return tree


def summary_states(root: Path) -> dict[str, str]:
    return {s.en_path.relative_to(root).as_posix(): s.state for s in tr.statuses(root) if s.kind == "summary"}


def test_summary_record_is_of_the_first_paragraph_only(summarised):
    assert summary_states(summarised) == {"scripts/network/s.py": "ok"}
    script = summarised / "scripts/network/s.py"
    script.write_text(SCRIPT.replace("print(1)", "print(2)").replace("Usage:", "Run:"), encoding="utf-8")
    assert summary_states(summarised) == {"scripts/network/s.py": "ok"}
    script.write_text(SCRIPT.replace("the\nthing", "the\nother thing"), encoding="utf-8")
    st = tr.summary_status("scripts/network/s.py", summarised)
    assert st.state == "stale" and st.recorded == tr.text_sha256(PURPOSE) != st.current


def test_stale_summary_is_reported_and_stamp_records_it(summarised):
    path = summarised / tr.SUMMARIES
    before = path.read_text(encoding="utf-8")
    assert cli(summarised, "status", "--strict").returncode == 0
    (summarised / "scripts/network/s.py").write_text(SCRIPT.replace("measure", "time"), encoding="utf-8")
    r = cli(summarised, "status")
    assert r.returncode == 0, r.stderr
    assert any(line.split()[:2] == ["stale", "summary"] and line.endswith("scripts/network/s.py")
               for line in r.stdout.splitlines()), r.stdout
    assert cli(summarised, "status", "--strict").returncode == 1
    r = cli(summarised, "stamp", "scripts/network/s.py")
    assert r.returncode == 0, r.stderr
    new_sha = tr.text_sha256(PURPOSE.replace("measure", "time"))
    assert path.read_text(encoding="utf-8") == before.replace(tr.text_sha256(PURPOSE), new_sha)  # that line only
    assert cli(summarised, "status", "--strict").returncode == 0
    assert cli(summarised, "stamp", str(path)).returncode == 0  # every entry: unchanged
    assert path.read_text(encoding="utf-8") == before.replace(tr.text_sha256(PURPOSE), new_sha)


def test_stamp_adds_a_missing_record_to_its_own_entry(summarised):
    path = summarised / tr.SUMMARIES
    write(summarised / "scripts/network/t.py", SCRIPT.replace("s.py", "t.py"))
    write(summarised / "book/en/network/bandwidth.md",
          EN_PAGE + "\n<!-- embed-script: scripts/network/t.py -->\n<!-- embed-script: scripts/network/s.py -->\n")
    tr.stamp(summarised / "book/zh/network/bandwidth.md", summarised)
    entry = "scripts/network/t.py:\n  zh: t.py：测量。\n\n"  # no source_sha256
    path.write_text(entry + path.read_text(encoding="utf-8"), encoding="utf-8")
    assert summary_states(summarised)["scripts/network/t.py"] == "no-record"
    sha = tr.text_sha256(PURPOSE.replace("s.py", "t.py"))
    assert tr.stamp_summary("scripts/network/t.py", summarised) == (None, sha)
    assert summary_states(summarised) == {"scripts/network/s.py": "ok", "scripts/network/t.py": "ok"}
    assert tr.load_summaries(summarised)["scripts/network/t.py"]["zh"] == "t.py：测量。"


def test_missing_and_orphan_summaries_fail_status(summarised):
    write(summarised / "scripts/network/u.py", SCRIPT.replace("s.py", "u.py"))
    en = summarised / "book/en/network/bandwidth.md"
    en.write_text(en.read_text(encoding="utf-8") + "<!-- embed-script: scripts/network/u.py -->\n", encoding="utf-8")
    tr.stamp(summarised / "book/zh/network/bandwidth.md", summarised)
    assert summary_states(summarised)["scripts/network/u.py"] == "missing-zh"
    assert cli(summarised, "status").returncode == 1
    r = cli(summarised, "stamp", "scripts/network/u.py")
    assert r.returncode == 1 and "write its zh:" in r.stderr  # nothing to stamp
    en.write_text(EN_PAGE, encoding="utf-8")  # no page embeds a script now: the entry is an orphan
    tr.stamp(summarised / "book/zh/network/bandwidth.md", summarised)
    assert summary_states(summarised) == {"scripts/network/s.py": "missing-en"}
    assert cli(summarised, "status").returncode == 1


def _appendix_hook():
    """build/hooks/book_markers.py, loaded by its path as mkdocs loads a hook."""
    path = REPO / "build" / "hooks" / "book_markers.py"
    spec = importlib.util.spec_from_file_location("book_markers_under_test", path)
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks


def test_the_zh_appendix_prints_the_summary_and_refuses_a_missing_one(caplog):
    hooks, script = _appendix_hook(), "scripts/network/all_reduce_bench.py"
    page = SimpleNamespace(file=SimpleNamespace(src_uri="zh/appendix/scripts.md"))
    english = hooks.script_purpose(REPO / script)
    entry = {"zh": "all_reduce_bench.py：测量 all-reduce 带宽。", "source_sha256": tr.text_sha256(english)}
    assert hooks._purpose(script, "en", {script: entry}, page) == english
    assert hooks._purpose(script, "zh", {script: entry}, page) == entry["zh"]
    stale = {script: {**entry, "source_sha256": "0" * 64}}
    with caplog.at_level("INFO"):
        assert hooks._purpose(script, "zh", stale, page) == english  # the current English, and said so
    assert f"summary of {script} is stale" in caplog.text
    for entries in ({}, {script: {"zh": entry["zh"]}}):  # no entry; an entry without a record
        with pytest.raises(PluginError, match=f"zh/appendix/scripts.md: {script} has no Chinese summary"):
            hooks._purpose(script, "zh", entries, page)


# ----------------------------------------------------------------- the real repository

def test_real_repo_pages_are_paired_and_recorded():
    """Every English page/notebook has a Chinese counterpart and vice versa, each with a record."""
    result = tr.statuses(REPO)
    pages = [s for s in result if s.kind == "page"]
    assert pages, "no book pages found under book/en or book/zh: the book must not be empty"
    problems = [f"{s.state}: {s.zh_path.relative_to(REPO)} <- {s.en_path.relative_to(REPO)}"
                for s in result if s.state in tr.FAILING_STATES]
    assert not problems, "translation pairing/records broken (fix, then `python tools/translations.py " \
                         "stamp <zh file>`):\n" + "\n".join(problems)
    stale = [str(s.zh_path.relative_to(REPO)) for s in result if s.state == "stale"]
    if stale:
        warnings.warn("stale Chinese translations (English changed since the recorded version; "
                      "see `python tools/translations.py diff <zh file>`):\n" + "\n".join(stale), stacklevel=1)


def test_real_repo_every_embedded_script_has_a_current_chinese_summary():
    """book/zh/appendix/script_summaries.yml has one entry per embedded script, each recording the
    English paragraph it translates. Stale fails here (unlike a stale page, which only warns): the
    Chinese appendix prints the English paragraph instead of a stale translation."""
    result = tr.summary_statuses(REPO)
    assert len(result) >= 40, "the scripts appendix lost its scripts"
    problems = [f"{s.state}: {s.en_path.relative_to(REPO)}" for s in result if s.state != "ok"]
    assert not problems, (f"Chinese script summaries to write or update in {tr.SUMMARIES.as_posix()} (then "
                          "`python tools/translations.py stamp scripts/<part>/<file>`):\n" + "\n".join(problems))
