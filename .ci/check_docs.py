"""Check the built docs site: the API reference shows each example as code
and each function's one returned value as one row, and every table on every
page has as many cells in each row as in its header.

mkdocstrings renders a Google-style `Examples:` section as a code block; an
unrecognised header (`Example:`) made the `>>>` lines nested blockquotes,
prompts gone. Run after `mkdocs build --site-dir SITE`:
    python .ci/check_docs.py SITE
"""

import html
import re
import sys
from pathlib import Path

page = (Path(sys.argv[1]) / "api.html").read_text()
problems = []
if "<blockquote>" in page:
    problems.append("the API page has blockquotes (an example lost its prompts)")
# Each function's example, as text inside a code block.
code = " ".join(re.findall(r"<code>(.*?)</code>", page, re.S))
code = html.unescape(re.sub(r"<[^>]+>", "", code))
for call in (
    ">>> softplus(jnp.array",
    ">>> softplus_backward(jnp.array",
    "g.is_deleted()",
):
    if call not in code:
        problems.append(f"no code block showing {call!r}")
prompts = page.count("&gt;&gt;&gt;")
if prompts < 9:
    problems.append(f"only {prompts} '>>>' prompts in the API page")
# Each function returns one array: a Returns table of one row (a docstring's
# second line at the first one's indent made it a second returned value).
returns = re.findall(r"Returns:.*?<tbody>(.*?)</tbody>", page, re.S)
if not returns:
    problems.append("the API page has no Returns table")
for rows in returns:
    if rows.count("<tr") != 1:
        problems.append(f"a Returns table with {rows.count('<tr')} rows")


# Every row of the tools' tables (docs/tables/*.md) as written: unescaped
# pipes in a cell once split a row of the derivatives table into eight cells
# under six headers, and the built page put "f32" under "time" and dropped
# the last two figures.
def _text(cell):
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", cell)).split())


def _plain(cell):
    cell = cell.replace("\\|", "|").replace("`", "").replace("**", "")
    return " ".join(cell.split())


built = set()
for path in sorted(Path(sys.argv[1]).rglob("*.html")):
    for row in re.findall(r"<tr>(.*?)</tr>", path.read_text(), re.S):
        cells = re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)
        built.add(tuple(_text(c) for c in cells))
rows = 0
for table in sorted(Path("docs/tables").glob("*.md")):
    for line in table.read_text().splitlines():
        if not line.startswith("|") or set(line) <= set("|-: "):
            continue
        cells = tuple(_plain(c) for c in re.split(r"(?<!\\)\|", line.strip())[1:-1])
        if any("](" in c or "$" in c or "<" in c for c in cells):
            continue  # links, math or HTML: not compared
        rows += 1
        if cells not in built:
            problems.append(f"{table.name}: the built site has no row {cells}")
if problems:
    sys.exit("docs check failed: " + "; ".join(problems))
print(
    f"docs check: API examples render as code ({prompts} prompts), "
    f"{len(returns)} Returns tables of one row, {rows} rows of docs/tables as written"
)
