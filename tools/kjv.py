"""kjv.py: the King James Bible text tiny-kjv learned from, and the chapters it never saw.

    /usr/bin/python3 tools/kjv.py --validation OUT.txt   # the held-out text (make ppl scores it)

The text comes from Debian's bible-kjv-text package, dumped by its
`bible` program. Verse references are dropped; one verse per line. Every 20th chapter (index % 20
== 10) is held out for validation: tools/train_tiny.py trains on the rest.
"""

import argparse
import hashlib
import re
import subprocess
import sys
from pathlib import Path

BIBLE_PROGRAM = "/usr/bin/bible"
WHOLE_BIBLE = "Gen1:1-Rev22:21"
# sha256 of `bible -f Gen1:1-Rev22:21` from bible-kjv-text 4.38 (Debian 12): the corpus the
# committed model was trained on. Another dump still trains, with a warning.
CORPUS_SHA256 = "cd45f0c9cedab8e4439bd6486c8952c77cc8b0ecc5d1f6ae3513f2039f47229d"
VERSE_RE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$")  # "Ge1:1 In the beginning ..."
VAL_EVERY = 20        # chapter i is held out when i % 20 == 10 (60 of the 1189 chapters)
VAL_PHASE = 10


def read_chapters():
    """-> list of chapters, each a list of verse texts, in Bible order."""
    if not Path(BIBLE_PROGRAM).exists():
        sys.exit(f"{BIBLE_PROGRAM} not found: apt-get install bible-kjv (Debian; its text is in bible-kjv-text)")
    dump = subprocess.run([BIBLE_PROGRAM, "-f", WHOLE_BIBLE], check=True, capture_output=True,
                          text=True).stdout
    digest = hashlib.sha256(dump.encode()).hexdigest()
    if digest != CORPUS_SHA256:
        print(f"WARNING: the bible dump has sha256 {digest}, not {CORPUS_SHA256} (bible-kjv-text "
              "4.38): the model will differ from the committed one", file=sys.stderr)
    chapters, last = [], None
    for line in dump.splitlines():
        m = VERSE_RE.match(line)
        if not m:
            raise ValueError(f"{BIBLE_PROGRAM}: unexpected line {line[:60]!r}")
        if (m[1], m[2]) != last:
            chapters.append([])
            last = (m[1], m[2])
        chapters[-1].append(" ".join(m[4].split()))  # a few verses have double spaces
    return chapters


def split_text(chapters):
    """-> (train text, validation text): verses one per line, each ending in a newline."""
    train = [v for i, c in enumerate(chapters) if i % VAL_EVERY != VAL_PHASE for v in c]
    val = [v for i, c in enumerate(chapters) if i % VAL_EVERY == VAL_PHASE for v in c]
    return "".join(v + "\n" for v in train), "".join(v + "\n" for v in val)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--validation", type=Path, required=True, help="write the held-out text here")
    args = parser.parse_args()
    _, val_text = split_text(read_chapters())
    args.validation.write_text(val_text, encoding="utf-8")
    print(f"{args.validation}: {len(val_text.encode())} bytes of held-out text")


if __name__ == "__main__":
    main()
