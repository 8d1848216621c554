#!/usr/bin/env python3
"""Finds two shapes GCC 12 (Debian 12's compiler) miscompiles in coroutines:
- `co_return co_await f(...)` statements that build a temporary of class type
  (`T{...}`, `std::string(...)`) in the same full-expression;
- `co_await` or `co_return` inside the body of a `switch`.

GCC 12 destroys such a temporary twice: a
`co_return co_await refuse(client, fc, ex, refusal{503, "audit_unavailable"})` freed the
refusal's heap-allocated reason twice (AddressSanitizer: double-free) on every full-audit
refusal. The house rule (docs/ARCHITECTURE.md, "Coroutines") is to name the object first.

Usage: coroutine_temporaries.py DIR [DIR ...]; exit 1 and one line per finding
(file:line: statement) if any, exit 0 otherwise. Checks itself first, so a pattern that
stopped matching fails instead of passing silently.
"""

import os
import re
import sys

STATEMENT = re.compile(r"co_return\s+co_await\b[^;]*;", re.S)
TEMPORARY = re.compile(r"\b[A-Za-z_][\w:]*\s*\{[^{}]*\}|\bstd::(string|vector)\s*\(")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    return re.sub(r"//[^\n]*", lambda m: " " * len(m.group(0)), text)


SWITCH = re.compile(r"\bswitch\s*\(")


def switch_bodies(text):
    """(offset of the switch, its parenthesised head and braced body) for every switch."""
    for m in SWITCH.finditer(text):
        depth, i = 0, m.end() - 1
        while i < len(text):  # the head: co_await may be in it too
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
            if depth == 0:
                break
        start = text.find("{", i)
        if start < 0:
            continue
        depth, j = 0, start
        while j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                break
            j += 1
        yield m.start(), text[m.start():j + 1]


def findings(text):
    text = strip_comments(text)
    for m in STATEMENT.finditer(text):
        if TEMPORARY.search(m.group(0)):
            yield (text.count("\n", 0, m.start()) + 1,
                   "temporary in co_return co_await: " + " ".join(m.group(0).split()))
    for at, body in switch_bodies(text):
        if re.search(r"\bco_(await|return)\b", body):
            yield (text.count("\n", 0, at) + 1,
                   "co_await/co_return in a switch: " + " ".join(body.split())[:120])


def self_check():
    bad = 'co_return co_await refuse(client, fc, ex, refusal{503, "audit_unavailable"});'
    good = ('const refusal r{503, "audit_unavailable"};\n'
            "co_return co_await refuse(client, fc, ex, r); // not refusal{1, \"x\"}")
    assert list(findings(bad)), "the pattern no longer finds the known double-free shape"
    assert not list(findings(good)), "the pattern flags a named object or a comment"
    switch = ("switch (co_await resolve(d)) {\ncase 1:\n    co_await deny(c, rec);\n"
              "    co_return false;\n}")
    assert list(findings(switch)), "the pattern no longer finds co_await in a switch"
    assert not list(findings("switch (x) {\ncase 1:\n    return y;\n}")), \
        "the pattern flags a switch without co_await"


def main(dirs):
    self_check()
    found = 0
    for root in dirs:
        for dirpath, _, files in os.walk(root):
            for name in sorted(files):
                if not name.endswith((".cpp", ".hpp")):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    for line, what in findings(f.read()):
                        print("%s:%d: %s" % (path, line, what))
                        found += 1
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
