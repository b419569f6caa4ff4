"""Fixtures of the classroom-kit checks: the built editions in ``_build/assignments``.

``bash scripts/assignments.sh`` builds them (``scripts/test.sh`` does, before running these). Without
a build the tests skip with the reason, unless ``NMST_REQUIRE_ASSIGNMENTS=1`` (set by
``scripts/test.sh``), in which case they fail. ``NMST_ASSIGNMENTS_DIR`` points at another build.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("NMST_ASSIGNMENTS_DIR") or ROOT / "_build" / "assignments")
REQUIRED = os.environ.get("NMST_REQUIRE_ASSIGNMENTS") == "1"


@pytest.fixture(scope="session")
def built() -> Path:
    """The folder of the built editions (skip, or fail under NMST_REQUIRE_ASSIGNMENTS=1, if absent)."""
    if not (BUILD / "index.json").is_file():
        message = (f"the classroom editions are not built ({BUILD}/index.json is missing): run "
                   "`bash scripts/assignments.sh` first (scripts/test.sh does)")
        if REQUIRED:
            pytest.fail(message)
        pytest.skip(message)
    return BUILD


@pytest.fixture(scope="session")
def index(built) -> dict:
    return json.loads((built / "index.json").read_text(encoding="utf-8"))
