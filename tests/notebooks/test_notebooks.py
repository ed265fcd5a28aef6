"""Tests of the notebooks (and of tools/notebooks.py, which checks them).

On the real repository: every jupytext ``.py`` under ``notebooks/`` has its
``.ipynb``, the two are in sync, the ``.ipynb`` was executed top to bottom and
stores outputs, including at least one PNG plot.  nbval itself (re-executing
the notebooks and comparing outputs) is a separate pytest run::

    pytest --nbval notebooks/ --nbval-sanitize-with notebooks/nbval_sanitize.cfg

The unit tests build small synthetic pairs in ``tmp_path`` (no kernel needed)
and check that each kind of problem is detected.
"""
from __future__ import annotations

import ast
import base64
import json
import shutil
from pathlib import Path

import jupytext
import nbformat
import pytest

from tools import notebooks as nbtool

ROOT = Path(__file__).resolve().parents[2]
PAIRS = nbtool.notebook_pairs(ROOT)
PAIR_IDS = [str(py.relative_to(ROOT)) for py, _ in PAIRS]

# A 1x1 PNG, for synthetic outputs.
PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)).decode()


def _outputs(ipynb: Path):
    nb = nbformat.read(ipynb, as_version=4)
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]


# --------------------------------------------------------------------------- real repository
def test_there_are_notebooks():
    assert PAIRS, f"no notebooks found under {ROOT / 'notebooks'}"


@pytest.mark.parametrize("py,ipynb", PAIRS, ids=PAIR_IDS)
def test_pair_in_sync_and_executed(py, ipynb):
    assert nbtool.pair_problems(py, ipynb) == []


@pytest.mark.parametrize("py,ipynb", PAIRS, ids=PAIR_IDS)
def test_notebook_has_png_plot(py, ipynb):
    outputs = _outputs(ipynb)
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{ipynb} has no PNG output"
    assert not any("image/svg+xml" in o.get("data", {}) for o in outputs)


@pytest.mark.parametrize("py,ipynb", PAIRS, ids=PAIR_IDS)
def test_outputs_have_no_machine_specific_text(py, ipynb):
    """Stored text outputs must not leak paths, host names or warnings."""
    for out in _outputs(ipynb):
        if out.output_type == "stream":
            assert out.name == "stdout", f"{ipynb}: stderr output: {out.text[:200]!r}"
            text = out.text
        else:
            text = out.get("data", {}).get("text/plain", "")
        assert str(ROOT) not in text
        assert "/home/" not in text and "/tmp/" not in text


def test_chinese_notebooks_have_english_source():
    for py, _ in PAIRS:
        if py.name.endswith(".zh.py"):
            english = py.with_name(py.name[: -len(".zh.py")] + ".py")
            assert english.exists(), f"{py} has no English source {english.name}"


class _BlankStrings(ast.NodeTransformer):
    """Replaces every string (labels, messages, docstrings) with "": translations change them.
    Adding to or repeating a string gives a string; a plot's ``label=`` and ``NAME_zh[...]`` (a
    lookup in a table of Chinese labels) are strings too."""

    def visit_Constant(self, node):
        return ast.copy_location(ast.Constant(""), node) if isinstance(node.value, str) else node

    def visit_JoinedStr(self, node):
        return ast.copy_location(ast.Constant(""), node)

    def visit_BinOp(self, node):
        node = self.generic_visit(node)
        if isinstance(node.op, (ast.Add, ast.Mult)) and any(
                isinstance(side, ast.Constant) and side.value == "" for side in (node.left, node.right)):
            return ast.copy_location(ast.Constant(""), node)  # "text" + x, "=" * 17: a string
        return node

    def visit_keyword(self, node):
        if node.arg == "label":  # a plot legend's text, however it is looked up
            node.value = ast.Constant("")
        return self.generic_visit(node)

    def visit_Subscript(self, node):
        if isinstance(node.value, ast.Name) and node.value.id.endswith("_zh"):
            return ast.copy_location(ast.Constant(""), node)
        return self.generic_visit(node)


def _code_shape(source: Path) -> list[str]:
    """The notebook's statements with strings blanked, minus what only the Chinese notebooks
    need: the CJK font set-up (statements naming font_manager, CJK_FONT or warnings, which
    warns when the font is missing) and tables of Chinese labels (``NAME_zh = {...}``)."""
    tree = _BlankStrings().visit(ast.parse(source.read_text(encoding="utf-8")))
    shape = []
    for stmt in tree.body:
        text = ast.dump(stmt)
        if any(name in text for name in ("font_manager", "CJK_FONT", "'warnings'")):
            continue
        if isinstance(stmt, ast.Assign) and all(
                isinstance(t, ast.Name) and t.id.endswith("_zh") for t in stmt.targets):
            continue
        shape.append(text)
    return shape


ZH_PAIRS = [py for py, _ in PAIRS if py.name.endswith(".zh.py")]


@pytest.mark.parametrize("zh", ZH_PAIRS, ids=[str(p.relative_to(ROOT)) for p in ZH_PAIRS])
def test_chinese_notebook_runs_the_english_code(zh):
    # Translating a notebook changes its prose, comments and strings, never what it computes, so
    # a fix in one language that is not made in the other fails here.
    english = zh.with_name(zh.name[: -len(".zh.py")] + ".py")
    assert _code_shape(zh) == _code_shape(english), f"{zh.name} and {english.name} compute different things"


def test_sanitize_config_parses():
    import re

    from nbval.plugin import get_sanitize_patterns

    cfg = ROOT / "notebooks" / "nbval_sanitize.cfg"
    patterns = get_sanitize_patterns(cfg.read_text(encoding="ascii"))
    assert patterns, "no regex/replace pairs in nbval_sanitize.cfg"

    def sanitize(s):
        for regex, replace in patterns:
            s = re.sub(regex, replace, s)
        return s

    # measured numbers (after "≈ ") are masked, deterministic ones (after "=") are not
    assert sanitize("α ≈ 16 µs, β ≈ 2.8 GB/s") == sanitize("α ≈ 31 µs, β ≈ 1.2e+02 GB/s")
    # a padded table column ("≈ {x:8.2f}") is masked too: its digits vary by CPU
    assert sanitize("≈     1.43 ≈   0.22") == sanitize("≈     1.24 ≈   0.11")
    assert sanitize("α = 5 µs") != sanitize("α = 6 µs")
    assert sanitize("torch 2.13.0+cpu") == sanitize("torch 2.14.1+cu130")


def test_readme_documents_refresh_commands():
    readme = (ROOT / "notebooks" / "README.md").read_text(encoding="utf-8")
    for cmd in nbtool.refresh_commands(Path("notebooks/PART/NAME.py"), Path("notebooks/PART/NAME.ipynb")):
        assert " ".join(cmd) in readme, f"README does not show: {' '.join(cmd)}"


# --------------------------------------------------------------------------- synthetic pairs
ALT = "Line chart of y against x: a straight line rising from 1 to 2."


def _write_pair(folder: Path, name: str = "demo", *, executed: bool = True, outputs: bool = True,
                alt: bool = True) -> Path:
    """Write a small executed py:percent + ipynb pair (its plot described by the cell's metadata
    ``alt`` unless ``alt`` is false); return the .py path."""
    folder.mkdir(parents=True, exist_ok=True)
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["jupytext"] = {"formats": nbtool.PAIR_FORMATS}
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Demo\n\nSome text."),
        nbformat.v4.new_code_cell("x = 6 * 7\nprint(x)"),
        nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()"),
    ]
    if alt:
        nb.cells[2].metadata["alt"] = [ALT]
    py = folder / f"{name}.py"
    jupytext.write(nb, py, fmt="py:percent")
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        cell.execution_count = i + 1 if executed else None
    if outputs:
        nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="42\n")]
        nb.cells[2].outputs = [nbformat.v4.new_output(
            "display_data", data={"image/png": PNG, "text/plain": "<Figure size 640x480 with 1 Axes>"})]
    nbformat.write(nb, py.with_suffix(".ipynb"))
    return py


@pytest.fixture
def tree(tmp_path):
    _write_pair(tmp_path / "notebooks" / "part")
    return tmp_path


def _problems(tree):
    return nbtool.problems(tree)


def test_synthetic_pair_is_clean(tree):
    assert nbtool.notebook_pairs(tree) == [(tree / "notebooks/part/demo.py", tree / "notebooks/part/demo.ipynb")]
    assert _problems(tree) == []
    assert nbtool.main(["--root", str(tree), "check"]) == 0


def test_alt_text_lives_on_the_cell_marker(tree):
    # the syntax notebooks/README.md documents, and jupytext reads it back as the cell's metadata
    py = tree / "notebooks/part/demo.py"
    assert f'# %% alt=["{ALT}"]\n' in py.read_text()
    assert jupytext.read(py).cells[2].metadata["alt"] == [ALT]


def test_plot_without_alt_text_is_reported(tmp_path):
    _write_pair(tmp_path / "notebooks/part", alt=False)
    found = _problems(tmp_path)
    assert len(found) == 1 and "cell 3 shows 1 image(s) without alt text" in found[0]
    assert nbtool.main(["--root", str(tmp_path), "check"]) == 1


@pytest.mark.parametrize("alt", [[], [ALT, ALT], [""], ["  "], ALT, [None]],
                         ids=["none", "two for one image", "empty", "blank", "not a list", "not a string"])
def test_alt_text_not_one_string_per_image_is_reported(tree, alt):
    for path in (tree / "notebooks/part/demo.ipynb", tree / "notebooks/part/demo.py"):
        nb = jupytext.read(path)
        nb.cells[2].metadata["alt"] = alt
        jupytext.write(nb, path)
    found = _problems(tree)
    assert len(found) == 1 and "cell 3 shows 1 image(s) but its metadata alt is" in found[0], found


def test_alt_text_on_a_cell_without_images_is_reported(tree):
    ipynb = tree / "notebooks/part/demo.ipynb"
    nb = nbformat.read(ipynb, as_version=4)
    nb.cells[1].metadata["alt"] = [ALT]
    nbformat.write(nb, ipynb)
    assert any("cell 2 shows 0 image(s) but its metadata alt is" in p for p in _problems(tree))


def test_alt_text_edited_in_the_py_only_is_out_of_sync(tree):
    py = tree / "notebooks/part/demo.py"
    py.write_text(py.read_text().replace(ALT, "A better description of the line."))
    found = _problems(tree)
    assert len(found) == 1 and "cell 3's alt text differs between .py and .ipynb" in found[0]


def test_edited_py_is_out_of_sync(tree):
    py = tree / "notebooks/part/demo.py"
    py.write_text(py.read_text().replace("x = 6 * 7", "x = 6 * 9"))
    found = _problems(tree)
    assert len(found) == 1 and "out of sync" in found[0] and "cell 2" in found[0]
    assert nbtool.main(["--root", str(tree)]) == 1


def test_added_cell_is_out_of_sync(tree):
    py = tree / "notebooks/part/demo.py"
    py.write_text(py.read_text() + "\n# %%\nprint('new')\n")
    assert any("out of sync" in p and "4 cells in the .py, 3 in the .ipynb" in p for p in _problems(tree))


def test_changed_cell_type_is_out_of_sync(tree):
    ipynb = tree / "notebooks/part/demo.ipynb"
    nb = nbformat.read(ipynb, as_version=4)
    nb.cells[0] = nbformat.v4.new_raw_cell(nb.cells[0].source)
    nbformat.write(nb, ipynb)
    assert any("cell 1 is markdown in the .py but raw" in p for p in _problems(tree))


def test_missing_ipynb_is_detected(tree):
    (tree / "notebooks/part/demo.ipynb").unlink()
    found = _problems(tree)
    assert len(found) == 1 and "no paired demo.ipynb" in found[0]


def test_missing_py_is_detected(tree):
    (tree / "notebooks/part/demo.py").unlink()
    found = _problems(tree)
    assert len(found) == 1 and "no paired demo.py" in found[0]


def test_notebook_without_outputs_is_detected(tmp_path):
    _write_pair(tmp_path / "notebooks", outputs=False)
    assert any("no stored outputs" in p for p in _problems(tmp_path))


def test_unexecuted_notebook_is_detected(tmp_path):
    _write_pair(tmp_path / "notebooks", executed=False, outputs=False)
    found = _problems(tmp_path)
    assert any("2 of 2 code cells not executed" in p for p in found)
    assert any("no stored outputs" in p for p in found)


def test_out_of_order_execution_is_detected(tree):
    ipynb = tree / "notebooks/part/demo.ipynb"
    nb = nbformat.read(ipynb, as_version=4)
    nb.cells[1].execution_count, nb.cells[2].execution_count = 5, 3
    nbformat.write(nb, ipynb)
    assert any("not executed top to bottom" in p for p in _problems(tree))


def test_error_and_svg_outputs_are_detected(tree):
    ipynb = tree / "notebooks/part/demo.ipynb"
    nb = nbformat.read(ipynb, as_version=4)
    nb.cells[1].outputs.append(nbformat.v4.new_output("error", ename="ValueError", evalue="x", traceback=[]))
    nb.cells[2].outputs[0].data["image/svg+xml"] = "<svg/>"
    nbformat.write(nb, ipynb)
    found = _problems(tree)
    assert any("error output (ValueError)" in p for p in found)
    assert any("SVG" in p for p in found)


def test_execution_timestamps_are_detected(tree):
    ipynb = tree / "notebooks/part/demo.ipynb"
    nb = nbformat.read(ipynb, as_version=4)
    nb.cells[1].metadata["execution"] = {"iopub.status.busy": "2026-01-01T00:00:00.000000Z"}
    nbformat.write(nb, ipynb)
    assert any("timestamps" in p for p in _problems(tree))
    nbtool._strip_timing(ipynb)
    assert _problems(tree) == []


def test_unpaired_formats_metadata_is_detected(tree):
    ipynb = tree / "notebooks/part/demo.ipynb"
    nb = nbformat.read(ipynb, as_version=4)
    del nb.metadata["jupytext"]
    nbformat.write(nb, ipynb)
    assert any("jupytext.formats" in p for p in _problems(tree))


def test_translation_metadata_must_match(tree):
    py = tree / "notebooks/part/demo.py"
    text = py.read_text()
    assert text.startswith("# ---\n# jupyter:\n")
    py.write_text(text.replace("# jupyter:\n", "# jupyter:\n#   book:\n#     translation:\n"
                                              "#       source_sha256: " + "ab" * 32 + "\n", 1))
    assert any("metadata 'book' differs" in p for p in _problems(tree))


def test_helpers_and_checkpoints_are_ignored(tree):
    folder = tree / "notebooks/part"
    (folder / "_helpers.py").write_text("def f():\n    return 1\n")
    ckpt = folder / ".ipynb_checkpoints"
    ckpt.mkdir()
    shutil.copy(folder / "demo.ipynb", ckpt / "demo-checkpoint.ipynb")
    assert [py.name for py, _ in nbtool.notebook_pairs(tree)] == ["demo.py"]
    assert _problems(tree) == []


def test_chinese_pair_naming(tmp_path):
    py = _write_pair(tmp_path / "notebooks/part", name="demo.zh")
    assert nbtool.notebook_pairs(tmp_path) == [(py, tmp_path / "notebooks/part/demo.zh.ipynb")]
    assert _problems(tmp_path) == []


def test_no_notebooks_fails_check(tmp_path, capsys):
    assert nbtool.main(["--root", str(tmp_path)]) == 1
    assert "no notebooks" in capsys.readouterr().err


def test_refresh_commands_shape():
    cmds = nbtool.refresh_commands(Path("a/x.py"), Path("a/x.ipynb"))
    assert cmds[0] == ["jupytext", "--sync", "a/x.py"]
    assert cmds[1][:6] == ["jupyter", "nbconvert", "--to", "notebook", "--execute", "--inplace"]
    assert cmds[1][-1] == "a/x.ipynb"
    assert "--ExecutePreprocessor.record_timing=False" in cmds[1]
    assert cmds[2] == ["jupytext", "--sync", "a/x.ipynb"]
    json.dumps(cmds)  # plain strings only
