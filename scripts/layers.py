#!/usr/bin/python3
"""layers.py — the dependency circles in hark's sources, by include and by
call, and the boundaries between them.

Two graphs over the files of src/ and tools/hark/ (a .c and its .h count as
one module):
  include: module A -> B when A's files #include one of B's headers (a
           public header include/hark/x.h is the module hark/x);
  call:    module A -> B when A's object file uses a symbol B's defines
           (read with nm from a build tree's object files).
Every strongly connected component of more than one module is a circle. The
circles are printed per graph, and grouped by folder (src/frontend/http, ...).
Then the boundaries (BOUNDARIES below): edges that no file may have in
either graph, such as util (the ground floor) using anything above it.

  scripts/layers.py [--build DIR] [--allow A,B ...] [--check]

--check fails (exit 1) when a circle is not allowed or a boundary is
crossed. Allowed is one circle at most, between files of the allowed
folders: by default the engine's, src/core <-> src/sched through
core/engine.h, which Triton lives with too (the scheduler runs the model;
the model owns its scheduler).
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# Module names: src/ dropped, include/ dropped (hark/x), tools/ kept.
TREES = ["src", os.path.join("include", "hark"), os.path.join("tools", "hark")]

# (from, to, unless, why[, graph]): no module whose name starts with `from`
# may include or call one whose name starts with a prefix in `to`, unless
# that name starts with a prefix in `unless`. A fifth field limits the rule
# to one graph: the front ends call the public API, which src/core defines,
# so that rule is about includes only.
BOUNDARIES = [
    ("util/", ("",), ("util/",),
     "util is the ground floor: it uses libc only (not hark/backend.h, not the core)"),
    ("runtime/", ("",), ("util/", "runtime/"), "runtime uses util only"),
    ("frontend/", ("hark/backend",), (),
     "front ends read models through hark/model.h; hark/backend.h is for backends"),
    ("hark/", ("hark/backend",), (),
     "a public header front ends read must not bring in hark/backend.h"),
    ("frontend/", ("core/", "sched/", "runtime/"), (),
     "front ends use the engine through include/hark only", "include"),
    ("frontend/speech/", ("frontend/kserve/",), ("frontend/kserve/route",),
     "the speech services know KServe's routes (route.h), not its REST service or codec"),
    ("frontend/kserve/kserve_write", ("frontend/kserve/kserve_parse",), (),
     "the response writer does not depend on the request parser (shared memory is shm.c's)"),
    ("frontend/kserve/route", ("frontend/",), ("frontend/kserve/route",),
     "routes are parsed without the HTTP transport or the services"),
    ("tools/hark/transcribe_", ("tools/hark/transcribe",), ("tools/hark/transcribe_job",),
     "hark transcribe's drivers and report use the job (transcribe_job.h), not their caller"),
]


def module_of(path):
    """src/frontend/http/http.c -> frontend/http/http (no extension),
    tools/hark/perf.c -> tools/hark/perf; a private header foo_impl.h
    belongs to module foo."""
    rel = os.path.relpath(path, ROOT)
    for top in ("src" + os.sep, "include" + os.sep):
        if rel.startswith(top):
            rel = rel[len(top):]
    mod = os.path.splitext(rel)[0]
    return mod[:-5] if mod.endswith("_impl") else mod


def sources():
    out = []
    for tree in TREES:
        for top, _, files in os.walk(os.path.join(ROOT, tree)):
            for f in files:
                if f.endswith((".c", ".h")):
                    out.append(os.path.join(top, f))
    return sorted(out)


def include_graph(files):
    """Edges between the modules of `files`; a public header
    include/hark/x.h is the module hark/x."""
    src = os.path.join(ROOT, "src")
    by_rel = {os.path.relpath(f, src): f for f in files if f.startswith(src + os.sep)}
    graph = {module_of(f): set() for f in files}
    for f in files:
        text = open(f, encoding="utf-8", errors="replace").read()
        here = os.path.dirname(f)
        for inc in INCLUDE_RE.findall(text):
            local = os.path.normpath(os.path.join(here, inc))
            public = os.path.join(ROOT, "include", inc)
            target = (by_rel.get(inc) or (local if local in files else None) or
                      (public if public in files else None))
            if not target:
                continue
            b = module_of(target)
            if module_of(f) != b:
                graph[module_of(f)].add(b)
    return graph


def object_files(build):
    out = {}
    for top, _, files in os.walk(build):
        for f in files:
            if not f.endswith(".c.o"):
                continue
            p = os.path.join(top, f)
            m = re.search(r"/(src|tools/hark)/(.+)\.c\.o$", p.replace(os.sep, "/"))
            # Only objects of sources that exist: a build tree keeps those of
            # files since moved or removed. Tests compile some sources again.
            if (m and "/tests/" not in p and
                    os.path.exists(os.path.join(ROOT, m.group(1), m.group(2) + ".c"))):
                mod = m.group(2) if m.group(1) == "src" else "tools/hark/" + m.group(2)
                out.setdefault(mod, p)
    return out


def call_graph(build):
    objs = object_files(build)
    defined, used = {}, {}
    for mod, path in objs.items():
        lines = subprocess.run(["nm", path], capture_output=True, text=True).stdout.splitlines()
        used[mod] = set()
        for line in lines:
            parts = line.split()
            if len(parts) == 2 and parts[0] == "U":
                used[mod].add(parts[1])
            elif len(parts) == 3 and parts[1] in "TDBRC":
                defined[parts[2]] = mod
    graph = {m: set() for m in objs}
    for mod, syms in used.items():
        for s in syms:
            d = defined.get(s)
            if d and d != mod:
                graph[mod].add(d)
    return graph


def sccs(graph):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def crossings(name, graph):
    """The edges of graph `name` that a boundary forbids, with the reason."""
    out = []
    for a, bs in sorted(graph.items()):
        for b in sorted(bs):
            for frm, to, unless, why, *only in BOUNDARIES:
                if only and only[0] != name:
                    continue
                if (a.startswith(frm) and any(b.startswith(t) for t in to) and
                        not any(b.startswith(u) for u in unless)):
                    out.append((a, b, why))
                    break
    return out


def folder_graph(graph):
    g = {}
    for a, bs in graph.items():
        fa = os.path.dirname(a)
        g.setdefault(fa, set())
        for b in bs:
            fb = os.path.dirname(b)
            if fa != fb:
                g[fa].add(fb)
    return g


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--allow", action="append", default=None,
                    help="a circle allowed by --check, its folders comma-separated")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    allowed = [set(a.split(",")) for a in (args.allow or ["core,sched"])]
    files = sources()
    graphs = [("include", include_graph(files))]
    if os.path.isdir(args.build):
        graphs.append(("call", call_graph(args.build)))
    else:
        print(f"(no build tree at {args.build}: include graph only)")
    bad = 0
    for name, g in graphs:
        circles = sorted(sccs(g), key=len, reverse=True)
        folders = sccs(folder_graph(g))
        print(f"{name}: {len(circles)} circle(s) between files, {len(folders)} between folders")
        allowed_files = 1
        for c in circles:
            within = any({m.split("/")[0] for m in c} <= a for a in allowed)
            ok = within and allowed_files > 0
            allowed_files -= 1 if ok else 0
            print("  files:   " + " <-> ".join(c) + ("" if ok else "   (not allowed)"))
            bad += 0 if ok else 1
        for c in folders:
            ok = any(set(c) == a for a in allowed)
            print("  folders: " + " <-> ".join(c) + ("" if ok else "   (not allowed)"))
            bad += 0 if ok else 1
        crossed = crossings(name, g)
        print(f"{name}: {len(crossed)} boundary crossing(s)")
        for a, b, why in crossed:
            print(f"  {a} -> {b}   (not allowed: {why})")
        bad += len(crossed)
    if args.check and bad:
        print(f"layers: {bad} circle(s) or crossing(s) not allowed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
