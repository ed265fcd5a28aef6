"""tools/loop_bench.py: tests and seconds per part from a JUnit report, merged with the PDF build's
figures per part (it measures; these tests check that it adds up what it reads)."""

from tools import loop_bench

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.network.test_all_reduce_bench" name="a" time="1.5"/>
<testcase classname="tests.network.test_all_reduce_bench" name="b" time="0.5"/>
<testcase classname="notebooks.network.allreduce_cost_model.ipynb" name="Cell 0" time="2.0"/>
<testcase classname="tests.build.test_pdf" name="c" time="4.0"/>
<testcase classname="tests.test_lint" name="d" time="0.25"/>
</testsuite></testsuites>"""

LAST_BUILD = [
    {"lang": "en",
     "parts": [{"part": "network", "folder": "network", "pages": 35, "seconds": 5.0, "peak_rss_mb": 300},
               {"part": "debugging", "folder": "debug", "pages": 46, "seconds": 4.0, "peak_rss_mb": 250}]},
    {"lang": "zh",
     "parts": [{"part": "network", "folder": "network", "pages": 33, "seconds": 5.5, "peak_rss_mb": 310},
               {"part": "debugging", "folder": "debug", "pages": 45, "seconds": 4.5, "peak_rss_mb": 260}]},
]


def test_tests_and_seconds_are_summed_per_part_folder(tmp_path):
    report = tmp_path / "report.xml"
    report.write_text(JUNIT, encoding="utf-8")
    costs = loop_bench.test_costs(report)
    assert costs["network"] == {"tests": 3, "seconds": 4.0}  # tests/network/ and notebooks/network/
    assert costs["build"] == {"tests": 1, "seconds": 4.0}
    assert costs["(tests/*.py)"] == {"tests": 1, "seconds": 0.25}


def test_each_part_gets_both_languages_pages_its_render_seconds_and_its_tests(tmp_path):
    report = tmp_path / "report.xml"
    report.write_text(JUNIT, encoding="utf-8")
    rows = {r["part"]: r for r in loop_bench.part_costs(LAST_BUILD, loop_bench.test_costs(report))}
    assert rows["network"]["pages"] == {"en": 35, "zh": 33}
    assert rows["network"]["render_s"] == 10.5 and rows["network"]["peak_rss_mb"] == 310
    assert (rows["network"]["tests"], rows["network"]["test_s"]) == (3, 4.0)
    assert (rows["debugging"]["tests"], rows["debugging"]["render_s"]) == (0, 8.5)  # tests/debug/: none here
    assert rows["(tests/build)"]["tests"] == 1 and rows["(tests/*.py)"]["tests"] == 1
