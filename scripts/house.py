#!/usr/bin/env python3
"""The workspace as its own imports draw it, checked against its pictures.

    python3 scripts/house.py                      # every crate: files, imports, circles
    python3 scripts/house.py --check PICTURE.json # ... and the picture held against the code
    python3 scripts/house.py --graph crates/nsqd  # every import of one folder, file -> file

Reads each crate's module tree from its root (src/lib.rs, src/main.rs),
following `mod` declarations and their `#[path]` attributes and leaving out
what is compiled for tests only, and resolves every path that names a
module of the workspace (`crate::`, `super::`, `self::`, a child module,
another workspace crate by its name), in `use` trees and in code, to the
file that defines the module. Comments, string literals and what is
compiled for tests only are not read. A module's children are parts of
it: what a child takes from its parent, or from any ancestor up to the
crate's root, is not an arrow.

A picture (docs/architecture/*.json) names parts (each some files or
folders, a longer path taking its files from a shorter one), the arrows
between parts that the code has, and arrows that must never be. Checked:
- no circle of files importing each other, anywhere;
- every arrow the picture draws is in the code, and every import from one
  part to another is drawn (so the picture cannot drift from the code);
- no file of a `never` pair's first part reaches one of its second part,
  straight or through files that are on no part.
Exits 1 when any check fails, saying which files and names break it.
"""

import argparse
import json
import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COMMENT_OR_STRING = re.compile(
    r'//[^\n]*|/\*.*?\*/|b?r(#*)".*?"\1|b?"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'',
    re.S,
)
MOD_DECL = re.compile(
    r'((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*([;{])'
)
PATH_ATTR = re.compile(r'#\[path\s*=\s*"([^"]+)"\]')
USE_STMT = re.compile(r'\buse\s+([^;]+);')
PATH_EXPR = re.compile(r'(?<![\w:])((?:\w+::)+\w+|\w+::\{)')


def strip(text):
    """The code without comments or what is compiled for tests only;
    string literals become empty strings."""
    code = COMMENT_OR_STRING.sub(
        lambda m: '""' if m.group(0).endswith('"') else ' ', text)
    return without_tests(code)


def without_tests(code):
    """Drops every `#[cfg(test)]` item: up to its `;`, or its `{...}`."""
    out, at = [], 0
    for m in re.finditer(r'#\[cfg\(test\)\]', code):
        if m.start() < at:
            continue
        out.append(code[at:m.start()])
        i = m.end()
        while i < len(code) and code[i] not in ';{':
            i += 1
        if i < len(code) and code[i] == '{':
            depth = 0
            while i < len(code):
                depth += {'{': 1, '}': -1}.get(code[i], 0)
                i += 1
                if depth == 0:
                    break
        else:
            i += 1
        at = i
    out.append(code[at:])
    return ''.join(out)


def crates():
    """(crate name as code writes it, root file) for each workspace member."""
    out = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if d not in ('target', 'node_modules', '.git', '.venv', 'fuzz')]
        if 'Cargo.toml' not in filenames or dirpath == ROOT:
            continue
        toml = open(os.path.join(dirpath, 'Cargo.toml')).read()
        m = re.search(r'^\[package\][^\[]*?^name\s*=\s*"([^"]+)"', toml, re.M | re.S)
        if not m:
            continue
        for root in ('src/lib.rs', 'src/main.rs'):
            if os.path.exists(os.path.join(dirpath, root)):
                out.append((m.group(1).replace('-', '_'), os.path.join(dirpath, root)))
                break
    return out


class Crate:
    """One crate's module tree: module path (tuple) -> file, and back."""

    def __init__(self, name, root):
        self.name = name
        self.files = {}      # module path -> file
        self.module_of = {}  # file -> module path
        self.text = {}       # file -> code without comments
        self.walk((), root)

    def walk(self, path, file):
        if file in self.module_of or not os.path.exists(file):
            return
        self.files[path] = file
        self.module_of[file] = path
        raw = open(file, encoding='utf-8').read()
        code = strip(raw)
        self.text[file] = code
        base = os.path.basename(file)
        mod_rs = base in ('mod.rs', 'lib.rs', 'main.rs')
        here = os.path.dirname(file)
        # `#[path]` values live in string literals: read them from the raw text
        for m in MOD_DECL.finditer(strip_comments_only(raw)):
            attrs, name, end = m.group(1), m.group(2), m.group(3)
            if end == '{' or 'cfg(test)' in attrs:
                continue  # inline modules are read as part of their file
            p = PATH_ATTR.search(attrs)
            if p:
                child = os.path.normpath(os.path.join(here, p.group(1)))
            else:
                d = here if mod_rs else os.path.join(here, base[:-3])
                child = os.path.join(d, name + '.rs')
                if not os.path.exists(child):
                    child = os.path.join(d, name, 'mod.rs')
            self.walk(path + (name,), child)

    def children(self, path):
        return {p[-1] for p in self.files if len(p) == len(path) + 1 and p[:-1] == path}

    def file_for(self, path):
        """The file of the longest module prefix of `path`."""
        for n in range(len(path), -1, -1):
            if tuple(path[:n]) in self.files:
                return self.files[tuple(path[:n])]
        return None


def strip_comments_only(text):
    return re.sub(r'//[^\n]*|/\*.*?\*/', ' ', text, flags=re.S)


def expand_use(tree):
    """`a::{b, c::{d, e as f}}` -> [['a','b'], ['a','c','d'], ['a','c','e']]."""
    tree = re.sub(r'\s+as\s+\w+', '', tree)  # renames change no module
    tree = re.sub(r'\s+', '', tree)
    out = []

    def go(prefix, s):
        if not s:
            return
        if '{' not in s:
            out.append(prefix + [x for x in s.split('::') if x])
            return
        head, rest = s.split('{', 1)
        body = rest[:rest.rfind('}')]
        segs = [x for x in head.split('::') if x]
        depth, start = 0, 0
        for i, ch in enumerate(body + ','):
            if ch == '{':
                depth += 1
            elif ch == '}':
                depth -= 1
            elif ch == ',' and depth == 0:
                go(prefix + segs, body[start:i])
                start = i + 1

    go([], tree)
    return out


def references(crate, file, by_name):
    """(file imported, the name taken) for every workspace path in `file`."""
    code = crate.text[file]
    me = crate.module_of[file]
    kids = crate.children(me)
    paths = []
    for m in USE_STMT.finditer(code):
        paths.extend(expand_use(m.group(1)))
    no_use = USE_STMT.sub(' ', code)
    for m in PATH_EXPR.finditer(no_use):
        if m.group(1).endswith('{'):
            continue
        paths.append(m.group(1).split('::'))
    found = set()
    for segs in paths:
        segs = [s for s in segs if s and s != 'self'] if segs[0] != 'self' else segs[1:]
        if not segs:
            continue
        first = segs[0]
        target_crate, mod = crate, None
        if first == 'crate':
            mod = list(segs[1:])
        elif first == 'super':
            base = list(me)
            i = 0
            while i < len(segs) and segs[i] == 'super':
                base = base[:-1]
                i += 1
            mod = base + list(segs[i:])
        elif first in kids:
            mod = list(me) + list(segs)
        elif first in by_name and first != crate.name:
            target_crate, mod = by_name[first], list(segs[1:])
        else:
            continue
        target = target_crate.file_for(mod)
        # A module's children are parts of it: what a child takes from
        # its parent (or any ancestor, the crate's root included) is no
        # arrow between rooms.
        if target_crate is crate and me[:len(crate.module_of.get(target, ()))] == crate.module_of.get(target):
            continue
        if target and target != file:
            found.add((target, segs[-1]))
    return found


def graph():
    """Every workspace file's imports: {file: {imported file: {names}}}."""
    all_crates = [Crate(n, r) for n, r in crates()]
    by_name = {c.name: c for c in all_crates}
    g = defaultdict(lambda: defaultdict(set))
    for c in all_crates:
        for f in c.module_of:
            g[f]
            for target, name in references(c, f, by_name):
                g[f][target].add(name)
    return g


def rel(f):
    return os.path.relpath(f, ROOT)


def circles(g):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(g):
        if v not in index:
            visit(v)
    return out


def part_of(parts, f):
    """The part a file is on: the longest path of a part that holds it."""
    best, best_len = None, -1
    r = rel(f)
    for name, p in parts.items():
        for path in p['is']:
            hit = r == path or (path.endswith('/') and r.startswith(path))
            if hit and len(path) > best_len:
                best, best_len = name, len(path)
    return best


def check(g, picture_file):
    pic = json.load(open(picture_file))
    parts = pic.get('parts', {})
    where = {f: part_of(parts, f) for f in g}
    problems = []
    for name, p in parts.items():
        for path in p['is']:
            if not os.path.exists(os.path.join(ROOT, path)):
                problems.append(f'part {name}: {path} does not exist')
    # arrows between parts, straight
    code_arrows = defaultdict(set)
    for f, targets in g.items():
        for t, names in targets.items():
            a, b = where[f], where[t]
            if a and b and a != b:
                code_arrows[(a, b)].add(f'{rel(f)} -> {rel(t)}: {", ".join(sorted(names))}')
    drawn = {(a[0], a[1]) for a in pic.get('arrows', [])}
    for a, b in sorted(drawn - set(code_arrows)):
        problems.append(f'drawn but not in the code: {a} -> {b}')
    for (a, b) in sorted(set(code_arrows) - drawn):
        problems.append(f'in the code but not drawn: {a} -> {b}\n      ' + '\n      '.join(sorted(code_arrows[(a, b)])))
    # nevers: straight, or through files on no part
    for a, b, *why in pic.get('never', []):
        for f in (f for f in g if where[f] == a):
            seen, todo = {f}, [(f, [f])]
            while todo:
                v, trail = todo.pop()
                for w in g[v]:
                    if w in seen:
                        continue
                    seen.add(w)
                    if where[w] == b:
                        problems.append(f'never {a} -> {b} ({why[0] if why else ""}) is broken: '
                                        + ' -> '.join(rel(x) for x in trail + [w]))
                    elif where[w] is None:
                        todo.append((w, trail + [w]))
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--check', action='append', default=[], help='a picture to hold against the code')
    ap.add_argument('--graph', help='print every import of the files under this folder')
    args = ap.parse_args()
    g = graph()
    if args.graph:
        prefix = os.path.join(ROOT, args.graph)
        for f in sorted(g):
            if f.startswith(prefix):
                for t, names in sorted(g[f].items()):
                    print(f'{rel(f)} -> {rel(t)}: {", ".join(sorted(names))}')
        return 0
    failed = False
    found = circles(g)
    files = len(g)
    imports = sum(len(t) for t in g.values())
    print(f'{files} files, {imports} imports between them, {len(found)} circles')
    for c in found:
        failed = True
        print('circle: ' + ' <-> '.join(rel(f) for f in c))
        for f in c:
            for t in c:
                if t in g[f]:
                    print(f'  {rel(f)} -> {rel(t)}: {", ".join(sorted(g[f][t]))}')
    for p in args.check:
        problems = check(g, p)
        print(f'{os.path.relpath(p)}: ' + ('the picture holds' if not problems else f'{len(problems)} problems'))
        for line in problems:
            failed = True
            print('  ' + line)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
