"""Print the node ids of the tests a pytest run skipped, read from its JUnit XML report.

scripts/test.sh runs the library's unit tests once, in a plain clone without the data
(scripts/test_plain_clone.sh); the tests that skipped there for want of the real data, the GPT-2
tokenizer or a GPU are then run in the main run, which has the data. This prints them one per
line (``tests/test_data.py::test_x[a]``), so that no test runs twice and none is left out.

    python scripts/skipped_tests.py REPORT.xml
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def node_id(classname: str, name: str, root: Path) -> str:
    """``tests.test_x.TestA`` + ``test_b[1]`` -> ``tests/test_x.py::TestA::test_b[1]`` (the longest
    prefix of the dotted class name that is a file under ``root`` is the module)."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        module = Path(*parts[:cut]).with_suffix(".py")
        if (root / module).is_file():
            return "::".join([module.as_posix(), *parts[cut:], name])
    raise ValueError(f"no test module for {classname!r} under {root}")


def skipped(report: Path, root: Path) -> list[str]:
    """Node ids of the skipped test cases of a JUnit XML ``report`` (sorted, unique)."""
    tree = ET.parse(report)
    ids = {node_id(case.get("classname", ""), case.get("name", ""), root)
           for case in tree.iter("testcase") if case.find("skipped") is not None}
    return sorted(ids)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/skipped_tests.py REPORT.xml")
    for test in skipped(Path(sys.argv[1]), Path.cwd()):
        print(test)
