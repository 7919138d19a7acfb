"""dsengine: the staged DeepSeek CPU engine from Python, with llama-cpp-python's interface.

    from dsengine import Llama           # instead of: from llama_cpp import Llama
    llm = Llama("data/models/tiny-kjv-q4_0.gguf", n_ctx=512, seed=1)
    out = llm("And it came to pass", max_tokens=32, temperature=0)
    print(out["choices"][0]["text"])

The model runs in the native module dsengine._core, built from one stage of the repository
(make python [STAGE=NN]). Generation is a loop here over one native call per token, each with
the GIL released, so Ctrl-C (KeyboardInterrupt) stops it between two tokens and leaves the model
usable, and streaming is a plain Python iterator.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
import uuid
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

# libgomp reads its settings once, when the native module loads it: as the engine's CLI does,
# threads poll a short while at a barrier and then sleep, unless the user chose otherwise.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["GOMP_SPINCOUNT"] = "1000"

from . import _core  # noqa: E402  (after the environment is set)

EngineError = _core.EngineError
STAGE: str = _core.stage

__all__ = ["Llama", "EngineError", "STAGE"]

_FINISH_REASONS = {
    "end_of_generation": "stop",
    "token_limit": "length",
    "context_full": "length",
    "callback": "stop",
}


def _check_int(name: str, value: Any, low: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return value


def _check_float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return float(value)


def _check_seed(value: Any) -> Optional[int]:
    if value is None or value == -1:  # llama-cpp-python's "random"
        return None
    value = _check_int("seed", value, 0)
    if value >= 2**64:
        raise ValueError(f"seed must be below 2**64, got {value}")
    return value


def _stop_list(stop: Union[None, str, Sequence[str]]) -> List[str]:
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else list(stop)
    for s in stops:
        if not isinstance(s, str) or not s:
            raise ValueError(f"stop strings must be non-empty str, got {s!r}")
    return stops


def _held_back(text: str, stops: List[str]) -> int:
    """How many characters at the end of text could begin a stop string (held back in a stream)."""
    longest = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), longest, -1):
            if text.endswith(s[:n]):
                longest = n
                break
    return longest


def _joined(chunks: Iterator[Dict[str, Any]]):
    """A whole generation from its chunks: (text, finish_reason, usage, the last chunk)."""
    text, finish, usage, last = "", None, None, None
    for c in chunks:
        last = c
        text += c["choices"][0]["text"]
        finish = c["choices"][0]["finish_reason"] or finish
        usage = c.get("usage", usage)
    assert last is not None  # a generation always ends with a chunk holding its finish_reason
    return text, finish, usage, last


class Llama:
    """A GGUF model loaded in one stage of the engine, called as llama_cpp.Llama is.

    Args:
        model_path: the GGUF file.
        n_ctx: KV cache positions; 0 takes the model's training context, at most 4096 (as the
            engine's CLI does).
        n_threads: threads for the forward pass; None = the physical cores (at most the CPUs
            this process may use).
        seed: the sampler's seed; None or -1 picks one from the clock.
        verbose: print the load and each generation's speed on stderr.
        vocab_only: read the tokenizer alone (tokenize, detokenize, metadata); no tensors.

    Raises:
        ValueError: an argument out of range.
        EngineError: (a RuntimeError) the file cannot be read or run, with the engine's message.
    """

    def __init__(
        self,
        model_path: str,
        n_ctx: int = 512,
        n_threads: Optional[int] = None,
        seed: Optional[int] = None,
        verbose: bool = False,
        vocab_only: bool = False,
        **_ignored: Any,
    ) -> None:
        if not isinstance(model_path, (str, os.PathLike)):
            raise ValueError(f"model_path must be a path, got {type(model_path).__name__}")
        _check_int("n_ctx", n_ctx, 0)
        if n_threads is not None:
            _check_int("n_threads", n_threads, 1)
        chosen = _check_seed(seed)
        self.model_path = os.fspath(model_path)
        self.verbose = bool(verbose)
        self._lock = threading.RLock()
        self._history: List[int] = []  # tokens in the context, including one not yet run
        self._generation = 0  # which generation may step the engine (a newer one ends older streams)
        start = time.perf_counter()
        self._engine: Optional[_core.NativeEngine] = _core.NativeEngine(
            self.model_path,
            n_ctx,
            n_threads or 0,
            chosen if chosen is not None else time.time_ns() // 1000,
            bool(vocab_only),
        )
        self._metadata: Optional[Dict[str, Any]] = None
        if self.verbose and not vocab_only:
            e = self._engine
            print(
                f"dsengine ({STAGE}): {self.model_path}: n_vocab={e.n_vocab()} n_ctx={e.n_ctx()} "
                f"threads={e.n_threads()} load_ms={1000 * (time.perf_counter() - start):.1f}",
                file=sys.stderr,
            )

    # ---- lifetime ----------------------------------------------------------------------------
    def close(self) -> None:
        """Frees the model; any later call raises ValueError. Logits arrays stay readable."""
        with self._lock:
            if self._engine is not None:
                self._engine.close()
                self._engine = None
                self._generation += 1

    def __enter__(self) -> "Llama":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.close()

    @property
    def _e(self) -> "_core.NativeEngine":
        if self._engine is None:
            raise ValueError("the model is closed")
        return self._engine

    # ---- the model ---------------------------------------------------------------------------
    def n_ctx(self) -> int:
        """KV cache positions."""
        return self._e.n_ctx()

    def n_vocab(self) -> int:
        """Vocabulary size."""
        return self._e.n_vocab()

    def token_bos(self) -> int:
        """The BOS token id (-1 if none)."""
        return self._e.bos()

    def token_eos(self) -> int:
        """The EOS token id (-1 if none)."""
        return self._e.eos()

    @property
    def n_tokens(self) -> int:
        """Tokens run through the engine so far (its position in the context)."""
        return self._e.n_tokens()

    @property
    def metadata(self) -> Dict[str, Any]:
        """The GGUF file's key/values: int, float, bool, str, or lists of them (arrays)."""
        with self._lock:
            if self._metadata is None:
                self._metadata = self._e.metadata()
            return self._metadata

    @property
    def chat_format(self) -> str:
        """The chat template create_chat_completion uses: deepseek-llm, -coder or -r1."""
        return self._e.chat_template_name()

    # ---- tokens ------------------------------------------------------------------------------
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> List[int]:
        """Token ids of text (UTF-8 bytes). add_bos: begin with BOS when the model adds one.
        special: control tokens written in the text become their ids."""
        if isinstance(text, str):
            raise ValueError("tokenize takes bytes: use text.encode('utf-8')")
        if not isinstance(text, (bytes, bytearray, memoryview)):
            raise ValueError(f"text must be bytes, got {type(text).__name__}")
        return self._e.tokenize(bytes(text), bool(add_bos), bool(special))

    def detokenize(self, tokens: Sequence[int], special: bool = False) -> bytes:
        """The bytes the tokens stand for (control tokens' text too when special)."""
        return self._e.detokenize(self._ids(tokens), bool(special))

    def _ids(self, tokens: Any) -> List[int]:
        try:
            ids = [int(t) for t in tokens]
        except (TypeError, ValueError):
            raise ValueError("tokens must be a sequence of ints") from None
        n = self._e.n_vocab()
        for t in ids:
            if not 0 <= t < n:
                raise ValueError(f"token id {t} is out of range [0, {n})")
        return ids

    # ---- the forward pass --------------------------------------------------------------------
    def eval(self, tokens: Sequence[int]) -> None:
        """Runs tokens at the end of the context; then `logits` holds the logits after the last."""
        ids = self._ids(tokens)
        if not ids:
            raise ValueError("eval needs at least one token")
        with self._lock:
            self._generation += 1
            self._check_fits(len(self._history) + len(ids))
            self._e.eval(ids)
            self._history += ids

    def reset(self) -> None:
        """Empties the context: the next eval or completion starts at position 0."""
        with self._lock:
            self._generation += 1
            self._e.reset()
            self._history = []

    @property
    def logits(self) -> "Any":
        """The logits (float32, n_vocab) after the last token run: a read-only numpy view of the
        engine's buffer, overwritten by the next eval or generated token (copy() to keep)."""
        return self._e.logits()

    def _check_fits(self, n: int) -> None:
        e = self._e
        if n > e.n_ctx() and not (e.slides_past_context() and n - len(self._history) <= e.n_ctx()):
            raise ValueError(f"Requested tokens ({n}) exceed context window of {e.n_ctx()}")

    # ---- completions -------------------------------------------------------------------------
    def __call__(self, prompt: str, **kwargs: Any) -> Any:
        """Same as create_completion."""
        return self.create_completion(prompt, **kwargs)

    def create_completion(
        self,
        prompt: Union[str, List[int]],
        max_tokens: Optional[int] = 16,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 0.95,
        stop: Union[None, str, List[str]] = None,
        seed: Optional[int] = None,
        stream: bool = False,
        echo: bool = False,
        **_ignored: Any,
    ) -> Any:
        """Completes prompt; returns an OpenAI-style completion dict, or with stream=True an
        iterator of chunk dicts. max_tokens None or <= 0: until the end of text or of the
        context. temperature <= 0: greedy. top_k <= 0: the whole vocabulary. seed: restart the
        sampler's random stream with it. Text that ends in a stop string ends there (the stop
        string is not returned); finish_reason is "stop" or "length"."""
        if isinstance(prompt, str):
            ids = self.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
            prompt_text = prompt
        else:
            ids = self._ids(prompt)
            prompt_text = self.detokenize(ids).decode("utf-8", "replace")
        chunks = self._generate(ids, prompt_text if echo else "", max_tokens, temperature, top_k,
                                top_p, stop, seed, "cmpl")
        if stream:
            return chunks
        text, finish, usage, header = _joined(chunks)
        return {
            "id": header["id"],
            "object": "text_completion",
            "created": header["created"],
            "model": self.model_path,
            "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}],
            "usage": usage,
        }

    def create_chat_completion(
        self,
        messages: List[Dict[str, str]],
        max_tokens: Optional[int] = None,
        temperature: float = 0.2,
        top_k: int = 40,
        top_p: float = 0.95,
        stop: Union[None, str, List[str]] = None,
        seed: Optional[int] = None,
        stream: bool = False,
        chat_format: Optional[str] = None,
        **_ignored: Any,
    ) -> Any:
        """A reply to messages ([{"role": "system"|"user"|"assistant", "content": str}, ...],
        the last one the user's) in the file's chat template (or chat_format: deepseek-llm,
        deepseek-coder, deepseek-r1). Returns a chat.completion dict, or with stream=True an
        iterator of chat.completion.chunk dicts (the first delta holds the role)."""
        if not isinstance(messages, list) or not messages:
            raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
        pairs = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise ValueError(f"messages[{i}] must be a dict with a 'role' str")
            content = m.get("content")
            if not isinstance(content, str):
                raise ValueError(f"messages[{i}]['content'] must be a str")
            pairs.append((m["role"], content))
        try:
            text = self._e.format_chat(pairs, chat_format or "")
        except EngineError as e:
            raise ValueError(str(e)) from None
        ids = self.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        chunks = self._generate(ids, "", max_tokens, temperature, top_k, top_p, stop, seed,
                                "chatcmpl")
        if stream:
            return self._chat_chunks(chunks)
        content, finish, usage, header = _joined(chunks)
        return {
            "id": header["id"],
            "object": "chat.completion",
            "created": header["created"],
            "model": self.model_path,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "logprobs": None,
                    "finish_reason": finish,
                }
            ],
            "usage": usage,
        }

    def _chat_chunks(self, chunks: Iterator[Dict[str, Any]]) -> Iterator[Dict[str, Any]]:
        first = True
        for c in chunks:
            choice = c["choices"][0]
            delta: Dict[str, str] = {}
            if first:
                delta["role"] = "assistant"
                first = False
            if choice["text"]:
                delta["content"] = choice["text"]
            out = {
                "id": c["id"],
                "object": "chat.completion.chunk",
                "created": c["created"],
                "model": self.model_path,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None,
                     "finish_reason": choice["finish_reason"]}
                ],
            }
            if "usage" in c:
                out["usage"] = c["usage"]
            yield out

    def _generate(
        self,
        ids: List[int],
        echo_text: str,
        max_tokens: Optional[int],
        temperature: float,
        top_k: int,
        top_p: float,
        stop: Union[None, str, List[str]],
        seed: Optional[int],
        kind: str,
    ) -> Iterator[Dict[str, Any]]:
        """Checks the arguments at once, then returns the iterator of text chunks."""
        if max_tokens is not None:
            _check_int("max_tokens", max_tokens)
        n_predict = -1 if max_tokens is None or max_tokens <= 0 else max_tokens
        temperature = _check_float("temperature", temperature)
        top_k = _check_int("top_k", top_k)
        top_p = _check_float("top_p", top_p)
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        stops = _stop_list(stop)
        seed = _check_seed(seed)
        if not ids:
            raise ValueError("the prompt is empty and the model adds no BOS token")
        if len(ids) > self.n_ctx():
            raise ValueError(f"Requested tokens ({len(ids)}) exceed context window of {self.n_ctx()}")
        return self._chunks(ids, echo_text, n_predict, temperature, top_k, top_p, stops, seed, kind)

    def _chunks(self, ids, echo_text, n_predict, temperature, top_k, top_p, stops, seed, kind):
        created = int(time.time())
        cid = f"{kind}-{uuid.uuid4()}"

        def chunk(text: str, finish: Optional[str]) -> Dict[str, Any]:
            return {
                "id": cid,
                "object": "text_completion",
                "created": created,
                "model": self.model_path,
                "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}],
            }

        consistent = False  # history and engine agree (False inside a step: see finally)
        with self._lock:
            self._generation += 1
            mine = self._generation
        try:
            with self._lock:
                e = self._e
                # Keep the context when the prompt continues it (a chat's next turn); else start
                # over.
                h = self._history
                if len(h) < len(ids) and ids[: len(h)] == h and e.n_tokens() <= e.n_ctx():
                    feed = ids[len(h):]
                else:
                    e.reset()
                    feed = ids
                self._history = []
                e.start(feed, n_predict, temperature, top_k, top_p, seed)
                self._history = list(ids)
                consistent = True
            if echo_text:
                yield chunk(echo_text, None)
            text, sent, finish, n_generated = "", 0, None, 0
            while finish is None:
                with self._lock:
                    if self._generation != mine:
                        raise RuntimeError("this stream was ended by a later call on the same model")
                    consistent = False
                    step = e.next()
                    if step is None:
                        reason = e.stats()["stop"]
                        finish = _FINISH_REASONS[reason]
                        if reason == "end_of_generation":
                            self._history.append(e.stats()["last_token"])
                        piece = e.finish().decode("utf-8", "replace")
                    else:
                        n_generated += 1
                        self._history.append(step[0])
                        piece = step[1].decode("utf-8", "replace")
                    consistent = True
                text += piece
                # A stop string ends the text where it begins; text that may begin one waits.
                found = [i for i in (text.find(s, max(0, sent - len(s))) for s in stops) if i >= 0]
                if found:
                    finish, ready = "stop", min(found)
                else:
                    ready = len(text) - (_held_back(text, stops) if finish is None else 0)
                if ready > sent:
                    yield chunk(text[sent:ready], None)
                    sent = ready
            if self.verbose:
                self._print_stats()
            last = chunk("", finish)
            last["usage"] = {
                "prompt_tokens": len(ids),
                "completion_tokens": n_generated,
                "total_tokens": len(ids) + n_generated,
            }
            yield last
        finally:
            with self._lock:
                if self._generation == mine and self._engine is not None:
                    self._engine.finish()
                    if not consistent:  # interrupted inside a step: forget the context
                        self._engine.reset()
                        self._history = []

    def _print_stats(self) -> None:
        s = self._e.stats()
        prefill = 1000 * s["prompt_tokens"] / s["prefill_ms"] if s["prefill_ms"] > 0 else 0.0
        decode = 1000 * s["decode_steps"] / s["decode_ms"] if s["decode_ms"] > 0 else 0.0
        print(
            f"stats: prompt_tokens={s['prompt_tokens']} prefill_tok_s={prefill:.2f} "
            f"gen_tokens={s['gen_tokens']} decode_tok_s={decode:.2f}",
            file=sys.stderr,
        )
