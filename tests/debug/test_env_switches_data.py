"""data/debug/env_switches.yml: the environment switches of the Environment switches page. Every
row names real variables and cites an https source, the switches the page relies on are all
there, the names PyTorch declares are the ones the installed torch declares (with the flight
recorder's default), and both pages render the table through the build's own marker hook.
(The file meets tools/schemas/data/table.schema.json: tests/tools/test_data_schemas.py.)"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from tests.launchers import REPO

DATA = REPO / "data" / "debug" / "env_switches.yml"
MARKER = "<!-- data-table: data/debug/env_switches.yml -->"
TEXT_COLUMNS = ("values", "default", "prints", "cost")
NAME = re.compile(r"[A-Z][A-Z0-9_]*[A-Z0-9]")
# The switches the page's prose names; dropping one from the file must fail here.
REQUIRED = {
    "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "TORCH_DISTRIBUTED_DEBUG",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_BLOCKING_WAIT",
    "TORCH_NCCL_DESYNC_DEBUG", "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE",
    "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
    "TORCH_SHOW_CPP_STACKTRACES", "CUDA_LAUNCH_BLOCKING", "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "PYTHONFAULTHANDLER", "TORCH_LOGS",
}


def rows() -> list[dict]:
    return yaml.safe_load(DATA.read_text(encoding="utf-8"))["rows"]


def names(row: dict) -> list[str]:
    """The variables a row's name cell gives: `NAME`, then `OLDER_NAME` in parentheses."""
    return re.findall(r"`([^`]*)`", row["name"])


def test_every_switch_the_page_relies_on_has_one_row():
    all_names = [n for row in rows() for n in names(row)]
    assert len(all_names) == len(set(all_names)), "a variable appears in two rows"
    assert REQUIRED <= set(all_names), f"missing: {sorted(REQUIRED - set(all_names))}"


@pytest.mark.parametrize("row", rows(), ids=lambda r: names(r)[0] if names(r) else "?")
def test_row_names_variables_and_cites_https_sources(row):
    found = names(row)
    assert found and all(NAME.fullmatch(n) for n in found), row["name"]
    assert re.fullmatch(r"`[A-Z0-9_]+`( \(`[A-Z0-9_]+`\))?", row["name"]), \
        "name: `NAME`, optionally followed by the older name in parentheses"
    sources = row["source"] if isinstance(row["source"], list) else [row["source"]]
    assert sources and all(re.fullmatch(r"https://[^\s]+", s) for s in sources), sources
    for key in TEXT_COLUMNS:
        cell = row[key]
        assert isinstance(cell, (str, dict)) and cell, f"{key}: empty"
        if isinstance(cell, dict):  # words: both languages, and the Chinese one in Chinese
            assert set(cell) == {"en", "zh"} and cell["en"].strip() and cell["zh"].strip(), key
            assert re.search(r"[\u4e00-\u9fff]", cell["zh"]), f"{key}: zh text has no Chinese"
        else:  # a language-neutral cell: values or defaults in code spans only
            assert re.fullmatch(r"`[^`]+`(, `[^`]+`)*", cell), f"{key}: words need en and zh: {cell}"


def test_pytorch_names_and_the_flight_recorder_default_match_the_installed_torch():
    """The table's PyTorch names are the ones the installed torch's headers and modules declare
    (so a rename in an upgrade fails here), and its flight-recorder default is the header's."""
    spec = importlib.util.find_spec("torch")  # its files, without the seconds an import takes
    if spec is None or not spec.origin:
        pytest.skip("torch is not installed")
    root = Path(spec.origin).parent
    c10d = root / "include" / "torch" / "csrc" / "distributed" / "c10d"
    declared = {
        c10d / "ProcessGroupNCCL.hpp": ["TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING",
                                        "TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT",
                                        "TORCH_NCCL_DESYNC_DEBUG", "NCCL_DESYNC_DEBUG",
                                        "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_TRACE_BUFFER_SIZE"],
        c10d / "FlightRecorder.hpp": ["TORCH_FR_BUFFER_SIZE"],
        root / "_logging" / "_internal.py": ["TORCH_LOGS"],
        root / "distributed" / "distributed_c10d.py": ["TORCH_DISTRIBUTED_DEBUG"],
    }
    if not all(path.is_file() for path in declared):
        pytest.skip(f"torch at {root} was installed without its headers")
    in_file = {n for row in rows() for n in names(row)}
    for path, expected in declared.items():
        text = path.read_text(encoding="utf-8")
        for name in expected:
            assert name in in_file, f"{name} is not in {DATA.name}"
            assert f'"{name}"' in text, f"{name} is no longer declared in {path.name}"
    header = (c10d / "FlightRecorder.hpp").read_text(encoding="utf-8")
    default = re.search(r'\{"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"\},\s*(\d+)\)', header)
    row = next(r for r in rows() if "TORCH_FR_BUFFER_SIZE" in names(r))
    assert default and row["default"] == f"`{default.group(1)}`", "update the buffer's default"


def _markers_hook():
    """build/hooks/book_markers.py, loaded by its path as mkdocs loads a hook."""
    path = REPO / "build" / "hooks" / "book_markers.py"
    spec = importlib.util.spec_from_file_location("book_markers_env_switches", path)
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    return hooks


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_page_renders_the_table_in_its_language(lang):
    rel = f"{lang}/debug/env-switches.md"
    markdown = (REPO / "book" / rel).read_text(encoding="utf-8")
    assert markdown.count(MARKER) == 1, f"book/{rel} must place the table once"
    page = SimpleNamespace(file=SimpleNamespace(src_uri=rel))
    rendered = _markers_hook().on_page_markdown(markdown, page, None, None)
    assert MARKER not in rendered
    table = [line for line in rendered.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(table) == len(rows()) + 1                      # header + one line per row
    header = {"en": "| Variable | Values | Default |", "zh": "| 变量 | 取值 | 默认值 |"}[lang]
    assert table[0].startswith(header) and ("来源" if lang == "zh" else "Source") in table[0]
    assert "| `TORCH_NCCL_ASYNC_ERROR_HANDLING` (`NCCL_ASYNC_ERROR_HANDLING`) |" in rendered
    assert ("让故障开口说话" if lang == "zh" else "make failures talk") in rendered  # the caption
    assert all(f"`{name}`" in rendered for name in REQUIRED)
