"""The Python module (dsengine) against the engine's own CLI, on the project's test models.

Run by `make test` (tests/run_all.sh) with PYTHONPATH=build/python, after `make python`; the CLI
compared with is build/<the module's stage>/engine. Tests that need ../shared say SKIPPED.
"""

import _thread
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import dsengine
from dsengine import EngineError, Llama

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "data" / "models"
SHARED = ROOT.parent / "shared"
ENGINE = ROOT / "build" / dsengine.STAGE / "engine"
DEFAULT_MODEL = MODELS / "tiny-kjv-q4_0.gguf"
PROMPT = "And it came to pass"
THREADS = 2
CTX = 256

# Every project model the module's stage runs (deepseek2 only from stage 20 on).
ALL_MODELS = sorted(p.name for p in MODELS.glob("*.gguf"))
RUNNABLE = [m for m in ALL_MODELS if "deepseek2" not in m or dsengine.STAGE >= "20"]
GREEDY_MODELS = [m for m in ["tiny-kjv-q4_0.gguf", "tiny-llama-f32.gguf", "tiny-qwen2-q4_0.gguf",
                             "tiny-kq-q4_k_m.gguf", "tiny-deepseek2-lite-q4_0.gguf"]
                 if m in RUNNABLE]


def cli(*args: str) -> str:
    """The CLI's stdout (its stats line goes to stderr)."""
    run = subprocess.run([str(ENGINE), *args], capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr.decode(errors="replace")
    return run.stdout.decode("utf-8")


def load(name: str, **kw) -> Llama:
    kw.setdefault("n_ctx", CTX)
    kw.setdefault("n_threads", THREADS)
    return Llama(str(MODELS / name), **kw)


@pytest.fixture(scope="module")
def kjv():
    with Llama(str(DEFAULT_MODEL), n_ctx=CTX, n_threads=THREADS, seed=7) as llm:
        yield llm


def greedy(llm: Llama, prompt: str = PROMPT, n: int = 32, **kw) -> str:
    return llm(prompt, max_tokens=n, temperature=0, **kw)["choices"][0]["text"]


# ---- the same numbers and text as the CLI ----------------------------------------------------

@pytest.mark.parametrize("name", RUNNABLE)
def test_logits_equal_the_cli_bit_for_bit(name, tmp_path):
    dump = tmp_path / "logits.f32"
    cli("-m", str(MODELS / name), "-p", PROMPT, "-t", str(THREADS), "-c", str(CTX),
        "--dump-logits", str(dump))
    expected = np.fromfile(dump, dtype=np.float32)
    with load(name) as llm:
        llm.eval(llm.tokenize(PROMPT.encode(), add_bos=True, special=True))
        logits = llm.logits
        assert logits.dtype == np.float32 and logits.shape == (llm.n_vocab(),)
        assert not logits.flags.writeable
        assert logits.tobytes() == expected.tobytes()


@pytest.mark.parametrize("name", GREEDY_MODELS)
def test_greedy_text_equals_the_cli(name):
    out = cli("-m", str(MODELS / name), "-p", PROMPT, "-n", "32", "--temp", "0",
              "-t", str(THREADS), "-c", str(CTX))
    with load(name) as llm:
        assert PROMPT + greedy(llm) + "\n" == out


def test_sampled_text_equals_the_cli_for_the_same_seed():
    out = cli("-m", str(DEFAULT_MODEL), "-p", PROMPT, "-n", "40", "-s", "5", "--temp", "0.9",
              "--top-k", "20", "--top-p", "0.9", "-t", str(THREADS), "-c", str(CTX))
    kw = dict(max_tokens=40, temperature=0.9, top_k=20, top_p=0.9)
    with load(DEFAULT_MODEL.name, seed=5) as llm:
        assert PROMPT + llm(PROMPT, **kw)["choices"][0]["text"] + "\n" == out
        # seed= on the call restarts the random stream: the same text again.
        assert PROMPT + llm(PROMPT, seed=5, **kw)["choices"][0]["text"] + "\n" == out


def test_completion_has_the_openai_shape(kjv):
    out = kjv(PROMPT, max_tokens=8, temperature=0)
    assert out["object"] == "text_completion" and out["id"].startswith("cmpl-")
    assert isinstance(out["created"], int) and out["model"] == str(DEFAULT_MODEL)
    choice = out["choices"][0]
    assert set(choice) == {"text", "index", "logprobs", "finish_reason"}
    assert choice["finish_reason"] == "length"
    n_prompt = len(kjv.tokenize(PROMPT.encode(), special=True))
    assert out["usage"] == {"prompt_tokens": n_prompt, "completion_tokens": 8,
                            "total_tokens": n_prompt + 8}
    assert kjv.create_completion(PROMPT, max_tokens=8, temperature=0)["choices"][0]["text"] == \
        choice["text"]
    assert greedy(kjv, n=8, echo=True) == PROMPT + choice["text"]


def test_streaming_yields_the_same_text(kjv):
    full = kjv(PROMPT, max_tokens=40, temperature=0)
    chunks = list(kjv(PROMPT, max_tokens=40, temperature=0, stream=True))
    assert len(chunks) > 2
    assert "".join(c["choices"][0]["text"] for c in chunks) == full["choices"][0]["text"]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"] == full["usage"]
    assert len({c["id"] for c in chunks}) == 1


def test_stop_strings_end_the_text_streaming_or_not(kjv):
    text = greedy(kjv, n=40)
    stop = "LORD"
    assert stop in text
    out = kjv(PROMPT, max_tokens=40, temperature=0, stop=[stop, "never said"])
    assert out["choices"][0]["text"] == text[: text.index(stop)]
    assert out["choices"][0]["finish_reason"] == "stop"
    streamed = "".join(c["choices"][0]["text"]
                       for c in kjv(PROMPT, max_tokens=40, temperature=0, stop=stop, stream=True))
    assert streamed == text[: text.index(stop)]


def test_chat_completion_uses_the_template_and_streams(kjv):
    messages = [{"role": "system", "content": "Speak as the prophets."},
                {"role": "user", "content": "Who led Israel out of Egypt?"}]
    # The same reply as the CLI's single-turn --chat with the same system prompt.
    out = cli("-m", str(DEFAULT_MODEL), "--chat", "-p", messages[1]["content"], "--system",
              messages[0]["content"], "-n", "24", "--temp", "0", "-t", str(THREADS), "-c", str(CTX))
    reply = kjv.create_chat_completion(messages, max_tokens=24, temperature=0)
    assert reply["object"] == "chat.completion" and reply["id"].startswith("chatcmpl-")
    message = reply["choices"][0]["message"]
    assert message["role"] == "assistant"
    assert message["content"] + "\n" == out
    chunks = list(kjv.create_chat_completion(messages, max_tokens=24, temperature=0, stream=True))
    assert chunks[0]["object"] == "chat.completion.chunk"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == \
        message["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == reply["choices"][0]["finish_reason"]
    assert kjv.chat_format == "deepseek-llm"


def test_a_chat_s_next_turn_equals_a_fresh_model(kjv):
    turn1 = [{"role": "user", "content": "Who was Moses?"}]
    a1 = kjv.create_chat_completion(turn1, max_tokens=12, temperature=0)
    turn2 = turn1 + [a1["choices"][0]["message"], {"role": "user", "content": "And Aaron?"}]
    a2 = kjv.create_chat_completion(turn2, max_tokens=12, temperature=0)
    with load(DEFAULT_MODEL.name) as fresh:
        assert fresh.create_chat_completion(turn2, max_tokens=12, temperature=0)["choices"] == \
            a2["choices"]


# ---- tokens ------------------------------------------------------------------------------------

CORPUS = [
    "", " ", "Hello world", " Hello World!", "And it came to pass, in the 12th year...",
    "你好，世界。", "日本語のテキスト", "emoji 🦙🚀 and café", "tabs\tand\nnewlines\r\n\n",
    "code: for (int i = 0; i < n; ++i) { x[i] = 3.14159; }", "a" * 1000,
]


def test_tokenize_detokenize_round_trip(kjv):
    text = (ROOT / "tools" / "bench_text.txt").read_text(encoding="utf-8")
    for s in CORPUS + text.split("\n\n"):
        ids = kjv.tokenize(s.encode(), add_bos=False)
        assert kjv.detokenize(ids) == s.encode(), s
    # As the CLI's --tokenize (no BOS, special tokens not parsed).
    ids = cli("-m", str(DEFAULT_MODEL), "-p", CORPUS[4], "--tokenize").split()
    assert kjv.tokenize(CORPUS[4].encode(), add_bos=False) == [int(i) for i in ids]
    with_bos = kjv.tokenize(b"Hi", add_bos=True)
    assert with_bos[0] == kjv.token_bos() and with_bos[1:] == kjv.tokenize(b"Hi", add_bos=False)


@pytest.mark.parametrize("vocab", ["deepseek-llm", "deepseek-coder"])
def test_tokenize_matches_llama_cpp_on_the_real_vocabularies(vocab):
    path = SHARED / "vocab" / f"ggml-vocab-{vocab}.gguf"
    if not path.exists():
        pytest.skip(f"SKIPPED: ../shared/vocab/{path.name} is not present (llama.cpp's models/ "
                    "folder has it and its .inp/.out test vectors)")
    inputs = path.with_suffix(".gguf.inp").read_text(encoding="utf-8").split(
        "\n__ggml_vocab_test__\n")[:-1]
    expected = path.with_suffix(".gguf.out").read_text().splitlines()
    assert len(inputs) == len(expected)
    with Llama(str(path), vocab_only=True) as vocab_model:
        for text, ids in zip(inputs, expected):
            got = vocab_model.tokenize(text.encode(), add_bos=False)
            assert got == [int(i) for i in ids.split()], text
            assert vocab_model.detokenize(got) == text.encode()
        with pytest.raises(ValueError, match="vocab_only"):
            vocab_model.eval([1])


def test_special_tokens_parse_only_when_asked(kjv):
    eos = kjv.detokenize([kjv.token_eos()], special=True)
    assert eos and kjv.detokenize([kjv.token_eos()]) == b""
    assert kjv.tokenize(eos, add_bos=False, special=True) == [kjv.token_eos()]
    assert kjv.tokenize(eos, add_bos=False) != [kjv.token_eos()]


# ---- eval, logits, metadata ------------------------------------------------------------------

def test_eval_continues_the_context_and_reset_starts_again(kjv):
    ids = kjv.tokenize(PROMPT.encode(), special=True)
    kjv.reset()
    kjv.eval(ids)
    whole = kjv.logits.copy()
    assert kjv.n_tokens == len(ids)
    kjv.reset()
    kjv.eval(ids[:2])
    kjv.eval(ids[2:])
    assert kjv.n_tokens == len(ids)
    np.testing.assert_allclose(kjv.logits, whole, rtol=0, atol=1e-4 * np.abs(whole).max())
    view = kjv.logits
    kjv.reset()
    kjv.eval(ids[:1])
    assert not np.array_equal(view, whole)  # a view: the next eval overwrites it


def test_metadata_holds_the_file_s_keys(kjv):
    m = kjv.metadata
    assert m["general.architecture"] == "llama"
    assert isinstance(m["llama.context_length"], int)
    assert isinstance(m["llama.attention.layer_norm_rms_epsilon"], float)
    assert isinstance(m["tokenizer.ggml.tokens"], list) and len(m["tokenizer.ggml.tokens"]) == \
        kjv.n_vocab()
    assert kjv.n_ctx() == CTX and kjv.n_vocab() == 4096


def test_docstrings_and_type_stubs_are_there():
    assert "llama-cpp-python" in dsengine.__doc__
    for f in ["__call__", "create_completion", "create_chat_completion", "tokenize",
              "detokenize", "eval", "close"]:
        assert getattr(Llama, f).__doc__, f
    package = Path(dsengine.__file__).parent
    stub = (package / "__init__.pyi").read_text()
    assert "def create_chat_completion" in stub and (package / "py.typed").exists()


# ---- errors --------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    (dict(n_ctx=-1), "n_ctx"), (dict(n_ctx="big"), "n_ctx"), (dict(n_threads=0), "n_threads"),
    (dict(seed=-5), "seed"), (dict(seed=2**64), "seed"),
])
def test_bad_constructor_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Llama(str(DEFAULT_MODEL), **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(temperature="hot"), "temperature"), (dict(temperature=float("nan")), "temperature"),
    (dict(top_p=0), "top_p"), (dict(top_p=1.5), "top_p"), (dict(top_k=2.5), "top_k"),
    (dict(max_tokens="all"), "max_tokens"), (dict(stop=[""]), "stop"), (dict(stop=[3]), "stop"),
    (dict(seed=-2), "seed"),
])
def test_bad_generation_arguments_raise_value_error(kjv, kwargs, message):
    with pytest.raises(ValueError, match=message):
        kjv(PROMPT, **kwargs)
    assert greedy(kjv, n=4)  # still usable


def test_other_bad_calls_raise_value_error(kjv):
    n = kjv.n_vocab()
    with pytest.raises(ValueError, match="out of range"):
        kjv.eval([n])
    with pytest.raises(ValueError, match="out of range"):
        kjv.eval([-1])
    with pytest.raises(ValueError, match="out of range"):
        kjv.detokenize([10**6])
    with pytest.raises(ValueError, match="ints"):
        kjv.eval(["a"])
    with pytest.raises(ValueError, match="at least one"):
        kjv.eval([])
    with pytest.raises(ValueError, match="bytes"):
        kjv.tokenize("text")
    with pytest.raises(ValueError, match="exceed context window"):
        kjv("word " * (CTX * 2), max_tokens=1)
    for bad in [[], [{"role": "user"}], [{"role": "assistant", "content": "x"}],
                [{"role": "user", "content": "a"}, {"role": "tool", "content": "b"}], "hi"]:
        with pytest.raises(ValueError):
            kjv.create_chat_completion(bad)
    assert greedy(kjv, n=4)


def test_bad_files_raise_engine_errors(tmp_path):
    assert issubclass(EngineError, RuntimeError)
    with pytest.raises(EngineError, match="no-such.gguf"):
        Llama(str(tmp_path / "no-such.gguf"))
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(DEFAULT_MODEL.read_bytes()[:100000])
    with pytest.raises(EngineError, match="truncated.gguf"):
        Llama(str(truncated))
    text = tmp_path / "text.gguf"
    text.write_text("not a model")
    with pytest.raises(EngineError, match="text.gguf"):
        Llama(str(text))
    with pytest.raises(EngineError):
        Llama(str(tmp_path))  # a directory
    with pytest.raises(ValueError):
        Llama(None)


@pytest.mark.parametrize("name", ["tiny-llama-f32.gguf", "tiny-kjv-q4_0.gguf"])
def test_a_model_holding_nan_raises_and_stays_usable(name, tmp_path):
    subprocess.run([sys.executable, str(ROOT / "tests" / "cli" / "make_nan_models.py"),
                    str(tmp_path), str(MODELS / name)], check=True)
    with Llama(str(tmp_path / f"nan-{name}"), n_ctx=64) as llm:
        with pytest.raises(EngineError, match="non-finite logit"):
            llm(PROMPT, max_tokens=4)
        with pytest.raises(EngineError, match="non-finite logit"):
            llm.eval([1])  # a later call fails the same way, without a crash


def test_a_closed_model_raises(tmp_path):
    with Llama(str(DEFAULT_MODEL), n_ctx=64) as llm:
        llm.eval([1, 2, 3])
        view = llm.logits
    with pytest.raises(ValueError, match="closed"):
        llm.n_ctx()
    with pytest.raises(ValueError, match="closed"):
        llm(PROMPT)
    assert np.isfinite(view).all()  # the array keeps its memory
    llm.close()  # twice is fine


# ---- interruption, threads, several models --------------------------------------------------

def test_ctrl_c_stops_a_generation_and_the_model_stays_usable(kjv):
    expected = greedy(kjv, n=16)
    # interrupt_main() does nothing where SIGINT is ignored, as in a process started in the
    # background by a non-interactive shell (`make test &`): there the loop below ran on for
    # minutes. Python's own handler for the test's length, and a loop bounded at 30 s.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        timer = threading.Timer(0.3, _thread.interrupt_main)
        start = time.monotonic()
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            while time.monotonic() - start < 30:
                kjv(PROMPT, max_tokens=2000, temperature=0.8)
        timer.join()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - start < 30
    assert greedy(kjv, n=16) == expected


def test_a_later_call_ends_an_open_stream(kjv):
    stream = kjv(PROMPT, max_tokens=30, temperature=0, stream=True)
    next(stream)
    expected = greedy(kjv, n=30)
    with pytest.raises(RuntimeError, match="later call"):
        next(stream)
    assert greedy(kjv, n=30) == expected


def test_two_models_at_once_do_not_interfere():
    with load("tiny-kjv-q4_0.gguf") as a, load("tiny-llama-f32.gguf") as b:
        solo_a, solo_b = greedy(a, n=24), greedy(b, n=24)
        sa = a(PROMPT, max_tokens=24, temperature=0, stream=True)
        sb = b(PROMPT, max_tokens=24, temperature=0, stream=True)
        texts = {sa: "", sb: ""}
        while texts:  # stepped in turn
            for s in list(texts):
                c = next(s, None)
                if c is None:
                    assert (s is sa and texts[s] == solo_a) or (s is sb and texts[s] == solo_b)
                    del texts[s]
                else:
                    texts[s] += c["choices"][0]["text"]
        # And each from its own thread.
        results = {}
        threads = [threading.Thread(target=lambda k=k, m=m: results.__setitem__(k, greedy(m, n=24)))
                   for k, m in (("a", a), ("b", b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == {"a": solo_a, "b": solo_b}


def test_the_gil_is_released_while_the_model_runs(kjv):
    ids = kjv.tokenize(("word " * 200).encode(), special=True)
    done = threading.Event()

    def work():
        for _ in range(20):
            kjv.reset()
            kjv.eval(ids)
        done.set()

    ticks = 0
    worker = threading.Thread(target=work)
    start = time.monotonic()
    worker.start()
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    worker.join()
    elapsed = time.monotonic() - start
    # With the GIL held through each eval, this thread would wake about once per eval (20).
    assert ticks > 40 or elapsed < 0.05, (ticks, elapsed)


# ---- install and example ---------------------------------------------------------------------

def test_example_runs_on_the_default_model():
    run = subprocess.run([sys.executable, str(ROOT / "python" / "example.py")], capture_output=True,
                         timeout=120, cwd=ROOT, env=dict(os.environ))
    assert run.returncode == 0, run.stderr.decode(errors="replace")
    assert "And it came to pass" in run.stdout.decode()


def test_pip_installs_the_module_without_fetching(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["STAGE"] = dsengine.STAGE
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                          "--no-build-isolation", "--no-index", str(ROOT)],
                         capture_output=True, env=env, timeout=600)
    assert pip.returncode == 0, pip.stderr.decode(errors="replace")
    check = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import dsengine; print(dsengine.__file__, dsengine.STAGE)"],
                           capture_output=True, env=env, cwd=tmp_path, timeout=60)
    assert check.returncode == 0, check.stderr.decode(errors="replace")
    where, stage = check.stdout.decode().split()
    assert where.startswith(str(venv)) and stage == dsengine.STAGE
    shutil.rmtree(ROOT / "python" / "dsengine.egg-info", ignore_errors=True)
