#!/usr/bin/env python3
"""check_layers.py — the layering rules of ops/ and cli/ (docs/architecture.md).

Fails (exit 1, naming every offence) when
  1. the folders of ops/ depend on each other in a cycle (folder A includes a
     header of folder B and B, directly or not, one of A);
  2. the modules of ops/ (a .c/.h pair) include each other in a cycle;
  3. a private header (NAME_internal.h) is included from outside its folder;
  4. a file of ops/ or cli/ has more than MAX_LINES lines and does not say why
     (a comment with the words "long because");
  5. a policy name is compared outside the policy's own file (strcmp against
     a literal that is a registered policy name, in ops/ or cli/ but not in
     ops/sync/<name>.c or the registry).
Usage: check_layers.py SOURCE_ROOT
"""
import os
import re
import sys

MAX_LINES = 800
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(root, top):
    for d, _, files in os.walk(os.path.join(root, top)):
        for f in sorted(files):
            if f.endswith((".c", ".h")):
                yield os.path.relpath(os.path.join(d, f), root)


def resolve(root, src, inc):
    """The repository path an include names: relative to the root (the
    project's include style) or to the including file's folder."""
    for cand in (inc, os.path.join(os.path.dirname(src), inc)):
        p = os.path.normpath(cand)
        if os.path.exists(os.path.join(root, p)):
            return p
    return None


def find_cycle(graph):
    """One cycle of graph {node: set(nodes)} as a list, or None."""
    color, stack = {}, []

    def dfs(n):
        color[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if color.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if not color.get(m):
                c = dfs(m)
                if c:
                    return c
        stack.pop()
        color[n] = 2
        return None

    for n in sorted(graph):
        if not color.get(n):
            c = dfs(n)
            if c:
                return c
    return None


def components(graph):
    """The strongly connected components of graph with more than one node
    (each holds at least one cycle), as sets."""
    index, low, on, stack, out, n = {}, {}, set(), [], [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def folder(path):
    parts = path.split(os.sep)
    return os.sep.join(parts[:2]) if parts[0] == "ops" and len(parts) > 2 else os.path.dirname(path)


def module(path):
    return os.path.splitext(path)[0]


def policy_names(root):
    """Registered policy names from the registry's table (ops/sync)."""
    names = set()
    for p in sources(root, "ops/sync"):
        text = open(os.path.join(root, p), encoding="utf-8", errors="replace").read()
        for m in re.finditer(r'\.name\s*=\s*"([a-z_]+)"', text):
            names.add(m.group(1))
    names.discard("")
    return names


def check(root):
    errors = []
    files = list(sources(root, "ops")) + list(sources(root, "cli"))
    fgraph, mgraph = {}, {}
    names = policy_names(root)
    incs = {}
    for src in files:
        text = open(os.path.join(root, src), encoding="utf-8", errors="replace").read()
        incs[src] = [d for d in (resolve(root, src, i) for i in INCLUDE.findall(text)) if d]

    def public(dst, seen=()):
        """A private header is part of its folder's implementation, not a
        module: an include of it stands for the headers it includes."""
        if not dst.endswith("_internal.h"):
            return [dst]
        out = []
        for d in incs.get(dst, []):
            if d not in seen:
                out += public(d, seen + (dst,))
        return out

    for src in files:
        text = open(os.path.join(root, src), encoding="utf-8", errors="replace").read()
        lines = text.count("\n")
        if lines > MAX_LINES and "long because" not in text:
            errors.append(f"{src}: {lines} lines (> {MAX_LINES}) and no comment saying why "
                          "(\"... long because ...\")")
        for inc in INCLUDE.findall(text):
            dst = resolve(root, src, inc)
            if not dst:
                continue
            if dst.endswith("_internal.h") and os.path.dirname(dst) != os.path.dirname(src):
                errors.append(f"{src}: includes {dst}, the private header of another folder")
            if not src.startswith("ops/") or not dst.startswith("ops/"):
                continue
            a, b = folder(src), folder(dst)
            if a != b:
                fgraph.setdefault(a, set()).add(b)
            if src.endswith("_internal.h"):
                continue
            for d in public(dst):
                ma, mb = module(src), module(d)
                if ma != mb and d.startswith("ops/"):
                    mgraph.setdefault(ma, set()).add(mb)
        if src.startswith(("ops/", "cli/")):
            own = os.path.splitext(os.path.basename(src))[0]
            for m in re.finditer(r'strcmp\s*\([^;]*?"([a-z_]+)"', text):
                name = m.group(1)
                if name in names and name != own and not src.startswith("ops/sync/registry"):
                    line = text.count("\n", 0, m.start()) + 1
                    errors.append(f"{src}:{line}: compares a policy name ('{name}') outside "
                                  "its policy's file; use a capability of the registry")
    for what, g in (("folders of ops/ depend", fgraph), ("modules of ops/ include", mgraph)):
        for scc in components(g):
            sub = {n: g.get(n, set()) & scc for n in scc}
            errors.append(f"{what} on each other in a cycle: " + " -> ".join(find_cycle(sub)))
    return errors


def self_test():
    """The checker must catch what it is for: a cycle, a private include."""
    import tempfile
    with tempfile.TemporaryDirectory() as t:
        def put(p, s):
            os.makedirs(os.path.dirname(os.path.join(t, p)), exist_ok=True)
            open(os.path.join(t, p), "w").write(s)
        put("ops/a/a.h", '#include "ops/b/b.h"\n')
        put("ops/b/b.c", '#include "ops/a/a.h"\n#include "ops/a/a_internal.h"\n')
        put("ops/b/b.h", "\n")
        put("ops/a/a_internal.h", "\n")
        put("ops/sync/x.c", 'static const st_sync_ops_t o = { .name = "frob" };\n')
        put("cli/c.c", 'int f(const char *s) { return !strcmp(s, "frob"); }\n' + "x\n" * 900)
        e = check(t)
        want = ["cycle", "private header", "no comment saying why", "compares a policy name"]
        missing = [w for w in want if not any(w in x for x in e)]
        if missing:
            print("self-test: not caught:", missing, e)
            return 1
    return 0


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    if self_test():
        return 1
    errors = check(root)
    for e in errors:
        print(e)
    print(f"check_layers: {len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
