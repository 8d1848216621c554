#!/usr/bin/env python3
"""Offline sanity check of detectors/rules/*.yml, independent of the C++ engine.

Checks every rule file for: required fields, known category, unique ids across all
files, kebab-case ids, patterns free of constructs that Hyperscan or RE2 reject
(look-around, back-references, named groups, possessive/atomic groups), bounded
repetition (warns on unbounded + / *), and that every example yields a finding and no
negative example does. A "finding" is a match of the pattern (Python `re`, close to the
RE2/Hyperscan subset the rules use) whose capture group 1 (or whole match) passes a
Python approximation of the rule's validator. The authoritative check is
`sluice rules check`; this script is for fast iteration without a build.

Usage: tests/rules_extra/check_rules.py [RULES_DIR]   (exit 1 on any problem)
"""
import base64
import glob
import json
import math
import os
import re
import sys
import zlib
from collections import Counter

import yaml

CATEGORIES = {"llm-key", "cloud", "vcs", "payment", "private-key", "pii", "generic", "saas",
              "messaging", "crypto", "database", "ci"}
FORBIDDEN = [(r"\(\?<?[=!]", "look-around"), (r"\\[1-9]", "back-reference"), (r"\(\?P?<[A-Za-z]", "named group"),
             (r"\(\?>", "atomic group"), (r"[+*}]\+", "possessive quantifier"), (r"\\[zZAG]", "anchor not shared by RE2 and Hyperscan")]
B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def base62_6(v):
    out = ""
    for _ in range(6):
        out = B62[v % 62] + out
        v //= 62
    return out


def crc_token_ok(t):
    i = t.index("_") + 1
    body, cs = t[i:i + 30], t[i + 30:i + 36]
    return len(t) == i + 36 and base62_6(zlib.crc32(body.encode())) == cs


def luhn_ok(num):
    d = [int(c) for c in num if c.isdigit()]
    s = 0
    for i, x in enumerate(reversed(d)):
        if i % 2:
            x = x * 2 - 9 if x * 2 > 9 else x * 2
        s += x
    return s % 10 == 0 and 12 <= len(d) <= 19


def iban_ok(s):
    s = s.replace(" ", "")
    if len(s) < 15:
        return False
    return int("".join(str(int(c, 36)) for c in s[4:] + s[:4])) % 97 == 1


def jwt_ok(t):
    try:
        h = t.split(".")[0]
        d = json.loads(base64.urlsafe_b64decode(h + "=" * (-len(h) % 4)))
        return isinstance(d, dict) and "alg" in d
    except Exception:
        return False


def entropy(s):
    c = Counter(s)
    return -sum(v / len(s) * math.log2(v / len(s)) for v in c.values())


def placeholder(s):
    low = s.lower()
    if any(w in low for w in ("xxxx", "changeme", "example", "password", "your", "${", "{{", "<")):
        return True
    return len(set(s)) <= 2


def filler(s):
    return bool(s) and 2 * max(Counter(s).values()) >= len(s)


VALIDATORS = {
    "": lambda s: True, "luhn": luhn_ok, "iban": iban_ok, "jwt": jwt_ok,
    # Checksum validators lower confidence, they do not drop a finding (issue 25); only
    # filler (one character making up half the token) is not a token.
    "npm": lambda s: not filler(s), "github": lambda s: not filler(s),
    "grafana": lambda s: not filler(s), "cloudflare": lambda s: not filler(s),
    "atlassian": lambda s: not filler(s), "nonfiller": lambda s: not filler(s),
    "bip39": lambda s: True,  # word list and checksum: checked by the engine only
    "entropy": lambda s: len(s) >= 8 and not placeholder(s) and entropy(s) >= 3.0,
    "placeholder": lambda s: not placeholder(s),
    "pem": lambda s: True,  # ASN.1 / openssh-key-v1 body: checked by the engine only
}


def findings(rx, validator, text):
    out = []
    for m in rx.finditer(text):
        secret = m.group(1) if rx.groups >= 1 and m.group(1) is not None else m.group(0)
        if VALIDATORS[validator](secret):
            out.append(secret)
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "detectors", "rules")
    problems, warnings, ids, total = [], [], {}, 0
    for path in sorted(glob.glob(os.path.join(root, "*.yml"))):
        name = os.path.basename(path)
        try:
            doc = yaml.safe_load(open(path, encoding="utf-8"))
        except yaml.YAMLError as e:
            problems.append("%s: YAML: %s" % (name, e))
            continue
        for r in (doc or {}).get("rules", []):
            total += 1
            rid = r.get("id", "?")
            where = "%s:%s" % (name, rid)
            for f in ("id", "name", "category", "pattern", "references", "examples", "negative_examples"):
                if not r.get(f):
                    problems.append("%s: missing %s" % (where, f))
            if rid in ids:
                problems.append("%s: duplicate id (also in %s)" % (where, ids[rid]))
            ids[rid] = name
            if not re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", rid):
                problems.append("%s: id is not kebab-case" % where)
            if r.get("category") not in CATEGORIES:
                problems.append("%s: unknown category %r" % (where, r.get("category")))
            if not 0 <= float(r.get("confidence", 0.9)) <= 1:
                problems.append("%s: confidence out of range" % where)
            if any(k != k.lower() for k in r.get("keywords", [])):
                problems.append("%s: keywords must be lower-case" % where)
            v = r.get("validator", "") or ""
            if v not in VALIDATORS:
                problems.append("%s: unknown validator %r" % (where, v))
                continue
            pat = r.get("pattern", "")
            for rx_bad, what in FORBIDDEN:
                if re.search(rx_bad, pat.replace("\\\\", "")):
                    problems.append("%s: pattern uses %s" % (where, what))
            if re.search(r"(?<!\\)[+*](?!\})", re.sub(r"\[[^\]]*\]", "[]", pat.replace("\\\\", "").replace("\\+", "").replace("\\*", ""))):
                warnings.append("%s: unbounded repetition" % where)
            try:
                rx = re.compile(pat)
            except re.error as e:
                problems.append("%s: pattern does not compile: %s" % (where, e))
                continue
            for ex in r.get("examples", []):
                if not findings(rx, v, ex):
                    problems.append("%s: example not found: %.60s" % (where, ex))
            for ex in r.get("negative_examples", []) if v not in ("pem", "bip39") else []:
                if findings(rx, v, ex):
                    problems.append("%s: negative example found: %.60s" % (where, ex))
    for w in warnings:
        print("warning:", w)
    for p in problems:
        print("error:", p)
    print("%d rules in %s, %d problems" % (total, root, len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
