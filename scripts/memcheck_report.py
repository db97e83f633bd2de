#!/usr/bin/env python3
"""The verdict of `make test-valgrind`: reads memcheck's logs (one per
server process, scripts/memcheck-server.sh), prints every error record whole
(its kind, the stack, where the value or block came from) and exits 1 if
there is any.

An error record is a message followed by a stack ("at 0x...: f (file:line)"):
invalid reads and writes, uses of uninitialised values, invalid, double and
mismatched frees, overlapping copies, fishy arguments, definite leaks (the
only leak kind scripts/memcheck-server.sh shows), and the stack of a process
killed by a signal (a crash). Suppressed errors are not in the log; the
suppressions used (valgrind's --verbose) are counted at the end. A log
whose process did not exit (killed, or still running) has no summary; its
records still count.

Usage: memcheck_report.py DIR
"""
import collections
import glob
import os
import re
import sys

LINE = re.compile(r"^==(\d+)== ?(.*)$")
FRAME = re.compile(r"^\s+(at|by) 0x[0-9A-Fa-f]+: ")


def records(path):
    """The error records of one log: lists of lines, the message first."""
    lines = []
    with open(path, errors="replace") as f:
        for raw in f:
            m = LINE.match(raw.rstrip("\n"))
            if m:
                lines.append(m.group(2))
    out, current = [], None
    for i, text in enumerate(lines):
        if current is not None:
            if text == "":
                out.append(current)
                current = None
            else:
                current.append(text)
            continue
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if text and not text.startswith(" ") and FRAME.match(nxt):
            current = [text]
    if current:
        out.append(current)
    return out


def kind(message):
    """The record's kind, without its sizes and counts."""
    message = re.sub(r"^Thread \d+.*?:\s*", "", message)
    if "are definitely lost" in message:
        return "definitely lost (leak)"
    return re.sub(r"\d[\d,]*", "N", message)


def main():
    directory = sys.argv[1]
    logs = sorted(glob.glob(os.path.join(directory, "memcheck.*.log")))
    if not logs:
        print(f"memcheck: no logs in {directory}: did any server start?")
        return 1
    kinds = collections.Counter()
    suppressed = collections.Counter()
    total = 0
    for path in logs:
        found = records(path)
        with open(path, errors="replace") as f:
            text = f.read()
        summary = re.findall(r"ERROR SUMMARY: ([\d,]+) errors from ([\d,]+) contexts \(suppressed: ([\d,]+)", text)
        exited = (
            f"exited, {summary[-1][0]} errors ({summary[-1][2]} suppressed)"
            if summary
            else "did not exit by itself (killed?)"
        )
        print(f"memcheck: {os.path.basename(path)}: {len(found)} error records; {exited}")
        for record in found:
            kinds[kind(record[0])] += 1
        for count, name in re.findall(r"used_suppression:\s+([\d,]+) (\S+)", text):
            suppressed[name] += int(count.replace(",", ""))
        total += len(found)
        for record in found[:20]:
            print("\n".join("    " + line for line in record))
            print()
        if len(found) > 20:
            print(f"    ... {len(found) - 20} more records in {path}")
    print(f"memcheck: {len(logs)} server processes, {total} error records")
    for k, n in kinds.most_common():
        print(f"    {n:6}  {k}")
    for name, n in suppressed.most_common():
        print(f"memcheck: suppressed {n} times: {name} (scripts/memcheck.supp says why)")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
