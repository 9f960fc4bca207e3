#!/usr/bin/env python3
"""The longest C++/CUDA functions of the tree, and a check that some folders keep theirs short.

    python3 scripts/function_lengths.py                    # the ten longest functions of the tree
    python3 scripts/function_lengths.py --top 30 passes    # the thirty longest under passes/
    python3 scripts/function_lengths.py --max 80 tools driver 'runtime/trainer*'
                                                           # exit 1 naming each function over 80 lines

A function is a brace-delimited body at namespace or class scope whose header ends in a parameter
list (optionally followed by qualifiers, a trailing return type or a constructor's initializer
list); lambdas and local classes count as part of the function they are written in. Its length is
the number of lines from the first line of its header to its closing brace. Comments, string and
character literals are blanked first so that braces inside them do not count. This is a reader's
measure, not a parser: it is exact on this code base's style (clang-format'ed), which is what the
check needs.
"""
import argparse
import fnmatch
import os
import re
import subprocess
import sys

SOURCE_EXTS = (".cc", ".cu", ".h", ".cuh")
CONTROL = {"if", "for", "while", "switch", "catch", "return", "else", "do", "sizeof", "decltype"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def blank_comments_and_literals(text):
    """Same length and line breaks as text; comments and literal contents become spaces."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^()\\ ]{0,16})\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # digit separator 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else " " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_preprocessor(text):
    lines = text.split("\n")
    out, cont = [], False
    for line in lines:
        if cont or line.lstrip().startswith("#"):
            cont = line.rstrip().endswith("\\")
            out.append(" " * len(line))
        else:
            out.append(line)
    return "\n".join(out)


def header_name(header):
    """The function's name when header (text before '{') is a function header, else None."""
    h = " ".join(header.split())
    if not h:
        return None
    # A constructor's initializer list: `X::X(args) : a_(b), c_{d}` -> cut at the ':' after ')'.
    m = re.match(r"^(.*?\))\s*(?:const|noexcept|override|final|mutable|volatile|&|&&|\s)*:(?!:)", h)
    if m:
        h = m.group(1)
    h = re.sub(r"\s*->\s*[^()]*$", "", h)  # trailing return type
    h = re.sub(r"(\s*\b(const|noexcept|override|final|mutable|volatile|try)\b|\s*&&?)*\s*$", "", h)
    if not h.endswith(")"):
        return None
    depth, k = 0, len(h) - 1
    while k >= 0:
        if h[k] == ")":
            depth += 1
        elif h[k] == "(":
            depth -= 1
            if depth == 0:
                break
        k -= 1
    if k <= 0:
        return None
    m = re.search(r"([~A-Za-z_][\w:~<>,\s]*?|operator\s*\S+?)\s*$", h[:k])
    if not m:
        return None
    name = m.group(1).strip()
    last = name.split("::")[-1].split()[-1] if name else ""
    if not last or last in CONTROL or "=" in h[:k].split("(")[0] or h.startswith("["):
        return None
    return name.split()[-1]


def functions(path):
    """(name, first line, last line) of every function body at namespace or class scope."""
    with open(path, encoding="utf-8", errors="replace") as f:
        raw = f.read()
    text = strip_preprocessor(blank_comments_and_literals(raw))
    found = []
    # stack of scopes: 'ns' (namespace/class/extern/enum/initializer), 'fn' (a function body)
    stack = []
    stmt_start = 0  # index where the current declaration's text starts
    i, n = 0, len(text)
    fn_start_line = None
    fn_name = None
    while i < n:
        c = text[i]
        if c == "{":
            if any(s == "fn" or s == "in" for s in stack):
                stack.append("in")
            else:
                header = text[stmt_start:i]
                name = header_name(header)
                if name:
                    lead = len(header) - len(header.lstrip())
                    fn_start_line = text.count("\n", 0, stmt_start + lead) + 1
                    fn_name = name
                    stack.append("fn")
                else:
                    stack.append("ns")
            stmt_start = i + 1
        elif c == "}":
            kind = stack.pop() if stack else "ns"
            if kind == "fn":
                found.append((fn_name, fn_start_line, text.count("\n", 0, i) + 1))
            stmt_start = i + 1
        elif c == ";" and not any(s in ("fn", "in") for s in stack):
            stmt_start = i + 1
        elif c == ":" and not any(s in ("fn", "in") for s in stack):
            # access specifiers `public:` end a declaration; `::` and initializer lists do not
            before = text[stmt_start:i].strip()
            if before in ("public", "private", "protected"):
                stmt_start = i + 1
        i += 1
    return found


def tracked_sources(patterns):
    files = subprocess.run(["git", "-C", ROOT, "ls-files"], capture_output=True, text=True,
                           check=True).stdout.split()
    files = [f for f in files if f.endswith(SOURCE_EXTS)]
    if not patterns:
        return files
    keep = []
    for f in files:
        for p in patterns:
            p = p.rstrip("/")
            if f == p or f.startswith(p + "/") or fnmatch.fnmatch(f, p) or fnmatch.fnmatch(f, p + "/*"):
                keep.append(f)
                break
    return keep


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*", help="folders, files or globs relative to the repository root")
    ap.add_argument("--top", type=int, default=10, help="how many of the longest to list")
    ap.add_argument("--max", type=int, default=0,
                    help="exit 1 if any function under the paths is longer than this many lines")
    args = ap.parse_args()
    files = tracked_sources(args.paths)
    if not files:
        print(f"function_lengths: no C++/CUDA sources match {' '.join(args.paths)}", file=sys.stderr)
        return 2
    rows = []
    for f in files:
        for name, a, b in functions(os.path.join(ROOT, f)):
            rows.append((b - a + 1, f, a, name))
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    if args.max:
        over = [r for r in rows if r[0] > args.max]
        for length, f, line, name in over:
            print(f"{f}:{line}: {name} is {length} lines (at most {args.max}): split it into named steps")
        if over:
            return 1
        longest = rows[0] if rows else (0, "-", 0, "-")
        print(f"function_lengths: {len(rows)} functions in {len(files)} files, the longest "
              f"{longest[0]} lines ({longest[3]}, {longest[1]}:{longest[2]}): all within {args.max}")
        return 0
    for length, f, line, name in rows[: args.top]:
        print(f"{length:5d}  {f}:{line}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
