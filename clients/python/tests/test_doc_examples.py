"""Every Python block of README.md and docs/, run as it is written against
the test server (its port put in place of 6379), on an empty database.

A line `print(...)  # -> TEXT` says what that print writes: the test compares
the lines the block prints with those TEXTs, in order, `...` standing for any
text and `A..B` for an integer from A to B (as in tests/doc_examples.rs, which
runs the redis-cli sessions of the same pages). A block after
`<!-- not run: why -->` is left out, as there. A block after
`<!-- file: NAME -->` is a file the page's Python blocks read: each runs
in a directory holding its page's files. The server holds no named
policy when a block starts (FLUSHALL leaves them: they are dropped too)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import pytest
import redis

from .servers import REPO, Server


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def page_files(page: str) -> dict[str, str]:
    """The blocks of `page` after `<!-- file: NAME -->`, by NAME."""
    files: dict[str, str] = {}
    lines = (REPO / page).read_text().splitlines()
    for i, line in enumerate(lines):
        named = re.fullmatch(r"<!--\s*file:\s*(\S+)\s*-->", line.strip())
        if named is None:
            continue
        start = next(j for j in range(i + 1, len(lines)) if lines[j].strip().startswith("```"))
        end = next(j for j in range(start + 1, len(lines)) if lines[j].strip().startswith("```"))
        files[named.group(1)] = "\n".join(lines[start + 1 : end]) + "\n"
    return files


def python_blocks() -> list[tuple[str, int, str]]:
    """(page, line of the opening fence, code) of every Python block that is
    not marked `<!-- not run: ... -->`."""
    blocks = []
    for page in pages():
        directive: str | None = None
        lines = page.read_text().splitlines()
        i = 0
        while i < len(lines):
            line = lines[i].strip()
            if line.startswith("```"):
                lang = line[3:].strip()
                end = i + 1
                while not lines[end].strip().startswith("```"):
                    end += 1
                if lang == "python" and not (directive or "").startswith("not run:"):
                    code = "\n".join(lines[i + 1 : end]) + "\n"
                    blocks.append((str(page.relative_to(REPO)), i + 1, code))
                directive = None
                i = end + 1
                continue
            comment = re.fullmatch(r"<!--(.*)-->", line)
            if comment:
                directive = comment.group(1).strip()
            elif line:
                directive = None
            i += 1
    return blocks


BLOCKS = python_blocks()


def matches(expected: str, actual: str) -> bool:
    """`...` is any text, `A..B` an integer from A to B; the rest literal."""
    pattern = ""
    ranges: list[tuple[int, int]] = []
    for piece in re.split(r"(\.\.\.|(?<![\d.])-?\d+\.\.-?\d+(?![\d.]))", expected):
        if piece == "...":
            pattern += ".*"
        elif re.fullmatch(r"-?\d+\.\.-?\d+", piece):
            low, high = piece.split("..")
            ranges.append((int(low), int(high)))
            pattern += r"(-?\d+)"
        else:
            pattern += re.escape(piece)
    match = re.fullmatch(pattern, actual.rstrip())
    return match is not None and all(
        low <= int(value) <= high for value, (low, high) in zip(match.groups(), ranges, strict=True)
    )


def test_the_patterns_match_what_they_say() -> None:
    assert matches("True 9 [9, 99, 999]", "True 9 [9, 99, 999]")
    assert not matches("True 9", "True 90")
    assert matches("t=1..60", "t=59") and not matches("t=1..60", "t=61")
    assert matches("id ...", "id 0e2aaf05")


def test_every_page_with_python_has_its_blocks_found() -> None:
    found = {page for page, _, _ in BLOCKS}
    assert {"README.md", "docs/clients.md"} <= found


@pytest.mark.parametrize(("page", "line", "code"), BLOCKS, ids=[f"{p}:{n}" for p, n, _ in BLOCKS])
def test_every_python_block_runs_and_prints_what_it_says(
    page: str,
    line: int,
    code: str,
    server: Server,
    r: redis.Redis,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert "port=6379" in code, f"{page}:{line}: a block connects with port=6379 (the test's port)"
    expected = [m.group(1) for m in re.finditer(r"# -> (.*)$", code, re.M)]
    for name, _ in r.execute_command("RL.POLICY", "LIST"):  # type: ignore[no-untyped-call]
        r.execute_command("RL.POLICY", "DEL", name)  # type: ignore[no-untyped-call]
    for name, text in page_files(page).items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": f"doc_example_{line}"}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = code.replace("port=6379", f"port={server.port}")
        exec(compile(code, f"{page}:{line}", "exec"), namespace)
    actual = printed.getvalue().splitlines()
    assert len(actual) == len(expected) and all(
        matches(e, a) for e, a in zip(expected, actual, strict=True)
    ), f"{page}:{line}: the page says it prints {expected}, it printed {actual}"
