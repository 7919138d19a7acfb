"""A ten-line tour of dsengine on the default model: make python && python3 python/example.py"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "build" / "python"))  # make python
from dsengine import Llama  # with llama-cpp-python: from llama_cpp import Llama

model = sys.argv[1] if len(sys.argv) > 1 else "data/models/tiny-kjv-q4_0.gguf"
with Llama(model, n_ctx=512, seed=1) as llm:
    out = llm("And it came to pass", max_tokens=24, temperature=0)
    print("And it came to pass" + out["choices"][0]["text"], out["usage"])
    for chunk in llm.create_chat_completion(
        [{"role": "user", "content": "Who was Moses?"}], max_tokens=24, stream=True
    ):
        print(chunk["choices"][0]["delta"].get("content", ""), end="", flush=True)
    print()
