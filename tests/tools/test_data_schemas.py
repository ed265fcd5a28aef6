"""The spec tables under data/ meet their JSON Schemas (tools/schemas/data/), and a bad value in
one stops the build with one line naming the file, the row and the field (issue 30, item 7). (The
calculator files, data/calculators/, meet tools/schemas/data/calculator.schema.json:
tests/tools/test_calculator_forms.py.)

Every data/<part>/<name>.yml meets tools/schemas/data/table.schema.json; the files that scripts
or calculator pages read (data/models/architectures.yml, data/compute/accelerators.yml,
data/debug/xid_errors.yml) also meet their own row schema. tools/tables.py validates before it
renders (``render_data_table``), so ``make book`` fails on a bad row."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

from tests.launchers import REPO, import_script
from tools import calculators, tables
from tools.tables import TableError, data_problems, data_schema, render_data_table

SCHEMAS = REPO / "tools" / "schemas" / "data"
TABLES = sorted(p for p in (REPO / "data").glob("*/*.yml") if p.parent.name != "calculators")
READ_BY_SCRIPTS = ("models/architectures", "compute/accelerators", "debug/xid_errors")


def load(path: Path):
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("path", TABLES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_data_file_meets_its_schema(path):
    rel = path.relative_to(REPO)
    assert data_problems(load(path), rel) == []


@pytest.mark.parametrize("schema", sorted(SCHEMAS.rglob("*.schema.json")), ids=lambda p: p.stem)
def test_schemas_are_valid_draft_2020_12_with_their_own_id(schema):
    contents = json.loads(schema.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(contents)
    assert contents["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert contents["$id"].endswith("/" + schema.relative_to(SCHEMAS.parent).as_posix())
    if schema.parent != SCHEMAS:  # data/<part>/<name>.schema.json, not table or calculator
        assert contents["$ref"] == "../table.schema.json", "a row schema refines the table schema"


def test_files_read_by_scripts_and_calculators_have_their_own_schema():
    read = set(READ_BY_SCRIPTS)
    for name in calculators.names():
        read |= {str(Path(rel).with_suffix(""))[len("data/"):]
                 for rel in calculators.data_files(calculators.load(name))}
    for name in sorted(read):
        assert data_schema(REPO / "data" / f"{name}.yml") == SCHEMAS / f"{name}.schema.json", name
    assert data_schema(REPO / "data" / "network" / "pcie.yml") == SCHEMAS / "table.schema.json"


def test_model_types_are_the_calculators_families():
    schema = json.loads((SCHEMAS / "models" / "architectures.schema.json").read_text(encoding="utf-8"))
    families = schema["$defs"]["model"]["properties"]["model_type"]["enum"]
    assert tuple(families) == import_script(REPO / "scripts" / "models" / "model_calculator.py").FAMILIES


def test_the_results_schemas_are_not_mixed_with_the_data_schemas():
    from tools import results
    data_schemas = {p.name.removesuffix(".schema.json") for p in SCHEMAS.rglob("*.schema.json")}
    assert data_schemas and not data_schemas & set(results.known_benchmarks())


# --- bad rows: each stops the render with one line naming the file, the row and the field ------

def _set(row_number: int, **values):
    def change(data):
        data["rows"][row_number - 1].update(values)
    return change


def _drop(row_number: int, key: str):
    def change(data):
        del data["rows"][row_number - 1][key]
    return change


# (id, data file, change to its parsed content, expected error after "FILE: ")
BAD = [
    ("name-not-string", "models/architectures", _set(4, name=123), r"row 4 \(123\): name: 123 is not of type string"),
    ("name-list", "models/architectures", _set(4, name=[1, 2]),
     r"row 4 \(name \[1, 2\]\): name: \[1, 2\] is not of type string"),
    ("name-empty", "models/architectures", _set(4, name=""), r"row 4 \(name ''\): name: '' should be non-empty"),
    ("missing-key", "models/architectures", _drop(4, "vocab_size"), r"row 4 \(Llama 3\.1 8B\): vocab_size: missing"),
    ("published-total-inf", "models/architectures", _set(4, published_total=math.inf),
     r"row 4 \(Llama 3\.1 8B\): published_total: inf is not a value \(YAML's \.inf"),
    ("published-total-number", "models/architectures", _set(4, published_total=8.03),
     r"row 4 \(Llama 3\.1 8B\): published_total: 8\.03 is not of type string"),
    ("no-source", "models/architectures", _drop(4, "source"), r"row 4 \(Llama 3\.1 8B\): source: missing"),
    ("source-not-url", "models/architectures", _set(4, source=["config.json"]),
     r"row 4 \(Llama 3\.1 8B\): source\.0: 'config\.json' does not match"),
    ("size-text", "models/architectures", _set(4, hidden_size="4096"),
     r"row 4 \(Llama 3\.1 8B\): hidden_size: '4096' is not of type integer"),
    ("size-float", "models/architectures", _set(4, hidden_size=4096.0),
     r"row 4 \(Llama 3\.1 8B\): hidden_size: 4096\.0 is not of type integer"),
    ("size-nan", "models/architectures", _set(4, num_hidden_layers=math.nan),
     r"row 4 \(Llama 3\.1 8B\): num_hidden_layers: nan is not a value"),
    ("size-zero", "models/architectures", _set(4, num_key_value_heads=0),
     r"row 4 \(Llama 3\.1 8B\): num_key_value_heads: 0 is less than the minimum of 1"),
    ("bool-text", "models/architectures", _set(4, tie_word_embeddings="no"),
     r"row 4 \(Llama 3\.1 8B\): tie_word_embeddings: 'no' is not of type boolean"),
    ("misspelt-key", "models/architectures", _set(4, num_key_value_head=8),
     r"row 4 \(Llama 3\.1 8B\): num_key_value_head: not a field of this file"),
    ("unknown-family", "models/architectures", _set(4, model_type="gpt2"),
     r"row 4 \(Llama 3\.1 8B\): model_type: 'gpt2' is not one of 'llama'"),
    ("dense-with-top-k", "models/architectures", _set(4, num_experts_per_tok=2),
     r"row 4 \(Llama 3\.1 8B\): num_experts_per_tok: not allowed in this row; only a row with num_experts"),
    ("moe-without-active", "models/architectures", _drop(8, "published_active"),
     r"row 8 \(Mixtral 8x7B\): published_active: missing"),
    ("row-not-mapping", "models/architectures", lambda d: d["rows"].__setitem__(2, ["Llama 2 70B"]),
     r"row 3: \['Llama 2 70B'\] is not of type object"),
    ("peak-nan", "compute/accelerators", _set(3, bf16_dense=math.nan),
     r"row 3 \(NVIDIA H100 SXM\): bf16_dense: nan is not a value"),
    ("memory-text", "compute/accelerators", _set(3, mem_GB="80 GB"),
     r"row 3 \(NVIDIA H100 SXM\): mem_GB: '80 GB' is none of: number, '—'"),
    ("memory-zero", "compute/accelerators", _set(3, mem_GB=0), r"row 3 \(NVIDIA H100 SXM\): mem_GB: 0 is less than"),
    ("accelerator-name-number", "compute/accelerators", _set(3, name=100),
     r"row 3 \(100\): name: 100 is not of type string"),
    ("xid-code-text", "debug/xid_errors", _set(2, code="31"), r"row 2 \(31\): code: '31' is not of type integer"),
    ("xid-mnemonic", "debug/xid_errors", _set(2, mnemonic="mmu error"),
     r"row 2 \(31\): mnemonic: 'mmu error' does not match"),
    ("xid-one-language", "debug/xid_errors", _set(2, meaning={"en": "MMU fault"}),
     r"row 2 \(31\): meaning\.zh: missing"),
    ("xid-no-source", "debug/xid_errors", _drop(2, "source"), r"row 2 \(31\): source: missing"),
    # the table schema, for a file without its own
    ("table-no-source", "network/pcie", _drop(2, "source"), r"row 2 \(PCIe 4\.0\): source: missing"),
    ("table-inf", "network/pcie", _set(2, gts=math.inf), r"row 2 \(PCIe 4\.0\): gts: inf is not a value"),
    ("table-date", "network/pcie", _set(2, gts=__import__("datetime").date(2017, 10, 1)),
     r"row 2 \(PCIe 4\.0\): gts: datetime\.date\(2017, 10, 1\) is none of"),
    ("table-mapping-cell", "network/pcie", _set(2, gts={"value": 16}), r"row 2 \(PCIe 4\.0\): gts: .* is none of"),
    ("table-key-not-text", "network/pcie", _set(2, **{"7": 1}), r"row 2 \(PCIe 4\.0\): key '7' is not a column key"),
    ("column-title-one-language", "network/pcie", lambda d: d["columns"][1].update(title={"en": "GT/s"}),
     r"column 2 \(gts\): title\.zh: missing"),
    ("unknown-top-level-key", "network/pcie", lambda d: d.update(row=[]), r"row: not a field of this file"),
    ("view-unknown-key", "models/architectures", lambda d: d["views"]["moe"].update(rows_whith="x"),
     r"view moe: rows_whith: not a field of this file"),
]


@pytest.mark.parametrize("name, change, expected", [pytest.param(*case[1:], id=case[0]) for case in BAD])
def test_a_bad_value_fails_the_render_naming_file_row_and_field(name, change, expected, tmp_path):
    source = REPO / "data" / f"{name}.yml"
    data = copy.deepcopy(load(source))
    change(data)
    path = tmp_path / "data" / f"{name}.yml"   # .../data/<part>/<name>.yml: the file's own schema applies
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    assert data_schema(path) == data_schema(source)
    with pytest.raises(TableError) as raised:
        render_data_table(path, "en")
    message = str(raised.value)
    assert "\n" not in message, message
    assert re.match(re.escape(str(path)) + ": " + expected, message), message


def test_every_bad_row_is_listed_and_the_render_names_the_first(tmp_path):
    data = load(REPO / "data" / "models" / "architectures.yml")
    data["rows"][1]["name"] = 7
    data["rows"][5]["published_total"] = math.inf
    path = tmp_path / "data" / "models" / "architectures.yml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    problems = data_problems(load(path), path)
    assert [p.split(": ")[1] for p in problems] == ["row 2 (7)", "row 6 (Llama 3.1 405B)"], problems
    with pytest.raises(TableError, match=r"row 2 \(7\): name: .* \(and 1 more\)$"):
        render_data_table(path)


def test_the_command_line_prints_one_line(tmp_path, capsys):
    data = load(REPO / "data" / "debug" / "xid_errors.yml")
    data["rows"][0]["code"] = "13"
    path = tmp_path / "data" / "debug" / "xid_errors.yml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False), encoding="utf-8")
    assert tables.main([str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.match(r"tables\.py: error: .*xid_errors\.yml: row 1 \(13\): code: ", err), err


def test_rows_of_the_same_shape_and_new_columns_are_accepted(tmp_path):
    """A new Xid row like the others, or a new column of the catalogue, needs no schema change."""
    xid = load(REPO / "data" / "debug" / "xid_errors.yml")
    xid["rows"].append({**copy.deepcopy(xid["rows"][-1]), "code": 145, "mnemonic": "NVLINK_EXAMPLE_ERROR"})
    assert data_problems(xid, tmp_path / "data" / "debug" / "xid_errors.yml") == []
    catalogue = load(REPO / "data" / "compute" / "accelerators.yml")
    catalogue["rows"][2]["mem_bytes"] = 85_520_809_984
    assert data_problems(catalogue, tmp_path / "data" / "compute" / "accelerators.yml") == []
