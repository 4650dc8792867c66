#!/usr/bin/env python3
"""Runs a Markdown walkthrough exactly as written, and checks the output it shows.

    scripts/doc-run.py FILE.md [FILE.md ...]

A fenced block preceded by an HTML comment is part of the run (the comments do not render):

    <!-- run -->                  the block's commands, in one bash session shared by every block
                                  of the file (so `export` and `&` jobs carry over), from the
                                  repository's root, with `set -euo pipefail`
    <!-- run: background URL -->  the block runs in the background, as a reader runs it in another
                                  terminal; the next block starts once URL answers (up to 15 min:
                                  the block may build first)
    <!-- output -->               what the block before prints on stdout, compared line by line
                                  (trailing spaces ignored)

Blocks without a comment (a test command, an alternative) are not run. At the end, or on the
first failing command, everything the walkthrough started is stopped. Exits 1 on a failing
command or an output that differs, printing the block and a diff.
"""

import difflib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

MARK = re.compile(r"^<!--\s*(run(?::\s*background\s+(\S+))?|output)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(```+|~~~+)")
SEPARATOR = "@@doc-run-block"


def blocks(path):
    """Yields (kind, ready_url, text, line) for each marked fenced block of the file."""
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        mark = MARK.match(lines[i])
        if not mark:
            i += 1
            continue
        start = i + 1
        fence = FENCE.match(lines[start]) if start < len(lines) else None
        if not fence:
            sys.exit(f"{path}:{i + 1}: a doc-run comment must be followed by a fenced block")
        indent, ticks = fence.group(1), fence.group(2)
        body, j = [], start + 1
        while j < len(lines) and not lines[j].strip().startswith(ticks):
            line = lines[j]
            body.append(line[len(indent):] if line.startswith(indent) else line)
            j += 1
        if j == len(lines):
            sys.exit(f"{path}:{start + 1}: unclosed fenced block")
        kind = "output" if mark.group(1) == "output" else ("background" if mark.group(2) else "run")
        yield kind, mark.group(2), "\n".join(body), start + 1
        i = j + 1


def script(steps):
    """One bash script running every step, each one's stdout after a separator line."""
    out = ["set -euo pipefail"]
    for n, (kind, url, text, _) in enumerate(steps):
        out.append(f"echo {SEPARATOR} {n}")
        if kind == "background":
            out.append("{\n" + text + "\n} &")
            out.append(
                f"curl -s -o /dev/null --retry 900 --retry-all-errors --retry-delay 1 '{url}' "
                f"|| {{ echo 'doc-run: {url} never answered' >&2; exit 1; }}"
            )
        else:
            out.append(text)
    out.append(f"echo {SEPARATOR} end")
    return "\n".join(out) + "\n"


def run(path, root):
    marked = list(blocks(path))
    steps = [b for b in marked if b[0] != "output"]
    if not steps:
        sys.exit(f"{path}: no <!-- run --> blocks")
    # Which step each output block checks: the step right before it.
    expected, last = {}, -1
    for kind, _, text, line in marked:
        if kind != "output":
            last += 1
        elif last < 0:
            sys.exit(f"{path}:{line}: an output block with no run block before it")
        else:
            expected[last] = (text, line)
    with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as f:
        f.write(script(steps))
    print(f"== {path}: {len(steps)} blocks, {len(expected)} outputs checked", flush=True)
    # stdout to a file, not a pipe: servers the walkthrough starts with `&` inherit it and would
    # hold a pipe open after the script ends.
    with tempfile.TemporaryFile("w+") as captured:
        proc = subprocess.Popen(
            ["bash", f.name], cwd=root, stdout=captured, text=True, start_new_session=True
        )
        try:
            proc.wait(timeout=1800)
        except subprocess.TimeoutExpired:
            print(f"{path}: still running after 30 min", file=sys.stderr)
            proc.kill()
            proc.wait()
        finally:
            # The script is reaped (a zombie would count as left running): now the rest.
            stop_group(proc.pid)
            os.unlink(f.name)
        captured.seek(0)
        stdout = captured.read()
    sys.stdout.write(stdout if stdout.endswith("\n") or not stdout else stdout + "\n")
    outputs, current = {}, None
    for line in stdout.split("\n"):
        if line.startswith(SEPARATOR + " "):
            tag = line.split(" ", 1)[1]
            current = None if tag == "end" else int(tag)
            if current is not None:
                outputs[current] = []
        elif current is not None:
            outputs[current].append(line)
    failed, broken = [], None
    if not stdout.rstrip().endswith(f"{SEPARATOR} end"):
        broken = max(outputs, default=0)
        kind, _, text, line = steps[broken]
        failed.append(f"{path}:{line}: this block failed (exit {proc.returncode}):\n{text}")
    for n, (text, line) in expected.items():
        if n not in outputs or n == broken:
            continue
        got = clean(outputs[n])
        want = clean(text.split("\n"))
        if got != want:
            diff = "\n".join(difflib.unified_diff(want, got, "shown", "printed", lineterm=""))
            failed.append(f"{path}:{line}: the output shown differs from what the block printed:\n{diff}")
    for f in failed:
        print(f"doc-run: {f}", file=sys.stderr)
    return not failed


def stop_group(pgid):
    """Stops everything the walkthrough left running (servers started with `&`), and waits until
    it is gone, ports and all: sluice drains for a while after SIGTERM. SIGKILL after 20 s."""
    try:
        os.killpg(pgid, signal.SIGTERM)
        for _ in range(200):
            time.sleep(0.1)
            os.killpg(pgid, 0)
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def clean(lines):
    lines = [l.rstrip() for l in lines]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ok = all([run(p, root) for p in sys.argv[1:]])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
