"""Time to interactive of the calculator pages, and what their runtime adds to the site.

Serves a built site on loopback, opens each calculator page in headless Chromium (Selenium) and
reads the time from navigation start to the first result, which the page records when its form
is ready (``data-ready-ms`` of the ``.calculator`` block, see book/assets/calculator.js). "cold"
is the first page a fresh browser opens (nothing cached); "warm" is each page opened again
(the browser's cache holds the runtime, as for a reader who has seen one calculator).

    python tools/calculator_timing.py [--site site] [--repeat 3] [--json timing.json]

Prints one line per page, milliseconds, and the bytes of site/assets/pyodide (decimal MB).
Needs chromium and chromedriver (requirements/apt.txt) and a built site (make book).
"""

import argparse
import functools
import http.server
import json
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WAIT_S = 60


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no line per request
        pass


def serve(site: Path, handler_class: type = QuietHandler):
    """Serve ``site`` on a free loopback port from a daemon thread (``handler_class`` answers)."""
    handler = functools.partial(handler_class, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def ready_ms(driver, url: str) -> float:
    """Load ``url`` and wait for its calculator; the page's own figure, in ms."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    driver.get(url)
    WebDriverWait(driver, WAIT_S).until(
        lambda d: d.find_element(By.CSS_SELECTOR, ".calculator").get_attribute("data-state") in ("ready", "failed"))
    block = driver.find_element(By.CSS_SELECTOR, ".calculator")
    if block.get_attribute("data-state") != "ready":
        raise SystemExit(f"calculator_timing.py: error: {url} failed to start")
    return float(block.get_attribute("data-ready-ms"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, default=REPO / "site", help="a built site (default site/)")
    parser.add_argument("--repeat", type=int, default=3, help="warm loads per page (default 3)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    pages = sorted(p.parent.name for p in (args.site / "calculators").glob("*/index.html"))
    runtime = args.site / "assets" / "pyodide"
    if not pages or not runtime.is_dir():
        parser.error(f"--site {args.site}: no built calculator pages (run make book)")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"):
        options.add_argument(flag)
    server = serve(args.site)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        results = {"date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "runtime_bytes": sum(f.stat().st_size for f in runtime.iterdir()),
                   "runtime_files": sorted(f.name for f in runtime.iterdir()), "pages": {}}
        results["cold_ms"] = ready_ms(driver, f"{base}/calculators/{pages[0]}/")
        for page in pages:
            warm = [ready_ms(driver, f"{base}/calculators/{page}/") for _ in range(args.repeat)]
            results["pages"][page] = {"warm_ms": warm, "warm_median_ms": statistics.median(warm)}
    finally:
        driver.quit()
        server.shutdown()
    print("# calculator pages, time from navigation to the first result (ms), headless Chromium on loopback")
    print(f"cold (first page, empty cache: {pages[0]}) {results['cold_ms']:8.0f}")
    for page, r in results["pages"].items():
        print(f"warm {page:<34} {r['warm_median_ms']:8.0f}  (median of {len(r['warm_ms'])})")
    print(f"runtime in site/assets/pyodide: {results['runtime_bytes'] / 1e6:.1f} MB "
          f"({', '.join(results['runtime_files'])})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
