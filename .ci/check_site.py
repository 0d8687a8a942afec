"""Open the built docs site in headless Chromium with no network, as a
reader opens it from disk.

    python .ci/check_site.py SITE SHOTS

For every page: Chromium opens it from file:// inside a network namespace
with no interface but loopback (`unshare -n`), lets its scripts run, and
writes a net log; the check fails on any request the page made for
anything but a file, a data or blob URL (a script's fetch of a web API
counts, not only a `<script src>` in the HTML). Each page's links point at
files that exist (but for the web server's 404.html). The API, accuracy,
benchmarks and primitive pages are also rendered to check that the DOM
shows no raw TeX, and screenshotted to SHOTS. Exit 3 (skipped, with the
reason) where Chromium or an unshared network cannot be had.
"""

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

site, shots = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
RENDERED = ("api.html", "accuracy.html", "benchmarks.html", "primitive.html")
browser = next(
    (b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)),
    None,
)
if browser is None:
    print("SKIPPED: the site check (no Chromium on this machine)")
    sys.exit(3)
offline = ["unshare", "-n", "--"]
if subprocess.run([*offline, "true"], capture_output=True).returncode != 0:
    print("SKIPPED: the site check (cannot unshare the network here)")
    sys.exit(3)

REMOTE_CSS = re.compile(r"""url\(\s*["']?(?:https?:)?//""")
TEX = re.compile(r"\\\(|\\\)|\\\[|\\frac|\\beta|\\sigma|\$\$")
LINKS = re.compile(r"""<a [^>]*href=["'](?!https?:|#|mailto:)([^"'#?]*)""")
# What a page opened from disk may ask for; Chromium's own chrome:// pages
# and the about: blank it starts on are not requests of the page's.
LOCAL = ("file:", "data:", "blob:", "about:", "chrome:", "chrome-error:")
# Chromium's own traffic off, as this machine's probe runs it.
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--metrics-recording-only",
]


def requests_of(page_url, profile):
    """The URLs that the page at `page_url` requested while Chromium loaded
    it and ran its scripts for 5 s of virtual time: the net log's request
    jobs started in the page's own network context (its top frame a file),
    which leaves out Chromium's own traffic (a clock check, say)."""
    log = Path(profile) / "net-log.json"
    result = subprocess.run(
        [
            *offline,
            browser,
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--log-net-log={log}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            page_url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if not log.is_file():
        raise RuntimeError(f"no net log: {result.stderr[-500:]}")
    text = log.read_text()
    # Chromium may stop before it closes the JSON; its events still parse.
    if not text.rstrip().endswith("}"):
        text = text.rstrip().rstrip(",") + "]}"
    data = json.loads(text)
    start = data["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = set()
    for event in data.get("events", []):
        params = event.get("params", {})
        if event.get("type") == start and "url" in params:
            if params.get("network_isolation_key", "").startswith("file://"):
                urls.add(params["url"])
    return result, urls


problems = []
pages = sorted(site.rglob("*.html"))
for path in pages:
    page = path.relative_to(site).as_posix()
    text = path.read_text()
    # 404.html is a web server's page (its links are absolute), never a file's.
    for link in LINKS.findall(text) if page != "404.html" else ():
        if link and not (path.parent / link).is_file():
            problems.append(f"{page} links to {link}, which is not a file")
    with tempfile.TemporaryDirectory() as profile:
        try:
            result, urls = requests_of(path.as_uri(), profile)
        except (RuntimeError, subprocess.TimeoutExpired, ValueError) as err:
            problems.append(f"{page}: {err}")
            continue
    remote = sorted(u for u in urls if not u.startswith(LOCAL))
    if remote:
        problems.append(f"{page} requested {', '.join(remote[:5])}")
    if page not in RENDERED:
        continue
    body = re.sub(r"<(script|style)[^>]*>.*?</\1>", "", result.stdout, flags=re.S)
    visible = re.sub(r"<[^>]+>", " ", re.sub(r"<math.*?</math>", "", body, flags=re.S))
    if TEX.search(visible):
        around = visible[max(0, TEX.search(visible).start() - 60) :][:120]
        problems.append(f"{page} shows raw TeX: ...{around.strip()}...")
    shot = shots / page.replace(".html", ".png")
    shot.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            *offline,
            browser,
            *FLAGS,
            "--window-size=1280,2400",
            f"--screenshot={shot}",
            path.as_uri(),
        ],
        capture_output=True,
        timeout=120,
    )
    if not shot.is_file():
        problems.append(f"{page}: no screenshot")
for css in site.rglob("*.css"):
    if REMOTE_CSS.search(css.read_text(errors="replace")):
        problems.append(f"{css.relative_to(site)} loads a remote resource")
if problems:
    sys.exit("site check failed:\n  " + "\n  ".join(problems))
print(
    f"site check: {len(pages)} pages opened offline with no request off the "
    f"machine; {', '.join(RENDERED)} show no raw TeX; screenshots in {shots}"
)
