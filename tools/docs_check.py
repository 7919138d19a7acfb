#!/usr/bin/python3
"""docs_check.py: fail when the docs quote something the code no longer says.

    docs_check.py [--stage NN_name]            check; exit 1 naming every mismatch
    docs_check.py [--stage NN_name] --update   rewrite the generated blocks; report the rest

Checks (standard library only):
  help    docs/cli.md between <!-- help:begin --> and <!-- help:end --> is the --help output of
          build/<stage>/engine, run as "engine" and without its last line ("stage: ...").
  lines   docs/README.md between <!-- lines:begin --> and <!-- lines:end --> is the table of
          common/ and stages/<stage>/ files with their `wc -l` and code-line counts. The row order
          is the reading order and is kept; --update only adds new files at the end and drops
          files that are gone. A row names a stage file by its name, so the order survives a
          new final stage.
  pages   every stage folder stages/NN_name/ has docs/stages/NN_name.md (reported, never made).
          Learner stages (NNx_name, made by `make new-stage`) need none.
  links   relative links in README.md and docs/**/*.md, and `common/...`-style paths quoted in
          docs/*.md, point to files that exist.
  names   every `name()` quoted in docs/*.md is defined or called somewhere in common/,
          stages/, tests/ or tools/.
  figures a stage page's paragraph that reads its tables ("the tables below show ...") quotes
          only ratios ("0.68x") and tok/s figures ("3.14 tok/s") that are cells of a generated
          table (<!-- bench:begin ... -->) on that page or in docs/benchmarks.md: when `make
          bench` rewrites the tables, prose that quoted the old ones fails here.
<stage> defaults to the last NN_name folder (learner stages are not "the final stage").
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OFFICIAL_STAGE = re.compile(r"^[0-9][0-9]_")
LEARNER_STAGE = re.compile(r"^[0-9][0-9]x+_")
HELP_BEGIN, HELP_END = "<!-- help:begin -->", "<!-- help:end -->"
LINES_BEGIN, LINES_END = "<!-- lines:begin -->", "<!-- lines:end -->"
STAGE_LINE = "stage: "
HELP_TIMEOUT_S = 30
ROW_PATH = re.compile(r"\[`?([^\]`]+)`?\]\(")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
QUOTED_PATH = re.compile(r"`((?:common|stages|tests|tools|data|docs)/[A-Za-z0-9_./-]+)`")
QUOTED_CALL = re.compile(r"`([A-Za-z_][A-Za-z0-9_:]*)\(\)`")
CODE_DIRS = ("common", "stages", "tests", "tools")


def rel(*parts):
    return os.path.join(ROOT, *parts)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def stage_dirs():
    names = sorted(os.listdir(rel("stages"))) if os.path.isdir(rel("stages")) else []
    return [n for n in names if os.path.isdir(rel("stages", n))
            and (OFFICIAL_STAGE.match(n) or LEARNER_STAGE.match(n))]


def block(text, begin, end, where):
    """(before, inside, after) of the text between the two markers; ValueError when absent."""
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"{where}: markers {begin} ... {end} not found")
    return text[:i + len(begin)], text[i + len(begin):j], text[j:]


# ---- help ----

def engine_help(stage):
    engine = rel("build", stage, "engine")
    if not os.access(engine, os.X_OK):
        raise ValueError(f"build/{stage}/engine is not built (make build/{stage}/engine)")
    out = subprocess.run(["engine", "--help"], executable=engine, capture_output=True,
                         text=True, timeout=HELP_TIMEOUT_S, check=True).stdout
    lines = out.rstrip("\n").split("\n")
    if lines and lines[-1].startswith(STAGE_LINE):
        lines.pop()
    return "\n".join(lines) + "\n"


def check_help(stage, update, problems):
    path = rel("docs", "cli.md")
    try:
        before, inside, after = block(read(path), HELP_BEGIN, HELP_END, "docs/cli.md")
        expected = "\n```\n" + engine_help(stage) + "```\n"
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        problems.append(f"help: {e}")
        return
    if inside == expected:
        return
    if update:
        write(path, before + expected + after)
        print(f"updated docs/cli.md from build/{stage}/engine --help")
        return
    quoted = inside.strip("\n`").split("\n")
    actual = expected.strip("\n`").split("\n")
    for n, (q, a) in enumerate(zip(quoted, actual), 1):
        if q != a:
            problems.append(f"help: docs/cli.md line {n} of the block differs from --help:\n"
                            f"    docs:   {q}\n    engine: {a}")
            return
    problems.append(f"help: docs/cli.md quotes {len(quoted)} lines, --help prints {len(actual)}")


# ---- lines ----

def counted_files(stage):
    common = sorted(f for f in os.listdir(rel("common")) if f.endswith((".h", ".cpp")))
    staged = sorted(f for f in os.listdir(rel("stages", stage))
                    if os.path.isfile(rel("stages", stage, f)) and not f.startswith("."))
    return [f"common/{f}" for f in common] + [f"stages/{stage}/{f}" for f in staged]


def order_key(path):
    """Stage files are named by file name alone, so the order carries over to a new stage."""
    return "stage:" + os.path.basename(path) if path.startswith("stages/") else path


def describe(path):
    """The first sentence of the file's opening comment, without the leading "name:"."""
    marker = "#" if path.endswith(".mk") else "//"
    words = []
    for line in read(rel(path)).split("\n"):
        line = line.strip()
        if not line.startswith(marker) or line == marker:
            break
        words.append(line[len(marker):].strip())
    text = " ".join(words)
    prefix = os.path.basename(path) + ":"
    text = text[len(prefix):].strip() if text.startswith(prefix) else text
    end = text.find(". ")
    text = text[:end + 1] if end >= 0 else text
    return text.replace("|", "\\|")


def count(path):
    lines = read(rel(path)).split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # wc -l counts newlines
    comment = "#" if path.endswith(".mk") else "//"
    code = [s for s in (line.strip() for line in lines) if s and not s.startswith(comment)]
    return len(lines), len(code)


def lines_table(paths, stage):
    rows = ["", "", "| # | file | lines | code | what it is |", "|---:|---|---:|---:|---|"]
    total = total_code = 0
    for n, p in enumerate(paths, 1):
        lines, code = count(p)
        total += lines
        total_code += code
        rows.append(f"| {n} | [`{p}`](../{p}) | {lines} | {code} | {describe(p)} |")
    rows.append(f"| | **common/ + stages/{stage}/** | **{total}** | **{total_code}** | |")
    return "\n".join(rows) + "\n\n"


def check_lines(stage, update, problems):
    path = rel("docs", "README.md")
    try:
        before, inside, after = block(read(path), LINES_BEGIN, LINES_END, "docs/README.md")
    except (OSError, ValueError) as e:
        problems.append(f"lines: {e}")
        return
    present = counted_files(stage)
    by_key = {order_key(p): p for p in present}
    listed = [m.group(1) for m in map(ROW_PATH.search, inside.split("\n")) if m]
    ordered = [by_key[order_key(p)] for p in listed if order_key(p) in by_key]
    ordered += [p for p in present if p not in ordered]
    expected = lines_table(ordered, stage)
    if inside == expected:
        return
    if update:
        write(path, before + expected + after)
        print(f"updated docs/README.md line counts (common/ + stages/{stage}/)")
        return
    gone = [p for p in listed if order_key(p) not in by_key]
    listed_keys = {order_key(q) for q in listed}
    new = [p for p in present if order_key(p) not in listed_keys]
    for p in gone:
        problems.append(f"lines: docs/README.md lists {p}, which is not in common/ or stages/{stage}/")
    for p in new:
        problems.append(f"lines: docs/README.md does not list {p}")

    def rows(text):  # order key -> (path, the row without its number)
        return {order_key(m.group(1)): (m.group(1), line.split("|", 2)[2])
                for line in text.split("\n") for m in [ROW_PATH.search(line)] if m}

    quoted, now = rows(inside), rows(expected)
    old_stages = sorted({p.split("/")[1] for p in listed if p.startswith("stages/")} - {stage})
    if old_stages:
        problems.append(f"lines: docs/README.md counts stages/{old_stages[0]}/, the final stage is "
                        f"stages/{stage}/")
    for key, (p, row) in now.items():
        if key.startswith("stage:") and old_stages:
            continue
        if key in quoted and quoted[key][1] != row:
            problems.append(f"lines: docs/README.md row of {p} differs from the file:\n"
                            f"    docs: {quoted[key][1].strip()}\n    now:  {row.strip()}")
    total = [line for line in expected.split("\n") if "**common/" in line]
    if not gone and not new and not old_stages and quoted == now:
        problems.append(f"lines: docs/README.md numbering or total differs; now: {total[0]}")
    elif total and total[0] not in inside:
        problems.append(f"lines: docs/README.md total differs; now: {total[0]}")


# ---- pages ----

def check_pages(problems):
    for s in stage_dirs():
        page = os.path.join("docs", "stages", s + ".md")
        if os.path.isfile(rel(page)):
            continue
        if OFFICIAL_STAGE.match(s):
            problems.append(f"pages: stages/{s}/ has no page {page}")
        else:
            print(f"note: learner stage stages/{s}/ has no page {page} (optional)")


# ---- figures quoted from the generated tables ----

BENCH_BLOCK = re.compile(r"<!-- bench:begin [^>]*-->.*?<!-- bench:end [^>]*-->", re.S)
RATIO = re.compile(r"(?<![\w.])(\d+\.\d+)x\b")
TOK_S = re.compile(r"(?<![\w.])(\d+(?:,\d{3})*\.\d+)(?= tok/s)")
TABLE_HERE = re.compile(r"\b(tables? (below|above)|(this|these|the) (page's )?tables?)\b", re.I)


def table_cells(text):
    """Every cell of the generated tables in text, as written ("0.68x", "3.14"), and the
    ratios of the generated sentences beside them ("decode 0.86x")."""
    cells = set()
    for b in BENCH_BLOCK.findall(text):
        cells.update(r + "x" for r in RATIO.findall(b))
        for line in b.split("\n"):
            if line.startswith("|"):
                cells.update(c.strip() for c in line.strip("|").split("|"))
    return cells


def check_figures(problems):
    shared = table_cells(read(rel("docs", "benchmarks.md")))
    pages = sorted(os.listdir(rel("docs", "stages")))
    for name in pages:
        md = os.path.join("docs", "stages", name)
        text = read(rel(md))
        cells = shared | table_cells(text)
        prose = BENCH_BLOCK.sub("", text)
        for paragraph in re.split(r"\n\s*\n", prose):
            if paragraph.lstrip().startswith("|"):
                continue  # a hand-written table carries its own source line
            if not TABLE_HERE.search(paragraph):
                continue  # derived figures and dated history: not a reading of the tables
            for figure in RATIO.findall(paragraph):
                if figure + "x" not in cells:
                    problems.append(f"figures: {md} quotes {figure}x, which no generated table "
                                    f"holds (regenerated since?); quote the table or date it")
            for figure in TOK_S.findall(paragraph):
                if figure not in cells:
                    problems.append(f"figures: {md} quotes {figure} tok/s, which no generated "
                                    f"table holds (regenerated since?); quote the table or date it")


# ---- links and quoted names ----

def markdown_files():
    files = ["README.md"]
    for d, _, names in os.walk(rel("docs")):
        files += [os.path.relpath(os.path.join(d, n), ROOT) for n in sorted(names)
                  if n.endswith(".md")]
    return [f for f in files if os.path.isfile(rel(f))]


def check_links(problems):
    for md in markdown_files():
        text = read(rel(md))
        targets = [(t, os.path.dirname(md)) for t in MD_LINK.findall(text)]
        if os.path.dirname(md) == "docs":
            targets += [(t, "") for t in QUOTED_PATH.findall(text)]
        for target, base in targets:
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            path = os.path.normpath(os.path.join(base, target.split("#")[0]))
            if not os.path.exists(rel(path)):
                problems.append(f"links: {md} points to {target}, which does not exist")


def code_text():
    chunks = []
    for d in CODE_DIRS:
        for root, _, names in os.walk(rel(d)):
            for n in names:
                if n.endswith((".h", ".cpp", ".cc", ".py", ".sh")):
                    chunks.append(read(os.path.join(root, n)))
    return "\n".join(chunks)


def check_names(problems):
    code = code_text()
    for md in markdown_files():
        if os.path.dirname(md) != "docs":
            continue
        for name in sorted(set(QUOTED_CALL.findall(read(rel(md))))):
            short = name.split("::")[-1]
            if not re.search(r"\b" + re.escape(short) + r"\s*\(", code):
                problems.append(f"names: {md} quotes {name}(), which the code does not have")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage", help="the final stage (default: the last NN_name folder)")
    parser.add_argument("--update", action="store_true", help="rewrite the generated blocks")
    args = parser.parse_args()
    official = [s for s in stage_dirs() if OFFICIAL_STAGE.match(s)]
    stage = args.stage or (official[-1] if official else None)
    if stage is None or not os.path.isdir(rel("stages", stage)):
        print(f"docs_check: no stage folder {stage!r} under stages/", file=sys.stderr)
        return 2
    problems = []
    check_help(stage, args.update, problems)
    check_lines(stage, args.update, problems)
    check_pages(problems)
    check_links(problems)
    check_names(problems)
    check_figures(problems)
    for p in problems:
        print(p, file=sys.stderr)
    if args.update:  # only a block that could not be written is a failure here
        return 1 if any(p.startswith(("help:", "lines:")) for p in problems) else 0
    if problems:
        print(f"docs_check: {len(problems)} problem(s); `make docs-update` rewrites the generated "
              f"blocks (help, lines)", file=sys.stderr)
        return 1
    print(f"docs_check: docs agree with the code (final stage {stage})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
