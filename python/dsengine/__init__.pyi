# Type stubs for dsengine (the staged DeepSeek CPU engine, llama-cpp-python's interface).
from typing import Any, Dict, Iterator, List, Literal, Optional, Sequence, TypedDict, Union, overload

import numpy as np
import numpy.typing as npt

STAGE: str

class EngineError(RuntimeError): ...

class CompletionUsage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int

class CompletionChoice(TypedDict):
    text: str
    index: int
    logprobs: None
    finish_reason: Optional[Literal["stop", "length"]]

class Completion(TypedDict):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: List[CompletionChoice]
    usage: CompletionUsage

class CompletionChunk(TypedDict, total=False):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: List[CompletionChoice]
    usage: CompletionUsage

class ChatMessage(TypedDict):
    role: Literal["system", "user", "assistant"]
    content: str

class ChatChoice(TypedDict):
    index: int
    message: ChatMessage
    logprobs: None
    finish_reason: Optional[Literal["stop", "length"]]

class ChatCompletion(TypedDict):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: List[ChatChoice]
    usage: CompletionUsage

class ChatDelta(TypedDict, total=False):
    role: Literal["assistant"]
    content: str

class ChatChunkChoice(TypedDict):
    index: int
    delta: ChatDelta
    logprobs: None
    finish_reason: Optional[Literal["stop", "length"]]

class ChatCompletionChunk(TypedDict, total=False):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: List[ChatChunkChoice]
    usage: CompletionUsage

class Llama:
    model_path: str
    verbose: bool
    def __init__(
        self,
        model_path: str,
        n_ctx: int = 512,
        n_threads: Optional[int] = None,
        seed: Optional[int] = None,
        verbose: bool = False,
        vocab_only: bool = False,
        **kwargs: Any,
    ) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Llama": ...
    def __exit__(self, *exc: Any) -> None: ...
    def n_ctx(self) -> int: ...
    def n_vocab(self) -> int: ...
    def token_bos(self) -> int: ...
    def token_eos(self) -> int: ...
    @property
    def n_tokens(self) -> int: ...
    @property
    def metadata(self) -> Dict[str, Any]: ...
    @property
    def chat_format(self) -> str: ...
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> List[int]: ...
    def detokenize(self, tokens: Sequence[int], special: bool = False) -> bytes: ...
    def eval(self, tokens: Sequence[int]) -> None: ...
    def reset(self) -> None: ...
    @property
    def logits(self) -> npt.NDArray[np.float32]: ...
    @overload
    def create_completion(
        self,
        prompt: Union[str, List[int]],
        max_tokens: Optional[int] = 16,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 0.95,
        stop: Union[None, str, List[str]] = None,
        seed: Optional[int] = None,
        stream: Literal[False] = False,
        echo: bool = False,
        **kwargs: Any,
    ) -> Completion: ...
    @overload
    def create_completion(
        self,
        prompt: Union[str, List[int]],
        max_tokens: Optional[int] = 16,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 0.95,
        stop: Union[None, str, List[str]] = None,
        seed: Optional[int] = None,
        *,
        stream: Literal[True],
        echo: bool = False,
        **kwargs: Any,
    ) -> Iterator[CompletionChunk]: ...
    def __call__(self, prompt: Union[str, List[int]], **kwargs: Any) -> Any: ...
    @overload
    def create_chat_completion(
        self,
        messages: List[Dict[str, str]],
        max_tokens: Optional[int] = None,
        temperature: float = 0.2,
        top_k: int = 40,
        top_p: float = 0.95,
        stop: Union[None, str, List[str]] = None,
        seed: Optional[int] = None,
        stream: Literal[False] = False,
        chat_format: Optional[str] = None,
        **kwargs: Any,
    ) -> ChatCompletion: ...
    @overload
    def create_chat_completion(
        self,
        messages: List[Dict[str, str]],
        max_tokens: Optional[int] = None,
        temperature: float = 0.2,
        top_k: int = 40,
        top_p: float = 0.95,
        stop: Union[None, str, List[str]] = None,
        seed: Optional[int] = None,
        *,
        stream: Literal[True],
        chat_format: Optional[str] = None,
        **kwargs: Any,
    ) -> Iterator[ChatCompletionChunk]: ...
