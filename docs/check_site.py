"""Open every page of the built site in headless Chromium and report what a reader would find broken.

    python docs/check_site.py build/docs/html

The site is served from a throw-away HTTP server on 127.0.0.1, as a reader would get it. A page
passes when it renders (a visible title and body text), every image on it decodes, its scripts raise
no error and log none, and every resource it asks for loads from the site itself (the site is built
for offline use: a request to any other address is a failure too). Playwright
drives the system's Chromium (``--chromium PATH``, else ``chromium`` on PATH); no browser is
downloaded.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from playwright.sync_api import sync_playwright

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# As the project's other browser checks: no sandbox as root, nothing that phones home.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# The offline search index must find this word (on the building-blocks pages).
SEARCH_QUERY = "attention"
# Makes lazy images load, waits for every image to decode, and reports what it found.
INSPECT = """async () => {
  const images = Array.from(document.images);
  images.forEach((img) => { img.loading = "eager"; });
  await Promise.all(images.map((img) => img.decode().catch(() => null)));
  const title = document.querySelector("h1, h2");
  const main = document.querySelector("article") || document.body;
  return {
    images: images.length,
    broken: images.filter((img) => !(img.complete && img.naturalWidth > 0)).map((img) => img.src),
    title: title && title.offsetParent !== null ? title.textContent.trim() : "",
    text: main.innerText.trim().length,
  };
}"""


def find_chromium() -> str | None:
    """The first Chromium-family browser on PATH, or None."""
    return next((path for path in map(shutil.which, CHROMIUM_NAMES) if path), None)


@dataclass
class PageReport:
    """What opening one page found."""

    page: str
    images: int = 0
    title: str = ""
    problems: list[str] = field(default_factory=list)


def site_pages(root: Path) -> list[Path]:
    """Every HTML page of a built Sphinx site (not the copied sources or static files)."""
    skip = {"_static", "_sources", "_images", "jupyter_execute"}
    return sorted(p for p in root.rglob("*.html") if not skip & set(p.relative_to(root).parts))


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        # The browser drops connections it no longer needs (a page closed while a request ran).
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextmanager
def serve(root: Path) -> Iterator[str]:
    """Serve ``root`` over HTTP on 127.0.0.1 (a free port) while the block runs; yields the base URL."""
    server = _Server(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def check_site(root: Path, chromium: str | None = None, timeout_ms: int = 30_000) -> list[PageReport]:
    """Open every page of the site in ``root`` and return one report per page."""
    root = root.resolve()
    browser_path = chromium or find_chromium()
    if browser_path is None:
        raise FileNotFoundError(f"no Chromium found on PATH (looked for {', '.join(CHROMIUM_NAMES)})")
    reports = []
    with serve(root) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=browser_path, args=CHROMIUM_ARGS)
        context = browser.new_context()
        try:
            for path in site_pages(root):
                reports.append(_check_page(context, base, root, path, timeout_ms))
        finally:
            browser.close()
    return reports


def _check_page(context, base: str, root: Path, path: Path, timeout_ms: int) -> PageReport:  # type: ignore[no-untyped-def]
    report = PageReport(path.relative_to(root).as_posix())
    url = base + report.page
    page = context.new_page()

    def console(m) -> None:  # type: ignore[no-untyped-def]
        # Chromium itself probes /favicon.ico on some pages although each page links its icon.
        if m.type == "error" and m.location.get("url") != base + "favicon.ico":
            report.problems.append(f"console error: {m.text} ({m.location.get('url')})")

    page.on("console", console)
    page.on("pageerror", lambda err: report.problems.append(f"script error: {err}"))
    page.on("response", lambda r: r.status >= 400 and report.problems.append(f"HTTP {r.status} for {r.url}"))
    page.on("requestfailed", lambda r: report.problems.append(f"failed to load {r.url}: {r.failure}"))

    def request(r) -> None:  # type: ignore[no-untyped-def]
        if not r.url.startswith((base, "data:", "blob:", "about:")):
            report.problems.append(f"fetches from outside the site: {r.url}")

    page.on("request", request)
    try:
        if path == root / "search.html":  # the search page shows results only for a query: ask one
            page.goto(f"{url}?q={SEARCH_QUERY}", wait_until="load", timeout=timeout_ms)
            page.wait_for_selector("ul.search li", timeout=timeout_ms)
        else:
            page.goto(url, wait_until="load", timeout=timeout_ms)
        found = page.evaluate(INSPECT)
    finally:
        page.close()
    report.images, report.title = found["images"], found["title"]
    report.problems += [f"image did not load: {src}" for src in found["broken"]]
    if not found["title"]:
        report.problems.append("no visible title")
    if found["text"] < 50:
        report.problems.append(f"almost no text rendered ({found['text']} characters)")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built HTML folder, e.g. build/docs/html")
    parser.add_argument("--chromium", default=None, help="the browser binary (default: chromium on PATH)")
    parser.add_argument("--json", type=Path, default=None, help="also write every page's report to this file")
    args = parser.parse_args(argv)
    reports = check_site(args.site, args.chromium)
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in reports]))
    bad = [r for r in reports if r.problems]
    for r in bad:
        print(f"{r.page}:", *(f"  - {p}" for p in r.problems), sep="\n")
    images = sum(r.images for r in reports)
    print(f"{len(reports)} pages, {images} images: {len(bad)} with problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
