"""Source hygiene: no control characters in the library, tests, benchmarks or scripts.

A backslash escape in a non-raw docstring turns LaTeX into control characters without any
error (``"\\alpha"`` becomes BEL + "lpha", ``"\\frac"`` a form feed, ``"\\ne"`` a newline); Chapter 8's
first docstrings did this and only the -W book build noticed. This check fails at once and
names the file and line.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("nmst_lib", "tests", "benchmarks", "scripts")
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def test_no_python_source_holds_control_characters():
    bad = []
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                match = CONTROL.search(line)
                if match:
                    bad.append(f"{path.relative_to(REPO)}:{number}: {match.group()!r} "
                               "(a backslash escape in a non-raw string? use r\"\"\"...\"\"\" for LaTeX)")
    assert not bad, "control characters in source files:\n" + "\n".join(bad)


def test_the_check_catches_a_bell_from_a_non_raw_alpha():
    assert CONTROL.search("L_\alpha")              # what a non-raw "\alpha" becomes
    assert not CONTROL.search(r"L_\alpha \frac{1}{2} \ne")
