"""What a reader's browser downloads to show a page of the book, cold (nothing cached).

Serves a built site on loopback, opens each page in a fresh headless Chromium (Selenium) with
its cache disabled, waits for the page and its late requests (the search index, fonts, the
calculator's runtime) to finish, and sums the bytes of every response (Chromium's
``encodedDataLength``: what crossed the wire, headers included). Compare two builds by giving
each its own --site.

``--gzip`` serves text (HTML, CSS, JavaScript, JSON, SVG, Python) gzip-compressed (level 6) to a
browser that accepts it, as a static host such as GitHub Pages or nginx with ``gzip on`` does;
fonts, images and WebAssembly go as they are. Without it every byte is counted uncompressed.

    python tools/page_weight.py [--site site] [--gzip] [--page /network/ ...] [--json weight.json]

Prints one line per page: total decimal MB, requests, and the five largest responses.
Needs chromium and chromedriver (requirements/apt.txt) and a built site (make book).
"""

import argparse
import gzip
import io
import json
import sys
import time
from pathlib import Path

from tools.calculator_timing import QuietHandler, serve

REPO = Path(__file__).resolve().parents[1]
PAGES = ("/", "/training/memory/", "/network/", "/calculators/kv-cache/", "/zh/network/")
SETTLE_S = 1.0  # no new response for this long: the page has finished loading
LIMIT_S = 90    # a calculator page loads a 10 MB runtime; give up after this


COMPRESSED = (".html", ".css", ".js", ".mjs", ".json", ".svg", ".py", ".txt", ".xml")


class GzipHandler(QuietHandler):
    """Text files gzip-compressed for a browser that accepts gzip (a static host's default)."""

    def send_head(self):
        path = Path(self.translate_path(self.path))
        if path.is_dir():
            path = path / "index.html"
        if not (path.suffix in COMPRESSED and path.is_file()
                and "gzip" in self.headers.get("Accept-Encoding", "")):
            return super().send_head()
        body = gzip.compress(path.read_bytes(), compresslevel=6)
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return io.BytesIO(body)


def weigh(driver, url: str) -> dict:
    """Bytes and requests of one cold load of ``url``: {"bytes", "requests", "largest": [[url, bytes]]}."""
    driver.get_log("performance")  # drain
    driver.execute_cdp_cmd("Network.clearBrowserCache", {})
    driver.get(url)
    sizes: dict[str, int] = {}
    urls: dict[str, str] = {}
    quiet_since, end = time.monotonic(), time.monotonic() + LIMIT_S
    while time.monotonic() < end and time.monotonic() - quiet_since < SETTLE_S:
        for entry in driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            params = message.get("params", {})
            if message["method"] == "Network.requestWillBeSent":
                urls[params["requestId"]] = params["request"]["url"]
                quiet_since = time.monotonic()
            elif message["method"] == "Network.loadingFinished":
                sizes[params["requestId"]] = int(params["encodedDataLength"])
                quiet_since = time.monotonic()
        time.sleep(0.1)
    largest = sorted(((urls.get(r, "?"), n) for r, n in sizes.items()), key=lambda x: -x[1])[:5]
    return {"bytes": sum(sizes.values()), "requests": len(sizes), "largest": [list(x) for x in largest]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, default=REPO / "site", help="a built site (default: site/)")
    parser.add_argument("--page", action="append", help=f"a page's path (default: {' '.join(PAGES)})")
    parser.add_argument("--gzip", action="store_true", help="serve text gzip-compressed, as a static host does")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").is_file():
        parser.error(f"{args.site} holds no built site (make book)")
    from tests.build.conftest import start_chromium

    server = serve(args.site, GzipHandler if args.gzip else QuietHandler)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    driver = start_chromium()
    driver.set_page_load_timeout(LIMIT_S)
    results = {}
    try:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
        for page in args.page or PAGES:
            results[page] = weigh(driver, base + page)
            r = results[page]
            top = ", ".join(f"{u.removeprefix(base)} {n / 1e6:.2f}" for u, n in r["largest"][:3])
            print(f"{page:<28} {r['bytes'] / 1e6:7.2f} MB {r['requests']:4d} requests   largest: {top}")
    finally:
        driver.quit()
        server.shutdown()
    if args.json:
        args.json.write_text(json.dumps({"site": str(args.site), "gzip": args.gzip, "pages": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
