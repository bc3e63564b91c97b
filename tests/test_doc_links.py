"""Every Markdown link of README.md and docs/ to a file of the repository resolves, and so does its #anchor (a
heading of the target page, named as GitHub names it). tests/test_cited_paths.py checks cited paths; this checks
the links a reader clicks."""

import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text (a link's label, not its target), lower case, punctuation other than
    '-' and '_' dropped, spaces as '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        if m := re.match(r"#{1,6}\s+(.*)", line):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
        out.update(re.findall(r'<a (?:name|id)="([^"]+)"', line))
    return frozenset(out)


def test_slug_as_github_names_headings():
    # headings of docs/hardware.md and docs/topology.md that README.md links to by these anchors
    assert slug("Blackwell (`b200_sxm`, `gb200`)") == "blackwell-b200_sxm-gb200"
    assert slug("NVLink domains larger than a node (GB200 NVL72)") == "nvlink-domains-larger-than-a-node-gb200-nvl72"


def test_markdown_links_resolve():
    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for m in LINK.finditer(FENCE.sub("", page.read_text())):
            target = m.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "broken Markdown links:\n" + "\n".join(broken)
