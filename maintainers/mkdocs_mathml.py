"""mkdocs hook: the site's math as MathML, rendered at build time.

pymdownx.arithmatex (generic mode) marks each formula as
`<span class="arithmatex">\\(...\\)</span>` (or a `div` with `\\[...\\]`);
this hook replaces each with the MathML that latex2mathml makes of it, which
browsers render natively. The built site needs no script, no CDN and no
network: it reads the same from a file manager as from a server.
"""

from __future__ import annotations

import html
import re

from latex2mathml.converter import convert

_MATH = re.compile(
    r'<(span|div) class="arithmatex">\s*(?:\\\(|\\\[)(.*?)(?:\\\)|\\\])\s*</\1>', re.S
)


def _to_mathml(match):
    tex = html.unescape(match.group(2))
    display = "block" if match.group(1) == "div" else "inline"
    return convert(tex, display=display)


def on_page_content(content, **kwargs):
    return _MATH.sub(_to_mathml, content)
