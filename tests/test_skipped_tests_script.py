"""scripts/skipped_tests.py: the test command's list of unit tests to run again with the data."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("skipped_tests", ROOT / "scripts" / "skipped_tests.py")
skipped_tests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(skipped_tests)

REPORT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.test_data" name="test_real_split[valid]"><skipped message="no data"/></testcase>
<testcase classname="tests.test_data" name="test_fixture_split"/>
<testcase classname="tests.test_gpu.TestCuda" name="test_heads_on_cuda"><skipped message="no CUDA"/></testcase>
<testcase classname="tests.test_data" name="test_real_split[valid]"><skipped message="again"/></testcase>
<testcase classname="tests.test_cli" name="test_fails"><failure message="x"/></testcase>
</testsuite></testsuites>"""


def test_only_skipped_cases_are_listed_as_node_ids(tmp_path):
    report = tmp_path / "report.xml"
    report.write_text(REPORT)
    ids = skipped_tests.skipped(report, ROOT)
    assert ids == ["tests/test_data.py::test_real_split[valid]", "tests/test_gpu.py::TestCuda::test_heads_on_cuda"]


def test_a_case_without_its_module_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no test module"):
        skipped_tests.node_id("tests.test_nowhere", "test_x", ROOT)
