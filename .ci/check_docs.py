"""Check the built docs site: the API reference shows each example as code
and each function's one returned value as one row.

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
if problems:
    sys.exit("docs check failed: " + "; ".join(problems))
print(
    f"docs check: API examples render as code ({prompts} prompts), "
    f"{len(returns)} Returns tables of one row"
)
