"""bpe.py: GPT-2 byte-level BPE in its simplest form (training and encoding), for the test vocab.

Bytes are mapped to printable unicode characters with GPT-2's table (space -> "Ġ", newline -> "Ċ"),
so every token and merge is a plain string. Encoding splits the text into pieces with an ASCII
subset of DeepSeek-LLM's pre-tokenizer (enough for the English prompts used here), then merges
adjacent symbols by rank until no ranked pair is left.
"""

import re
from collections import Counter

# ASCII subset of llama.cpp's "deepseek-llm" pre-tokenizer: newlines alone, letter runs with an
# optional leading space, punctuation runs with an optional leading space, whitespace, digit runs.
PIECE_RE = re.compile(r"[\r\n]|\s?[A-Za-z]+|\s?[!-/:-@\[-`{-~]+|\s+|[0-9]+")


def bytes_to_unicode():
    """GPT-2's byte -> character table: printable bytes map to themselves, the other 68 bytes to
    U+0100 onwards in byte order."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
                 list(range(ord("®"), ord("ÿ") + 1)))
    table = {}
    extra = 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def to_symbols(piece):
    """Text piece -> list of byte-mapped characters."""
    return [BYTE_TO_CHAR[b] for b in piece.encode("utf-8")]


def pieces(text):
    return PIECE_RE.findall(text)


def train_merges(text, n_merges):
    """Learns n_merges merges from text: repeatedly merge the most frequent adjacent pair
    (ties: the pair whose joined strings sort first), counting within pieces only."""
    words = Counter(tuple(to_symbols(p)) for p in pieces(text))
    merges = []
    for _ in range(n_merges):
        pairs = Counter()
        for word, count in words.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] += count
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p[0] + " " + p[1]))
        merges.append(best)
        merged = Counter()
        for word, count in words.items():
            out = []
            i = 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += count
        words = merged
    return merges


def encode(text, token_ids, merges):
    """Text -> token ids. token_ids: token string -> id; merges: list of "a b" strings (rank =
    position). Does not add BOS."""
    ranks = {tuple(m.split(" ")): r for r, m in enumerate(merges)}
    ids = []
    for piece in pieces(text):
        symbols = to_symbols(piece)
        while len(symbols) > 1:
            ranked = [(ranks.get((a, b), len(ranks)), i)
                      for i, (a, b) in enumerate(zip(symbols, symbols[1:]))]
            rank, i = min(ranked)
            if rank == len(ranks):
                break
            symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
        ids.extend(token_ids[s] for s in symbols)
    return ids


def decode(ids, tokens):
    """Token ids of normal (byte-mapped) tokens -> text: characters back to bytes, then UTF-8."""
    data = bytes(CHAR_TO_BYTE[c] for i in ids for c in tokens[i] if c in CHAR_TO_BYTE)
    return data.decode("utf-8", errors="replace")
