#!/usr/bin/env python3
"""No source files of a floor call each other round a cycle.

    tools/check-cycles.py LIBRARY.a...

For each static library (one per floor, meson.build), every object's
undefined symbols are resolved to the object of the same library that
defines them: an edge from user to definer.  A cycle of such edges (a
strongly connected set of two or more files) means two files that can
only be read, tested or replaced together: the build fails, naming them
and the symbols that close the cycle.  Calls between floors point down
already (floor_check_* in meson.build, tools/check-floors.sh)."""
import os
import re
import subprocess
import sys


def edges(archive):
    # nm -P: "ARCHIVE[MEMBER]: SYMBOL TYPE [VALUE SIZE]"
    out = subprocess.run(["nm", "-A", "-P", archive], check=True, capture_output=True, text=True).stdout
    defs, uses = {}, {}
    for line in out.splitlines():
        m = re.match(r"^.*\[(.*)\]: (\S+) (\S)", line)
        if not m:
            continue
        member, sym, kind = os.path.basename(m.group(1)), m.group(2), m.group(3)
        uses.setdefault(member, set())
        if kind == "U":
            uses[member].add(sym)
        elif kind.isupper():
            defs[sym] = member
    graph = {m: {} for m in uses}
    for member, syms in uses.items():
        for s in syms:
            d = defs.get(s)
            if d and d != member:
                graph[member].setdefault(d, []).append(s)
    return graph


def cycles(graph):
    """Tarjan's strongly connected components of two or more nodes."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main(argv):
    if len(argv) < 2:
        print("usage: tools/check-cycles.py LIBRARY.a...", file=sys.stderr)
        return 2
    status = 0
    for archive in argv[1:]:
        graph = edges(archive)
        for comp in cycles(graph):
            status = 1
            print(f"tools/check-cycles.py: {os.path.basename(archive)}: these files call each other round a cycle:",
                  file=sys.stderr)
            for v in comp:
                for w in sorted(graph[v]):
                    if w in comp:
                        print(f"  {v} -> {w} ({', '.join(sorted(graph[v][w])[:4])})", file=sys.stderr)
    if status == 0:
        print(f"cycles: none among the files of {len(argv) - 1} libraries")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
