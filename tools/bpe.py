"""bpe.py: GPT-2 byte-level BPE (training and encoding) for the project's vocabularies.

Bytes are mapped to printable unicode characters with GPT-2's table (space -> "Ġ", newline -> "Ċ"),
so every token and merge is a plain string. Encoding splits the text into pieces as llama.cpp's
"deepseek-llm" pre-tokenizer does (for ASCII text), then merges adjacent symbols by rank until no
ranked pair is left.
"""

import heapq
import re
from collections import Counter, defaultdict

# llama.cpp's "deepseek-llm" pre-tokenizer regexes restricted to ASCII (common/pretokenizer.cpp
# has the full Unicode ones): newlines alone, letter runs with an optional leading whitespace,
# punctuation runs with an optional leading whitespace, whitespace at the end of a fragment, digit
# runs. \s is std::regex's ASCII one, and $ is the end of the fragment.
_SPACE = r"[\t\n\v\f\r ]"
DEEPSEEK_LLM_ASCII = [re.compile(p) for p in (
    r"[\r\n]",
    _SPACE + r"?[A-Za-z]+",
    _SPACE + r"?[!-/:-~]+",
    _SPACE + r"+\Z",
    r"[0-9]+",
)]


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
    """Text -> pieces, as llama.cpp splits it: the regexes apply one after another, each cutting
    every fragment left by the previous ones into its matches and the gaps between them (a gap
    stays a fragment). ASCII text only: the Unicode classes are not reproduced here."""
    if not text.isascii():
        raise ValueError("bpe.pieces: the Python pre-tokenizer covers ASCII text only")
    fragments = [text] if text else []
    for regex in DEEPSEEK_LLM_ASCII:
        cut = []
        for fragment in fragments:
            gap = 0
            for m in regex.finditer(fragment):  # no regex here can match the empty string
                if m.start() > gap:
                    cut.append(fragment[gap:m.start()])
                cut.append(m.group())
                gap = m.end()
            if gap < len(fragment):
                cut.append(fragment[gap:])
        fragments = cut
    return fragments


def _merge_pair(word, a, b):
    """word (tuple of symbols) with every (a, b) pair joined, left to right."""
    out = []
    i = 0
    while i < len(word):
        if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
            out.append(a + b)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def train_merges(text, n_merges):
    """Learns up to n_merges merges from text: repeatedly merge the most frequent adjacent pair
    (ties: the pair whose joined strings "a b" sort first), counting within pieces only."""
    return train_merges_from_counts(Counter(tuple(to_symbols(p)) for p in pieces(text)), n_merges)


def train_merges_from_counts(word_counts, n_merges):
    """train_merges on {word (tuple of symbols): count}. Pair counts are kept up to date
    incrementally (only the words holding the merged pair are recounted) and the best pair comes
    from a heap whose stale entries are skipped, so thousands of merges take seconds; the result
    equals recounting every pair after every merge."""
    words = [tuple(w) for w in word_counts]
    counts = [word_counts[w] for w in word_counts]
    pair_count = Counter()
    holders = defaultdict(set)  # pair -> ids of the words that hold (or once held) it
    for i, word in enumerate(words):
        for pair in zip(word, word[1:]):
            pair_count[pair] += counts[i]
            holders[pair].add(i)
    heap = [(-c, a + " " + b, a, b) for (a, b), c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    while heap and len(merges) < n_merges:
        neg_count, _, a, b = heapq.heappop(heap)
        if pair_count[(a, b)] <= 0 or -neg_count != pair_count[(a, b)]:
            continue  # stale: a later entry holds the current count
        merges.append((a, b))
        changed = set()
        for i in holders.pop((a, b)):
            old = words[i]
            new = _merge_pair(old, a, b)
            if new == old:
                continue
            for pair in zip(old, old[1:]):
                pair_count[pair] -= counts[i]
                changed.add(pair)
            for pair in zip(new, new[1:]):
                pair_count[pair] += counts[i]
                holders[pair].add(i)
                changed.add(pair)
            words[i] = new
        for pair in changed:
            if pair_count[pair] > 0:
                heapq.heappush(heap, (-pair_count[pair], pair[0] + " " + pair[1], *pair))
    return merges


def encode(text, token_ids, merges):
    """Text -> token ids. token_ids: token string -> id; merges: list of "a b" strings (rank =
    position). Does not add BOS. Each distinct piece is merged once (cached)."""
    ranks = {tuple(m.split(" ")): r for r, m in enumerate(merges)}
    cache = {}
    ids = []
    for piece in pieces(text):
        if piece not in cache:
            symbols = to_symbols(piece)
            while len(symbols) > 1:
                ranked = [(ranks.get((a, b), len(ranks)), i)
                          for i, (a, b) in enumerate(zip(symbols, symbols[1:]))]
                rank, i = min(ranked)
                if rank == len(ranks):
                    break
                symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
            cache[piece] = [token_ids[s] for s in symbols]
        ids.extend(cache[piece])
    return ids


def decode(ids, tokens):
    """Token ids of normal (byte-mapped) tokens -> text: characters back to bytes, then UTF-8."""
    data = bytes(CHAR_TO_BYTE[c] for i in ids for c in tokens[i] if c in CHAR_TO_BYTE)
    return data.decode("utf-8", errors="replace")
