"""`@pytest.mark.own_process`: a test run in a Python process of its own, a child pytest on
its node id, whose outcome the suite reports as the test's.

For the tests that start Ray in the test process (a local Ray, Ray Data, Serve handles): Ray
leaves threads running after `ray.shutdown()` (its core worker's gRPC and io threads, Serve's
router event loop), and with them a second Ray session in the same process, or the
interpreter's teardown, can crash (ray-project/ray#31145). A CI run of the whole suite passed
every test and then ended in a segmentation fault as its process exited, and a run here ended
with those threads alive (the likely cause; the crash itself was not caught). One short
process per such test ends with its Ray.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest

CHILD = "ATTEND_TEST_OWN_PROCESS"  # set in the child: the test runs there, as any other
LIMIT_S = 600  # as pytest-timeout's limit for one test (pyproject.toml)
SHOWN = 8000  # characters of a failed child's output in the report


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    """Run a marked test in a child pytest and report its outcome here; None for every other
    test (pytest runs it)."""
    if item.get_closest_marker("own_process") is None or os.environ.get(CHILD):
        return None
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    start = time.time()
    with tempfile.TemporaryDirectory() as folder:
        junit = Path(folder) / "report.xml"
        child = ["-q", "-p", "no:cacheprovider", f"--junitxml={junit}", item.nodeid]
        done = subprocess.run(
            [sys.executable, "-m", "pytest", *child],
            env={**os.environ, CHILD: "1"},
            cwd=item.config.rootpath,
            capture_output=True,
            text=True,
            timeout=LIMIT_S,
            check=False,
        )
        stop = time.time()
        skipped = _skipped(junit)
    output = done.stdout + done.stderr
    outcome, longrepr = _outcome(item, done.returncode, skipped, output)
    for when in ("setup", "call"):
        report = pytest.TestReport(
            item.nodeid,
            item.location,
            dict.fromkeys(item.keywords, 1),
            outcome if when == "call" else "passed",
            longrepr if when == "call" else None,
            when,
            duration=stop - start if when == "call" else 0.0,
            start=start,
            stop=stop,
        )
        item.ihook.pytest_runtest_logreport(report=report)
    # what the tests before this one set up and the next one does not share (their module's
    # fixtures) is torn down here, as after any test: pytest's SetupState, which its teardown
    # hook would reach through plugins that expect this test's own setup to have run
    teardown = pytest.CallInfo.from_call(
        lambda: item.session._setupstate.teardown_exact(nextitem), "teardown"
    )
    item.ihook.pytest_runtest_logreport(
        report=item.ihook.pytest_runtest_makereport(item=item, call=teardown)
    )
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def _skipped(junit: Path) -> str | None:
    """The reason the child's JUnit report gives for skipping its test, if it skipped it."""
    if not junit.exists():
        return None
    found = ElementTree.parse(junit).find(".//testcase/skipped")
    return None if found is None else found.get("message", "skipped")


def _outcome(
    item: pytest.Item, returncode: int, skipped: str | None, output: str
) -> tuple[str, object]:
    """The child's outcome: passed, skipped (with its reason) or failed (with its output's
    end); a child that passed and then crashed on its way out failed."""
    if returncode == 0 and skipped is None:
        return "passed", None
    if returncode == 0:
        path, line, _ = item.location
        return "skipped", (path, (line or 0) + 1, skipped)
    return "failed", f"the test's own process ended with exit code {returncode}:\n" + output[
        -SHOWN:
    ]
