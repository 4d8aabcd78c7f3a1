#!/usr/bin/env python3
"""Writes tests/fixtures/bpe/: inputs and the GPT-2 ids a reference encoder
gives them, for tests/test_tokenize.c.

REFERENCE ONLY: neither the build nor the tests run this script (they need
no Python); it was run once to make the committed fixtures, and is kept to
show how they were made and to remake them.  It needs Python 3 and
tiktoken (pip install tiktoken; tested with 0.14.0, whose dependency
`regex` is used too) and no network: the "gpt2" encoding is built from the
repository's own data/gpt2/ files.

    tools/make-bpe-fixtures.py [AUSTEN.txt.gz KJV.txt.gz]
    tools/make-bpe-fixtures.py --bench TEXT...

(default: ../shared/data/austen.txt.gz and kjv.txt.gz beside the source
tree; a few KB of each become fixtures).  --bench times tiktoken's
encode_ordinary on each TEXT (plain or .gz; 5 runs, median; the text
decoded as UTF-8 beforehand, the encoding built beforehand), the figure
BENCHMARKS.md compares with the "encoded in" time of `attnres tokenize`.

For each case NAME it writes NAME.in (the input bytes) and NAME.ids (the
expected ids, decimal, one line, space-separated; empty for no ids), and
index.txt lists every case: NAME, input bytes, ids, and for inputs that are
not valid UTF-8 whether tiktoken's own byte entry agrees (see below).

The expected ids:
- valid UTF-8: tiktoken's encode_ordinary of the text.  The script also
  checks that GPT-2's reference split (Python's `regex` module, as GPT-2's
  encoder.py used it) followed by per-piece BPE gives the same ids, so
  tiktoken's regex engine and GPT-2's agree on every case.
- invalid UTF-8: attnres's documented rule (formats/bpe.h): GPT-2's regex
  (Python's `regex`) over the text with each invalid byte taken for a
  symbol ('!'), each piece's original bytes BPE-merged by tiktoken
  (_encode_single_piece).  tiktoken's Encoding._encode_bytes instead merges
  the last piece before the first invalid byte and everything after it as
  one piece; index.txt says for each such case whether it gives the same
  ids ("bytes-same") or not ("bytes-differs"), and
  NAME.tiktoken-bytes.ids holds its ids where not.
"""
import gzip
import os
import random
import sys
import unicodedata

import regex
import tiktoken
import tiktoken.load

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "bpe")
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def gpt2_encoding():
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        vocab_bpe_file=os.path.join(ROOT, "data", "gpt2", "vocab.bpe"),
        encoder_json_file=os.path.join(ROOT, "data", "gpt2", "encoder.json"),
    )
    return tiktoken.Encoding(name="gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256})


def excerpt(path, start, size):
    """About size bytes of a text corpus from byte start, whole lines."""
    data = gzip.open(path).read()
    a = data.index(b"\n", start) + 1
    b = data.index(b"\n", a + size) + 1
    return data[a:b]


def expected(enc, data):
    """attnres's rule (formats/bpe.h): GPT-2's regex over the text in which
    every byte that is not valid UTF-8 (Python's decoder decides) counts as
    a symbol ('!', one of [^\s\p{L}\p{N}]); each piece of the original
    bytes then byte-pair encoded by tiktoken.  On valid UTF-8 this is
    GPT-2's encoder.py exactly (main() checks it against encode_ordinary)."""
    s = data.decode("utf-8", "surrogateescape")
    view = "".join("!" if 0xDC80 <= ord(ch) <= 0xDCFF else ch for ch in s)
    ids = []
    for m in regex.finditer(GPT2_PATTERN, view):
        ids += enc._encode_single_piece(s[m.start():m.end()].encode("utf-8", "surrogateescape"))
    return ids


def gpt2_reference_split(enc, text):
    """GPT-2's encoder.py: Python regex pieces, each byte-pair encoded."""
    ids = []
    for piece in regex.findall(GPT2_PATTERN, text):
        ids += enc._encode_single_piece(piece.encode("utf-8"))
    return ids


def unicode_sample():
    """Every 61st code point of U+00A0..U+3134F that Unicode 14 (this
    Python's unicodedata, and PCRE2 10.42's tables) assigns, in words of 8
    separated by a space, a new line every 10 words: letters, numbers,
    marks, symbols and spaces of every script, only characters whose class
    no later Unicode version changes."""
    assert unicodedata.unidata_version == "14.0.0", unicodedata.unidata_version
    cps = [c for c in range(0xA0, 0x31350, 61)
           if unicodedata.category(chr(c)) not in ("Cn", "Cs", "Co")]
    words = ["".join(chr(c) for c in cps[i:i + 8]) for i in range(0, len(cps), 8)]
    return "\n".join(" ".join(words[i:i + 10]) for i in range(0, len(words), 10)).encode()


def cases(austen, kjv):
    rnd = random.Random(20241124)
    letters = "".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(5000))
    c = {
        "empty": b"",
        "austen-1": excerpt(austen, 200_000, 3000),
        "austen-2": excerpt(austen, 2_500_000, 3000),
        "kjv-1": excerpt(kjv, 100_000, 3000),
        "kjv-2": excerpt(kjv, 3_000_000, 3000),
        "accents": "Café naïve résumé façade Ångström coöperate São Paulo Zürich Øresund Łódź "
                   "ÉCOLE Straße İstanbul ĳssel\n".encode(),
        "cjk": "日本語のテキストと中文文本，한국어 텍스트。東京タワー（とうきょうタワー）は、"
               "東京都港区芝公園にある電波塔である。\n".encode(),
        "emoji": "I ❤️ emoji 🎉🎉🎉 family 👩‍👩‍👧‍👦 flags 🇫🇷🇯🇵 skin 👍🏽👍🏿 🤖:🦀\n".encode(),
        "combining": "e\u0301te\u0301 a\u0300\u0301 n\u0303o Zalgo: Z\u0351\u0362a\u0358l\u0340g\u0360o "
                     "\u0915\u094d\u0937 \u0e01\u0e34\u0e19 \u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd\n".encode(),
        "scripts": "Привет, мир! Γειά σου Κόσμε. مرحبا بالعالم. שלום עולם. नमस्ते दुनिया। "
                   "สวัสดีชาวโลก ሰላም ዓለም Բարեւ աշխարհ\n".encode(),
        "whitespace": b"a  b   c\t\td\n\ne \n\n  \n f   \n\tg\r\nh\x0b\x0ci  \t \n\n\n   ",
        "whitespace-only": b"\n\n  \n",
        "trailing-spaces": b"end of line   \nnext   \n   ",
        "unicode-spaces": "a\u00a0b\u3000c\u2028d\u2029e\u0085f\u1680g\u2003\u2003h\u202fi\u205fj "
                          "\u180ek\u180e\u180e l\u200bm\ufeffn\x1cо\x1d\x1e\x1f p".encode(),
        "contractions": b"it's don't we're they've I'm you'll he'd IT'S DON'T WE'RE THEY'VE I'M YOU'LL "
                        b"HE'D 'S 's' 'tis rock'n'roll ''s 'll've 'd'd He's Mary's O'Neil",
        "numbers": "123 4567 3.14159 1,000,000 2024-11-24 0x1F 1e-9 ½ ² ³⁄₄ ٣٤٥ ⅷ Ⅻ "
                   "12345678901234567890 007 $5.99 50%\n".encode(),
        "punctuation": b"Hello!!! What?!? ... --- *** ((())) [[x]] {{y}} <<z>> \"quoted\" 'single' `back` "
                       b"@#$%^&*_+=|\\/~ ,.;: -- ?! !!!!!!!!!! .....",
        "endoftext": b"one<|endoftext|>two <|endoftext|> three",
        "code": b"def f(x):\n    return x**2  # square\n\nif __name__ == '__main__':\n\tprint(f(3))\n",
        "nul-bytes": b"a\x00b\x00\x00c",
        "long-letter": b"a" * 10240,
        "long-letters-random": letters.encode(),
        "long-digits": b"31415926535897932384626433832795028841971693993751" * 60,
        "long-punctuation": b"!?.,;:-*" * 600,
        "long-spaces": b" " * 3000 + b"x" + b"\n" * 2000 + b"y" + b" \t" * 1000,
        "unicode-sample": unicode_sample(),
        # not valid UTF-8
        "invalid-ff": b"\xff",
        "invalid-after-word": b"abc\xff",
        "invalid-before-word": b"\xffabc",
        "invalid-between-words": b"abc \xff def",
        "invalid-truncated-2": b"caf\xc3",
        "invalid-truncated-2-then-text": b"caf\xc3 ok, caf\xc3 again",
        "invalid-truncated-3": b"price \xe2\x82",
        "invalid-truncated-3-then-text": b"\xe2\x82abc \xe2\x82\xac5",
        "invalid-truncated-4": b"smile \xf0\x9f\x98 then",
        "invalid-surrogate": b"x\xed\xa0\x80y \xed\xbf\xbf",
        "invalid-overlong": b"\xc0\xaf\xe0\x80\xaf/\xc1\xbf",
        "invalid-above-10ffff": b"\xf4\x90\x80\x80 \xf5\x80\x80\x80 \xf8\x88\x80\x80\x80",
        "invalid-continuations": b"\x80\x81\x82 a\xbf\xbf b",
        "invalid-lead-then-lead": b"\xc3\xe2\x82\xac \xe2(\xa1 \xf0(\x8c\xbc",
        "invalid-mixed": b"Hello \xff\xfe world \x80 \xc3\xa9t\xc3 \xe9 done\n  \xfe\n\n\xff",
        "invalid-whitespace": b"a   \xff   b\n\n\xfe\n c",
        "invalid-random": bytes(rnd.getrandbits(8) for _ in range(2048)),
    }
    return c


def bench(paths):
    import statistics
    import time
    enc = gpt2_encoding()
    enc.encode_ordinary("warm up")
    for path in paths:
        data = (gzip.open(path) if path.endswith(".gz") else open(path, "rb")).read()
        text = data.decode("utf-8")
        times, ids = [], None
        for _ in range(5):
            t = time.perf_counter()
            ids = enc.encode_ordinary(text)
            times.append(time.perf_counter() - t)
        med = statistics.median(times)
        print(f"{path}: {len(ids)} tokens from {len(data)} bytes, tiktoken {tiktoken.__version__} "
              f"encode_ordinary median {med:.3f} s ({len(data) / med / 1e6:.1f} MB/s), "
              f"best {min(times):.3f} s ({len(data) / min(times) / 1e6:.1f} MB/s)")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--bench":
        bench(sys.argv[2:])
        return
    shared = os.path.join(ROOT, "..", "shared", "data")
    austen = sys.argv[1] if len(sys.argv) > 1 else os.path.join(shared, "austen.txt.gz")
    kjv = sys.argv[2] if len(sys.argv) > 2 else os.path.join(shared, "kjv.txt.gz")
    enc = gpt2_encoding()
    os.makedirs(OUT, exist_ok=True)
    index = []
    for name, data in cases(austen, kjv).items():
        ids = expected(enc, data)
        assert enc.decode_bytes(ids) == data, name
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        note = "utf8"
        if text is not None:
            assert ids == enc.encode_ordinary(text) == enc._encode_bytes(data), name
            assert ids == gpt2_reference_split(enc, text), name + ": tiktoken and GPT-2's regex disagree"
        else:
            tk = enc._encode_bytes(data)
            assert enc.decode_bytes(tk) == data, name
            note = "bytes-same" if tk == ids else "bytes-differs"
            if tk != ids:
                with open(os.path.join(OUT, name + ".tiktoken-bytes.ids"), "w") as f:
                    f.write(" ".join(map(str, tk)) + "\n")
        with open(os.path.join(OUT, name + ".in"), "wb") as f:
            f.write(data)
        with open(os.path.join(OUT, name + ".ids"), "w") as f:
            f.write(" ".join(map(str, ids)) + "\n")
        index.append(f"{name} {len(data)} {len(ids)} {note}")
    with open(os.path.join(OUT, "index.txt"), "w") as f:
        f.write("# made by tools/make-bpe-fixtures.py with tiktoken %s: NAME BYTES IDS KIND\n" % tiktoken.__version__)
        f.write("\n".join(index) + "\n")
    print("\n".join(index))


if __name__ == "__main__":
    main()
