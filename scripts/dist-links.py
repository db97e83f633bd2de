#!/usr/bin/env python3
"""Makes the release tarball's pages stand alone (scripts/dist.sh).

Usage: dist-links.py <staged directory>

Each relative link of each .md page under the directory whose file is not in
the directory (the clients' READMEs, fuzz/: files of the source repository
the tarball does not ship) becomes its text followed by where that file is in
the source repository. Links inside the tarball, links to anchors of the same
page, and absolute URLs stay. Lines stay where they were (tests/dist.rs
compares each shipped page with the repository's, line by line), and code
blocks are left as they are.
"""

import os
import re
import sys

LINK = re.compile(r"\[([^\[\]]*)\]\(([^)\s]+)\)")


def standalone(page: str, root: str) -> str:
    base = os.path.dirname(page)
    with open(page, encoding="utf-8") as f:
        text = f.read()

    def keep_or_unlink(m: re.Match) -> str:
        target = m.group(2)
        file = target.split("#", 1)[0]
        if "://" in target or target.startswith("mailto:") or not file:
            return m.group(0)
        if os.path.exists(os.path.join(base, file)):
            return m.group(0)
        in_repo = os.path.normpath(os.path.join(os.path.relpath(base, root), file))
        return f"{m.group(1)} (`{in_repo}` in the source repository)"

    # The page as runs of prose and of code blocks (fences included); each
    # run of prose is rewritten as a whole, so that a link whose text runs
    # over two lines is found (its line break stays in the text).
    runs: list[tuple[bool, list[str]]] = []
    fence = False
    for line in text.split("\n"):
        is_fence = line.lstrip().startswith("```")
        in_code = fence or is_fence
        if is_fence:
            fence = not fence
        if runs and runs[-1][0] == in_code:
            runs[-1][1].append(line)
        else:
            runs.append((in_code, [line]))
    return "\n".join(
        "\n".join(lines) if code else LINK.sub(keep_or_unlink, "\n".join(lines))
        for code, lines in runs
    )


def main() -> None:
    root = sys.argv[1]
    for base, _, names in os.walk(root):
        for name in sorted(names):
            if name.endswith(".md"):
                page = os.path.join(base, name)
                text = standalone(page, root)
                with open(page, "w", encoding="utf-8") as f:
                    f.write(text)


if __name__ == "__main__":
    main()
