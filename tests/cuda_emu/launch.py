#!/usr/bin/env python3
"""Rewrites a CUDA source for the CPU emulation (tests/cuda_emu/emu.cc):

    kernel<<<grid, block, smem, stream>>>(args);
 -> emu_launch((const void *)&kernel, "kernel", emu_config(grid, block, smem, stream),
               [=]() { kernel(args); });

    extern __shared__ float name[];   (or extern __shared__ __align__(N) float name[];)
 -> float *name = (float *)emu_dynamic_smem();   (aligned to 256 bytes)

Everything else is left as it is, line for line (a #line directive names
the original file), so compiler messages point into lib/cuda.

usage: launch.py IN.cu OUT.cc"""
import re
import sys

KERNEL = re.compile(r'([A-Za-z_][A-Za-z_0-9]*(?:\s*<[^<>;()]*>)?)\s*$')
SMEM = re.compile(r'extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s+)?([A-Za-z_][A-Za-z_0-9]*)\s+'
                  r'([A-Za-z_][A-Za-z_0-9]*)\s*\[\s*\]\s*;')


def closing_paren(text, i):
    """index of the ')' matching the '(' at i"""
    depth = 0
    while i < len(text):
        c = text[i]
        if c in '"\'':
            q = c
            i += 1
            while text[i] != q:
                i += 2 if text[i] == '\\' else 1
        elif c == '(':
            depth += 1
        elif c == ')':
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError('unbalanced parentheses')


def rewrite(src, path):
    out, pos = [], 0
    while True:
        i = src.find('<<<', pos)
        if i < 0:
            out.append(src[pos:])
            break
        m = KERNEL.search(src[pos:i])
        if not m:
            raise ValueError('%s: no kernel name before <<< at offset %d' % (path, i))
        k0 = pos + m.start(1)
        name = m.group(1)
        j = src.find('>>>', i)
        cfg = src[i + 3:j]
        p = j + 3
        while src[p].isspace():
            p += 1
        if src[p] != '(':
            raise ValueError('%s: no argument list after >>> at offset %d' % (path, p))
        q = closing_paren(src, p)
        args = src[p + 1:q]
        flat = ' '.join(name.split())
        out.append(src[pos:k0])
        out.append('emu_launch((const void *)&%s, "%s", emu_config(%s), [=]() { %s(%s); })'
                   % (name, flat, cfg, name, args))
        pos = q + 1
    text = ''.join(out)
    return SMEM.sub(r'\1 *\2 = (\1 *)emu_dynamic_smem();', text)


def main():
    src = open(sys.argv[1]).read()
    text = '#line 1 "%s"\n' % sys.argv[1] + rewrite(src, sys.argv[1])
    with open(sys.argv[2], 'w') as f:
        f.write(text)


if __name__ == '__main__':
    main()
