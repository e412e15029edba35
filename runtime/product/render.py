"""Rendering agent output for people: what the product shows must not carry private content out.

Markdown-ish text becomes HTML with everything escaped. Links and images to the product's own pages
(a path starting with a single ``/``) render; anything pointing elsewhere does not: an external image
would be fetched by every viewer's browser the moment it renders (a canary in its URL leaves at once), and
an external link is one click from the same. External images are dropped with a visible marker; external
links keep their text and show only the host, not clickable.
"""

from __future__ import annotations

import html
import re
from urllib.parse import urlsplit

LINK = re.compile(r"(!?)\[([^\]\n]{0,500})\]\(([^)\s]{0,2000})\)")


def internal(url: str) -> bool:
    return url.startswith("/") and not url.startswith("//") and "\\" not in url


def render(text: str) -> str:
    out, last = [], 0
    for m in LINK.finditer(text):
        out.append(html.escape(text[last:m.start()]))
        bang, label, url = m.groups()
        if internal(url):
            attr = html.escape(url, quote=True)
            out.append(f'<img src="{attr}" alt="{html.escape(label)}">' if bang else
                       f'<a href="{attr}">{html.escape(label)}</a>')
        elif bang:
            out.append('<span class="external-image-removed">[external image removed]</span>')
        else:
            host = urlsplit(url).hostname or "an external site"
            out.append(f'<span class="external-link">{html.escape(label)} ({html.escape(host)}, link removed)</span>')
        last = m.end()
    out.append(html.escape(text[last:]))
    return "<div class=\"rendered\">" + "".join(out).replace("\n", "<br>") + "</div>"
