#!/usr/bin/python3
"""docs_commands.py: run every command README.md and docs/ quote, on the project's small models.

    docs_commands.py [--stage NN_name] [--list] [--verbose]

A page drifts when a command it quotes stops working: a stage folder renamed, a make target or a
flag gone, a model path no target writes. So every command quoted in backticks or on an indented
line (`make ...`, `build/...`, `tools/...`, `bash ...`, `perf record ...`, `OMP_...=1 ...`) is
tried, in page order, in one of three ways:
  run     engines, bench_kernels, quantize and membench run for real, and `make diff`, `make run`,
          `make help` and `make print-flags`: exit status 0 required. Models the docs name that CI
          does not have (the 7B-shaped files, V2-Lite, files a user downloads) become the tiny
          model of the same kind in data/models/; token counts are capped at kMaxTokens, and a
          placeholder (NN_name, <stage>, TYPE, TOKENS, PROMPT, ...) gets a concrete value.
  dry     any other make target: `make -n` with the quoted variables (the target and its
          prerequisites must exist; nothing long, like make test or make bench, runs twice in CI).
  form    scripts (tools/*.py: `--help` must work; other paths must exist).
Commands on a learner stage (NNx_name, made by `make new-stage`) are skipped, and said so, as are
`perf report` (it reads a recording) and the server (it waits for clients: its --help is run).
Exit 1 naming the page and command of every failure.
"""
import argparse
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

import docs_check  # the final stage, as docs_check.py finds it

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = "/usr/bin/python3"
TIMEOUT_S = 120
kMaxTokens = 4  # -n of an engine run: enough to decode, short enough for CI

# A quoted command starts with one of these (an inline code span, or an indented line).
COMMAND_START = re.compile(
    r"^(?:[A-Z_]+=\S+\s+)*(make|build/\S+|bash|tools/\S+|perf|/usr/bin/python3)(\s|$)")
INLINE = re.compile(r"`([^`]+)`")
INDENTED = re.compile(r"^ {4}(\S.*)$", re.M)
CONTINUED = re.compile(r" {4,}(\S.*)$", re.M)
LEARNER = re.compile(r"\b\d\dx|\bNNx\b|_NAME\b|\bNAME\b")
# make targets run for real: quick, and they only print.
MAKE_RUN = {"diff", "run", "help", "print-flags"}

# Model paths in the docs -> the tiny model of the same kind (data/models/, in the repository).
TINY = {
    "deepseek2": "data/models/tiny-deepseek2-lite-q4_0.gguf",
    "k_quant": "data/models/tiny-kq-q4_k_m.gguf",
    "f32": "data/models/tiny-kjv-f32.gguf",
    "default": "data/models/tiny-kjv-q4_0.gguf",
}


def tiny_model(path):
    name = os.path.basename(path).lower()
    if "v2-lite" in name or "deepseek2" in name:
        return TINY["deepseek2"]
    if "q4_k" in name or "q5_k" in name:
        return TINY["k_quant"]
    if "f32" in name or name in ("in.gguf", "in"):
        return TINY["f32"]
    return TINY["default"]


def models_made(commands):
    """The build/models/ files a make target or a quoted command writes: each make_models.py
    --preset line of the Makefile (asked with --dry-run), and each quoted quantize's OUT."""
    made = set()
    for line in open(os.path.join(ROOT, "Makefile"), encoding="utf-8"):
        m = re.search(r"tools/make_models\.py (--preset .*)$", line.strip())
        if m:
            argv = [PYTHON, "tools/make_models.py", *shlex.split(m.group(1)), "--dry-run"]
            out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True).stdout
            made.update(re.findall(r"^(build/models/\S+\.gguf) \(not written\)", out, re.M))
    for _, _, cmd in commands:
        words = [w for w in cmd.split() if not w.startswith("-")]
        if words[:1] == ["build/quantize"] and len(words) >= 3 and "build/models/" in words[2]:
            made.add(words[2])
    return made


def quoted_commands(path):
    """(line number, command) for every command quoted in a page, in order."""
    text = open(path, encoding="utf-8").read()
    found = []
    for m in INLINE.finditer(text):
        cmd = " ".join(m.group(1).split())
        if COMMAND_START.match(cmd):
            found.append((m.start(), cmd))
    for m in INDENTED.finditer(text):
        line = m.group(1)
        end = m.end()
        while line.endswith("\\"):  # continued on the next indented line
            more = CONTINUED.match(text, end + 1)
            if not more:
                break
            line, end = line[:-1] + " " + more.group(1), more.end()
        cmd = re.sub(r"\s+#.*$", "", line).strip()  # a trailing comment
        if COMMAND_START.match(cmd) and "`" not in cmd:
            found.append((m.start(), " ".join(cmd.split())))
    found.sort()
    return [(text.count("\n", 0, pos) + 1, cmd) for pos, cmd in found]


class Runner:
    def __init__(self, stage, tmp, verbose, models):
        self.stage, self.tmp, self.verbose, self.models = stage, tmp, verbose, models
        self.counts = {"run": 0, "dry": 0, "form": 0, "skip": 0}
        self.failures = []
        self.done = {}  # (argv, env) -> "" or why it failed
        self.prompt = os.path.join(tmp, "prompt.txt")
        with open(self.prompt, "w") as f:
            f.write("In the beginning God created the heaven and the earth.\n")
        self.text = os.path.join(tmp, "text.txt")
        with open(self.text, "w") as f:
            f.write("And the earth was without form, and void. " * 100)

    # ---- placeholders and substitutions ----

    def concrete(self, word, program):
        """One argument with the docs' placeholders and absent models replaced. Never a path in
        the repository that a command could write: outputs go to the temporary folder."""
        stage_word = re.sub(r"build/(<stage>|NN_name|NN|<NN>)/", f"build/{self.stage}/", word)
        if stage_word != word:
            return stage_word
        if word.endswith(".gguf") or word == "IN":
            if word.startswith(("OUT", "out")) or word == "OUT.gguf":
                return os.path.join(self.tmp, "out.gguf")
            return word if os.path.exists(os.path.join(ROOT, word)) and "/models/" not in word \
                else tiny_model(word)
        if word == "OUT":
            return os.path.join(self.tmp, "out.gguf")
        if word in ("PROMPT", "FILE", "prompt.txt", "build/bench-prompt.txt"):
            return self.prompt
        if word == "TEXT":  # --perplexity: chunks of -c tokens
            return self.text
        if word.endswith(".bin"):
            return os.path.join(self.tmp, word)
        numbers = {"TOKENS": "1", "REPS": "1", "T": "1", "R": "64", "V": "1000", "N": "2"}
        if word in numbers:
            return numbers[word]
        if word == "TYPE":
            return "Q4_K_M" if program == "quantize" else "q4_0"
        return word

    # ---- one command ----

    def check(self, page, line, cmd):
        where = f"{page}:{line}: {cmd}"
        for model in re.findall(r"build/models/[\w.-]+\.gguf", cmd):
            if model not in self.models:
                self.fail(where, f"{model}: no make target or quoted command writes it (these "
                                 f"do: {', '.join(sorted(self.models))})")
        if LEARNER.search(cmd):
            return self.skip(where, "a learner stage (make new-stage makes it)")
        cmd = re.sub(r"\s*\[[^\]]*\]", "", cmd)  # optional [ARGS]
        for part in cmd.split("&&"):
            self.check_one(where, part.strip())

    def check_one(self, where, cmd):
        try:
            words = shlex.split(cmd)
        except ValueError as e:
            return self.fail(where, f"does not parse as a shell command: {e}")
        env = dict(os.environ)
        while words and re.match(r"^[A-Z_]+=", words[0]):
            key, value = words.pop(0).split("=", 1)
            env[key] = "1" if value in ("T", "N") else value
        if not words:
            return
        head = words[0]
        if head == "perf":
            if len(words) > 1 and words[1] == "record":
                rest = list(words[2:])
                while rest and rest[0].startswith("-"):  # perf's own options and their values
                    rest = rest[2:] if rest[0] in ("-D", "-F", "-o") else rest[1:]
                if rest and rest[0] != "...":
                    return self.check_one(where, shlex.join(rest))
            return self.skip(where, "perf report reads a recording")
        if head == "make":
            return self.make(where, words[1:], env)
        if head == "bash" or head.endswith(".sh"):
            script = words[1] if head == "bash" else head
            return self.exists(where, script)
        if head in (PYTHON, "python3") or head.endswith(".py"):
            script = words[1] if head in (PYTHON, "python3") else head
            if script == "-c":
                return self.skip(where, "Python code for a module make python builds")
            return self.python_help(where, script)
        if head.startswith("build/"):
            if head.endswith("/") or "." in os.path.basename(head):
                return self.skip(where, "a path the docs name, not a command")
            return self.program(where, words, env)
        return self.exists(where, head)

    def make(self, where, args, env):
        targets = [a for a in args if "=" not in a and a != "..."]
        variables = [a for a in args if "=" in a]
        if "..." in args or any("..." in v for v in variables):
            variables = [v for v in variables if "..." not in v]
        fixed = []
        for v in variables:
            key, value = v.split("=", 1)
            if key == "MODEL":
                value = self.concrete(value, "make")
            if value in ("NN", "MM"):  # STAGE=NN, FROM=NN TO=MM
                value = self.stage[:2] if value == "MM" else "%02d" % (int(self.stage[:2]) - 1)
            if key in ("N", "GEN_TOKENS", "PROMPT_TOKENS"):
                value = str(min(int(value), kMaxTokens)) if value.isdigit() else str(kMaxTokens)
            if key == "LLAMA_BENCH":
                continue
            fixed.append(f"{key}={value}")
        target = targets[0] if targets else "all"
        if target in MAKE_RUN and all("..." not in a for a in args):
            self.counts["run"] += 1
            return self.execute(where, ["make", "-s", *targets, *fixed], env)
        self.counts["dry"] += 1
        return self.execute(where, ["make", "-n", *targets, *fixed], env)

    def program(self, where, words, env):
        words = [self.concrete(w, os.path.basename(words[0])) for w in words]
        if "..." in words:
            return self.exists(where, words[0])
        path = words[0]
        name = os.path.basename(path)
        if name == "server":
            return self.run(where, [path, "--help"], env, build=path)
        if name == "engine" and "-m" not in words:  # the program named, with a flag or two
            return self.run(where, [path, "--help"], env, build=path)
        if name == "quantize" and len([w for w in words[1:] if not w.startswith("-")]) < 3:
            return self.run(where, [path, "--help"], env, build=path)
        if name == "engine":
            words = self.short_engine_run(words)
        if name == "quantize":  # IN OUT TYPE: OUT in the temporary folder, whatever it was
            files = [i for i, w in enumerate(words) if i > 0 and not w.startswith("-")]
            words[files[1]] = os.path.join(self.tmp, "out.gguf")
        if name == "tests":
            return self.skip(where, "the suite's own run (make test) covers it")
        return self.run(where, words, env, build=path)

    def short_engine_run(self, words):
        out = []
        i = 0
        while i < len(words):
            w = words[i]
            if w == "-n" and i + 1 < len(words) and words[i + 1].isdigit():
                out += ["-n", str(min(int(words[i + 1]), kMaxTokens))]
                i += 2
                continue
            out.append(w)
            i += 1
        if "--chat" not in out and "--perplexity" not in out and "-n" not in out:
            out += ["-n", str(kMaxTokens)]
        if "--perplexity" in out:
            if "--chunks" in out:
                out[out.index("--chunks") + 1] = "1"
            else:
                out += ["--chunks", "1"]
        return out

    # ---- outcomes ----

    def run(self, where, argv, env, build):
        if not os.path.exists(os.path.join(ROOT, build)):
            made = subprocess.run(["make", "-s", build], cwd=ROOT, capture_output=True, text=True)
            if made.returncode != 0:
                return self.fail(where, f"make {build} failed:\n{made.stderr[-2000:]}")
        self.counts["run"] += 1
        return self.execute(where, argv, env, stdin=subprocess.DEVNULL)

    def execute(self, where, argv, env, stdin=None):
        key = (tuple(argv), tuple(sorted(set(env.items()) - set(os.environ.items()))))
        if key not in self.done:  # the same command quoted again: one run
            self.done[key] = self.why_it_fails(argv, env, stdin)
        if self.done[key]:
            self.fail(where, self.done[key])

    def why_it_fails(self, argv, env, stdin):
        """"" when argv runs and exits 0, else what went wrong."""
        if self.verbose:
            print("  $", shlex.join(argv), flush=True)
        try:
            done = subprocess.run(argv, cwd=ROOT, env=env, stdin=stdin, capture_output=True,
                                  text=True, errors="replace", timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"ran past {TIMEOUT_S} s as `{shlex.join(argv)}`"
        except OSError as e:
            return f"cannot run `{shlex.join(argv)}`: {e}"
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return f"exit {done.returncode} as `{shlex.join(argv)}`: " + " / ".join(tail)
        return ""

    def exists(self, where, path):
        self.counts["form"] += 1
        if not os.path.exists(os.path.join(ROOT, path)):
            made = subprocess.run(["make", "-n", path], cwd=ROOT, capture_output=True)
            if made.returncode != 0:
                self.fail(where, f"{path}: no such file, and no make target writes it")

    def python_help(self, where, script):
        self.counts["form"] += 1
        if not os.path.exists(os.path.join(ROOT, script)):
            return self.fail(where, f"{script}: no such file")
        done = subprocess.run([PYTHON, script, "--help"], cwd=ROOT, capture_output=True,
                              text=True, timeout=TIMEOUT_S)
        missing = re.search(r"ModuleNotFoundError: No module named '(\w+)'", done.stderr)
        if missing:  # python3-torch: installed by the targets that need it
            return self.skip(where, f"{script} needs {missing.group(1)}, absent here")
        if done.returncode != 0:
            self.fail(where, f"{script} --help exits {done.returncode}")

    def skip(self, where, why):
        self.counts["skip"] += 1
        if self.verbose:
            print(f"  skip ({why}): {where}")

    def fail(self, where, why):
        self.failures.append(f"{where}\n    {why}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", help="the final stage (default: the last NN_name folder)")
    parser.add_argument("--list", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    official = [s for s in docs_check.stage_dirs() if docs_check.OFFICIAL_STAGE.match(s)]
    stage = args.stage or official[-1]
    pages = ["README.md"] + sorted(glob.glob("docs/**/*.md", root_dir=ROOT, recursive=True))
    commands = [(p, line, cmd) for p in pages
                for line, cmd in quoted_commands(os.path.join(ROOT, p))]
    if args.list:
        for p, line, cmd in commands:
            print(f"{p}:{line}: {cmd}")
        return 0
    with tempfile.TemporaryDirectory(prefix="docs-commands-") as tmp:
        runner = Runner(stage, tmp, args.verbose, models_made(commands))
        for p, line, cmd in commands:
            if args.verbose:
                print(f"{p}:{line}: {cmd}", flush=True)
            runner.check(p, line, cmd)
    c = runner.counts
    print(f"docs_commands: {len(commands)} quoted commands: {c['run']} run, {c['dry']} make -n, "
          f"{c['form']} checked for form, {c['skip']} skipped (learner stages, perf report, "
          f"the suite itself)")
    for f in runner.failures:
        print(f"FAIL {f}")
    if runner.failures:
        print(f"docs_commands: {len(runner.failures)} quoted command(s) fail")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
