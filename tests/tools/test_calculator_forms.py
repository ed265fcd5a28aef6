"""tools/calculators.py and tools/calculator_run.py without a browser: the calculator files
describe usable forms, the forms follow the scripts' parsers, the in-process run (what the page
does under Pyodide) gives what the command line gives, and a data file given as JSON (what the
page gives a script) reads as the YAML does."""

import json
import re
import subprocess
import sys

import pytest
import yaml

from tools import calculator_run, calculators


@pytest.mark.parametrize("name", calculators.names())
def test_each_calculator_file_describes_its_scripts_options(name):
    spec = calculators.load(name)
    options = calculators.parser_options(spec["script"])
    for lang in calculators.LANGS:
        form = calculators.form(spec, lang)
        for field in form["fields"]:
            action = options[field["option"]]
            assert field["label"].strip()
            assert (field["kind"] == "flag") == (action.nargs == 0), field["option"]
            assert (field["kind"] == "multi") == (action.nargs in ("+", "*") and bool(action.choices))
            if action.choices:
                assert field["choices"] == [str(c) for c in action.choices]
        # every picker fills only numbers from its data file, and offers at least one row
        for picker in form["pickers"]:
            assert picker["rows"], picker["label"]
            for row in picker["rows"]:
                assert all(float(v) == float(v) for v in row["values"].values())
    # the worked example is a valid command line
    assert calculators.run_cli(spec["script"], spec["example"])["status"] == 0


def test_an_option_of_several_values_is_a_multi_field_holding_the_examples_values():
    spec = {"name": "x", "script": "scripts/training/communication_volume.py", "answer": {"en": "", "zh": ""},
            "example": ["--zero", "3", "--zeropp", "qwz", "hpz", "--dp", "64"],
            "fields": [{"option": "--zeropp", "label": {"en": "ZeRO++", "zh": "ZeRO++"}},
                       {"option": "--dp", "label": {"en": "dp", "zh": "dp"}}]}
    zeropp, dp = calculators.form(spec, "en")["fields"]
    assert (zeropp["kind"], zeropp["choices"], zeropp["value"]) == ("multi", ["qwz", "hpz", "qgz"], "qwz hpz")
    assert (dp["kind"], dp["value"]) == ("value", "64")


GOOD = """\
script: scripts/training/memory_estimator.py
chapter: training/memory.md
example: [--params, "7e9"]
answer: {en: "{per_gpu_bytes.total/1e9:.1f} GB per GPU", zh: "每块 GPU {per_gpu_bytes.total/1e9:.1f} GB"}
fields:
  - {option: --params, label: {en: Parameters, zh: 参数量}}
  - {option: --dp, label: {en: Data parallel, zh: 数据并行度}}
checks:
  - {--params: "7e9", --dp: "8"}
"""

# (id, text replaced in GOOD, by, the error after "FILE: "): each one line naming the key
BAD = [
    ("not-an-option", "option: --dp,", "option: --not-an-option,",
     r"'--not-an-option' is not an option of scripts/training/memory_estimator\.py"),
    ("label-one-language", "{en: Parameters, zh: 参数量}", "{en: Parameters}",
     r"field 1 \(--params\): label\.zh: missing"),
    ("label-blank", "zh: 参数量", "zh: ' '", r"field 1 \(--params\): label\.zh: ' ' does not match"),
    ("example-number", '[--params, "7e9"]', "[--params, 7]",
     r"example\.1: 7 is not of type string; an argument as typed: quote the numbers"),
    ("no-fields", "fields:", "field:", r"fields: missing"),
    ("no-answer", "answer:", "answr:", r"answer: missing"),
    ("misspelt-key", "chapter:", "chaptr:", r"chapter: missing"),
    ("option-without-dashes", "option: --dp,", "option: dp,", r"field 2 \(dp\): option: 'dp' does not match"),
    ("check-number", '--dp: "8"', "--dp: 8", r"checks\.0\.--dp: 8 is none of: string, True"),
    ("check-list-for-one-value", '--dp: "8"', '--dp: ["8"]',
     r"check 1 sets --dp to \['8'\]: a list is for an option that takes several of its choices"),
    ("check-not-a-field", '--dp: "8"', '--tp: "8"', r"check 1 sets --tp, not a field of the form"),
    ("no-script", "memory_estimator.py", "memory_estimater.py",
     r"script scripts/training/memory_estimater\.py does not exist"),
    ("not-a-mapping", GOOD, "[]", r"\[\] is not of type object"),
]


@pytest.mark.parametrize("old, new, expected", [pytest.param(*case[1:], id=case[0]) for case in BAD])
def test_a_bad_calculator_file_is_refused_in_one_line_naming_the_key(tmp_path, monkeypatch, old, new, expected):
    """tools/schemas/data/calculator.schema.json checks the shape, load() what needs the script."""
    (tmp_path / "good.yml").write_text(GOOD, encoding="utf-8")
    assert GOOD.count(old) == 1
    (tmp_path / "bad.yml").write_text(GOOD.replace(old, new), encoding="utf-8")
    monkeypatch.setattr(calculators, "SPECS", tmp_path)
    assert calculators.load("good")["checks"] == [{"--params": "7e9", "--dp": "8"}]
    with pytest.raises(calculators.CalculatorError) as raised:
        calculators.load("bad")
    message = str(raised.value)
    assert "\n" not in message and re.match(re.escape(str(tmp_path / "bad.yml")) + ": " + expected, message), message


def test_flatten_keeps_ints_and_floats_apart_and_paths_in_order():
    rows = calculator_run.flatten({"a": 2, "b": 2.0, "c": {"d": [1, {"e": None}], "f": {}}, "g": "x"})
    assert rows == [["a", "2"], ["b", "2.0"], ["c.d[0]", "1"], ["c.d[1].e", "null"], ["c.f", "{}"], ["g", '"x"']]


@pytest.mark.parametrize("argv", [["--params", "7e9", "--dp", "8", "--zero", "1"], ["--params", "7e9", "--dp", "0"]])
def test_running_in_process_gives_what_the_command_line_gives(argv):
    script = "scripts/training/memory_estimator.py"
    page = json.loads(calculator_run.run(str(calculators.REPO / script), argv))
    cli = calculators.run_cli(script, argv)
    assert page["status"] == cli["status"]
    assert page["stdout"] == cli["stdout"]
    assert page["json"] == cli["json"]
    assert page["error"] == cli["error"]
    assert page["command"].endswith(f"{script} {' '.join(argv)}")


@pytest.mark.parametrize("script", ["scripts/inference/kv_cache_calculator.py", "scripts/models/model_calculator.py"])
def test_the_models_data_file_as_json_reads_without_pyyaml_as_the_yaml_does(tmp_path, script):
    """The page has no PyYAML (Pyodide's core has none): the script must read the JSON the build
    makes of the data file on its own, and find in it what the YAML holds."""
    source = calculators.REPO / "data" / "models" / "architectures.yml"
    as_json = tmp_path / "architectures.json"
    as_json.write_text(json.dumps(yaml.safe_load(source.read_text(encoding="utf-8"))), encoding="utf-8")
    from_yaml = calculators.run_cli(script, ["--model", "all", "--data", str(source)])
    assert from_yaml["status"] == 0, from_yaml["stderr"]
    no_yaml = ("import runpy, sys; sys.modules['yaml'] = None; sys.argv = sys.argv[1:]; "
               "runpy.run_path(sys.argv[0], run_name='__main__')")
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, "-c", no_yaml, str(calculators.REPO / script), "--model", "all",
                           "--data", str(as_json), "--json", str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.replace(f"# wrote {out}\n", "") == from_yaml["stdout"]
    drop = ("date_utc", "versions", "command", "inputs")  # when and how it ran, and the --data path
    def strip(text):
        return {k: v for k, v in json.loads(text).items() if k not in drop}
    assert strip(out.read_text(encoding="utf-8")) == strip(from_yaml["json"])


def test_a_data_file_that_breaks_its_schema_is_named_with_row_and_field(tmp_path, monkeypatch):
    """A calculator page reads its pickers' and its script's data files through their schema: a
    model whose name is a number stops the build with one line naming the file, row and field."""
    data = yaml.safe_load((calculators.REPO / "data/models/architectures.yml").read_text(encoding="utf-8"))
    data["rows"][0]["name"] = 7
    bad = tmp_path / "data" / "models" / "architectures.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(yaml.safe_dump(data), encoding="utf-8")
    monkeypatch.setattr(calculators, "REPO", tmp_path)
    with pytest.raises(calculators.CalculatorError, match=r"architectures\.yml: row 1\b.*: name: 7 is not"):
        calculators._rows("data/models/architectures.yml")


@pytest.mark.parametrize("template, expected", [
    ("{name} has {size/1e9:,.1f} B", "Llama has 1,234.6 B"),
    ("{share:.1%} of {parts[1].n*2:,}", "36.6% of 8,000"),
    ("every {steps[0]} steps[[ ({missing} more)]][[ or {none:.1f}]]", "every 263 steps"),
])
def test_the_answer_fills_its_template_from_the_result(template, expected):
    from tools.calculator_run import answer
    data = {"name": "Llama", "size": 1.2345678e12, "share": 0.36578, "parts": [{"n": 1}, {"n": 4000}],
            "steps": [263], "none": None}
    assert answer(template, data) == expected


@pytest.mark.parametrize("template, error", [("{nope}", KeyError), ("{none:.1f}", ValueError),
                                             ("{name:.1f}", ValueError)])
def test_an_answer_that_does_not_fit_the_result_raises(template, error):
    from tools.calculator_run import answer
    with pytest.raises(error):
        answer(template, {"name": "Llama", "none": None})


def test_every_calculators_answer_fits_its_examples_and_checks_in_both_languages():
    from tools.calculator_run import answer
    for name in calculators.names():
        spec = calculators.load(name)
        runs = [spec["example"]] + [[x for k, v in c.items()
                                     for x in ([k] if v is True else [k, *v] if isinstance(v, list) else [k, v])]
                                    for c in spec["checks"]]
        for argv in runs:
            result = calculators.run_cli(spec["script"], argv)
            if result["status"] == 0:
                for lang in ("en", "zh"):
                    assert "{" not in answer(spec["answer"][lang], json.loads(result["json"]))
