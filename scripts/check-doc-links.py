#!/usr/bin/env python3
"""Check that every relative link in the repository's Markdown files points to an
existing file, and that a `#fragment` on a link to a Markdown file names one of its
headings (GitHub's anchor rules). Web links are not fetched.

    python3 scripts/check-doc-links.py            # from anywhere in the clone

Exit status 1 and one line per broken link when any is broken.
"""
import re
import subprocess
import sys
from pathlib import Path

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"`|\*\*|\*|_(?=\w)|(?<=\w)_", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(md: Path) -> set:
    seen, out, fenced = {}, set(), False
    for line in md.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or not line.startswith("#"):
            continue
        base = slug(line.lstrip("#"))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(md: Path):
    fenced = False
    for no, line in enumerate(md.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        # Inline code spans are not links.
        line = re.sub(r"`[^`]*`", "", line)
        for m in LINK.finditer(line):
            yield no, m.group(1)


def main() -> int:
    root = Path(__file__).resolve().parent.parent
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
        cwd=root, capture_output=True, text=True, check=True,
    ).stdout.split()
    broken = 0
    for name in files:
        md = root / name
        if not md.is_file():
            continue
        for no, target in links(md):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            path, _, frag = target.partition("#")
            dest = (md.parent / path).resolve() if path else md
            if not dest.exists():
                print(f"{name}:{no}: {target}: no such file")
                broken += 1
            elif frag and dest.suffix == ".md" and frag not in anchors(dest):
                print(f"{name}:{no}: {target}: no heading #{frag} in {dest.relative_to(root)}")
                broken += 1
    print(f"{len(files)} Markdown files, {broken} broken links")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
