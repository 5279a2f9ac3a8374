"""Under CI a skipped test fails and names its reason; elsewhere it stays a skip. The count is printed."""

from __future__ import annotations

import pytest

INNER = """
import pytest

def test_needs_a_browser():
    pytest.skip("no Chromium on this platform")

@pytest.mark.xfail(reason="known")
def test_expected_to_fail():
    assert False

def test_fine():
    assert True
"""


@pytest.mark.parametrize(("ci", "failed", "skipped"), [("true", 1, 0), ("1", 1, 0), ("", 0, 1), ("false", 0, 1)])
def test_a_skip_fails_only_under_ci(pytester: pytest.Pytester, monkeypatch, ci, failed, skipped) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("CI", ci)
    pytester.makeconftest("from ci_strict import pytest_runtest_makereport, pytest_terminal_summary  # noqa: F401")
    pytester.makepyfile(INNER)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=failed, skipped=skipped, xfailed=1)
    result.stdout.fnmatch_lines([f"skipped tests: {skipped} *"])
    if failed:
        result.stdout.fnmatch_lines(["*skipped under CI*no Chromium on this platform*"])
