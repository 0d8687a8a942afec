"""Open the built docs site in headless Chromium with no network.

    python .ci/check_site.py SITE SHOTS

For the API, accuracy, benchmarks and primitive pages: no page asks for anything
off the machine (no http(s) URL in a script, stylesheet, image or font
reference), Chromium renders each from file:// inside a network namespace
with no interfaces but loopback (`unshare -n`), the rendered DOM shows no
raw TeX, and a screenshot of each goes to SHOTS. Exit 3 (skipped, with the
reason) where Chromium or an unshared network cannot be had.
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

site, shots = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
PAGES = ("api.html", "accuracy.html", "benchmarks.html", "primitive.html")
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

REMOTE = re.compile(r"""(?:src|href)\s*=\s*["'](?:https?:)?//[^"']+["']""")
REMOTE_CSS = re.compile(r"""url\(\s*["']?(?:https?:)?//""")
TEX = re.compile(r"\\\(|\\\)|\\\[|\\frac|\\beta|\\sigma|\$\$")
LINKS = re.compile(r"""<a [^>]*href=["'](?!https?:|#|mailto:)([^"'#?]*)""")
flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
shots.mkdir(parents=True, exist_ok=True)
problems = []
for page in PAGES:
    path = site / page
    text = path.read_text()
    # Only the page's own resources: links to the repository are anchors.
    for tag in re.findall(r"<(?:script|link|img|source|iframe)[^>]*>", text):
        if REMOTE.search(tag):
            problems.append(f"{page} loads {REMOTE.search(tag).group(0)}")
    for link in LINKS.findall(text):
        if link and not (path.parent / link).is_file():
            problems.append(f"{page} links to {link}, which is not a file")
    url = path.as_uri()
    dom = subprocess.run(
        [*offline, browser, *flags, "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if dom.returncode != 0:
        problems.append(f"{page}: Chromium failed: {dom.stderr[-500:]}")
        continue
    body = re.sub(r"<(script|style)[^>]*>.*?</\1>", "", dom.stdout, flags=re.S)
    visible = re.sub(r"<[^>]+>", " ", re.sub(r"<math.*?</math>", "", body, flags=re.S))
    if TEX.search(visible):
        around = visible[max(0, TEX.search(visible).start() - 60) :][:120]
        problems.append(f"{page} shows raw TeX: ...{around.strip()}...")
    shot = shots / page.replace(".html", ".png")
    subprocess.run(
        [
            *offline,
            browser,
            *flags,
            "--window-size=1280,2400",
            f"--screenshot={shot}",
            url,
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
    f"site check: {', '.join(PAGES)} render offline, no raw TeX; screenshots in {shots}"
)
