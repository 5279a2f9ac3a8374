"""The documentation site: built offline with warnings as errors, every tutorial executed on the way
(with inline figures), and every page rendered by headless Chromium without a broken image or a
script error."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS))

from check_site import check_site, find_chromium  # noqa: E402

import docs_build  # noqa: E402

# The first test to use the site builds it, executing every tutorial: allow for a loaded machine.
pytestmark = pytest.mark.timeout(1800)

TUTORIALS = sorted(p.stem for p in (DOCS / "tutorials").glob("[0-9]*.py"))
PAGES = ["index", "quickstart", "cli", "tasks/index", "tasks/reverse", "tasks/anomaly", "tasks/classify",
         "tasks/translate", "tasks/lm", "generating", "pretrained", "tuning", "scaling", "performance", "blocks",
         "api/index", "api/nn", "tutorials/index"]  # fmt: skip
EXEC_ROW = re.compile(
    r'<tr[^>]*><td><p><a [^>]*href="(?P<page>[^"]+)\.html"[^>]*>.*?</a></p></td>\s*<td><p>[^<]*</p></td>\s*'
    r"<td><p>[^<]*</p></td>\s*<td><p>(?P<seconds>[\d.]+)</p></td>\s*<td><p>(?P<status>[^<]*)</p></td>",
    re.S,
)


@pytest.fixture(scope="session")
def site() -> tuple[Path, subprocess.CompletedProcess[str], float]:
    """The site as `make docs` builds it (from scratch), its build output and how long the build took: the
    build tests/docs_build.py started when the suite was collected (these tests run last)."""
    html, proc, seconds = docs_build.result()
    print(f"site built in {seconds:.0f} s")
    return html, proc, seconds


def exec_table(html: Path) -> dict[str, tuple[float, str]]:
    """The build's execution table (tutorials page): notebook -> (seconds, status)."""
    text = (html / "tutorials" / "index.html").read_text(encoding="utf-8")
    return {m["page"]: (float(m["seconds"]), m["status"]) for m in EXEC_ROW.finditer(text)}


def test_the_site_builds_offline_without_warnings(site) -> None:  # type: ignore[no-untyped-def]
    html, proc, _ = site
    assert proc.returncode == 0, f"sphinx-build -W failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    for page in PAGES:
        assert (html / f"{page}.html").is_file(), f"the site has no page {page}"


def test_there_are_nine_tutorials() -> None:
    assert len(TUTORIALS) == 9, TUTORIALS
    assert [t[:2] for t in TUTORIALS] == [f"{i:02d}" for i in range(1, 10)]


@pytest.mark.parametrize("name", TUTORIALS)
def test_tutorial_executed_with_inline_figures(site, name: str) -> None:  # type: ignore[no-untyped-def]
    html, proc, _ = site
    table = exec_table(html)
    assert name in table, f"{name} is not in the build's execution table (build output:\n{proc.stderr[-3000:]})"
    seconds, status = table[name]
    print(f"{name}: executed in {seconds:.1f} s")
    assert status == "✅", f"{name} did not execute cleanly: {status}"
    page = (html / "tutorials" / f"{name}.html").read_text(encoding="utf-8")
    assert "Traceback" not in page and 'class="output traceback"' not in page
    images = re.findall(r'<img[^>]*\bsrc="([^"]+)"', page)
    pngs = [src for src in images if src.endswith(".png")]
    assert pngs, f"{name} displays no figure"
    for src in pngs:
        data = (html / "tutorials" / src).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000, f"{name}: {src} is not a real PNG"


def test_every_page_renders_in_chromium(site) -> None:  # type: ignore[no-untyped-def]
    html, proc, _ = site
    assert proc.returncode == 0, "the site did not build (see the build test)"
    if find_chromium() is None:
        pytest.skip("no Chromium on this platform (make test installs Debian's chromium): pages not opened")
    # every page opened in the background once the site was built (tests/docs_build.py), or here if that did not run
    reports = docs_build.pages() or [asdict(r) for r in check_site(html)]
    assert len(reports) >= len(PAGES)
    problems = {r["page"]: r["problems"] for r in reports if r["problems"]}
    assert not problems, problems
    by_page = {r["page"]: r for r in reports}
    for name in TUTORIALS:
        assert int(by_page[f"tutorials/{name}.html"]["images"]) >= 1


def test_the_browser_check_catches_broken_pages(tmp_path: Path) -> None:
    """The check can fail: a missing image, a script error and a fetch from elsewhere are all reported."""
    if find_chromium() is None:
        pytest.skip("no Chromium on this platform (make test installs Debian's chromium): pages not opened")
    (tmp_path / "good.html").write_text("<html><body><h1>Fine</h1><p>" + "text " * 20 + "</p></body></html>")
    (tmp_path / "bad.html").write_text(
        "<html><body><h1>Broken</h1><p>" + "text " * 20 + "</p><img src='missing.png'>"
        "<script>undefinedFunction()</script><script src='https://example.invalid/x.js'></script></body></html>"
    )
    (tmp_path / "blank.html").write_text("<html><body></body></html>")
    reports = {r.page: r.problems for r in check_site(tmp_path)}
    assert reports["good.html"] == []
    bad = "\n".join(reports["bad.html"])
    assert "missing.png" in bad and "undefinedFunction" in bad and "outside the site" in bad
    assert any("title" in p for p in reports["blank.html"])
