#!/usr/bin/env python3
"""Writes a corpus of malformed GGUF files for tests/cli_test.sh (standard library only).

Each file breaks one rule of the format; the engine must answer each with one line on stderr
and a non-zero exit, never a crash, a hang or a huge allocation.
"""
import os
import struct
import sys

GGUF_MAGIC = b"GGUF"
T_UINT32, T_INT32, T_FLOAT32, T_STRING, T_ARRAY = 4, 5, 6, 8, 9
GGML_F32 = 0


def s(text):
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def kv_str(key, value):
    return s(key) + struct.pack("<I", T_STRING) + s(value)


def kv_u32(key, value):
    return s(key) + struct.pack("<II", T_UINT32, value)


def kv_str_array(key, values):
    return s(key) + struct.pack("<IIQ", T_ARRAY, T_STRING, len(values)) + b"".join(map(s, values))


def kv_i32_array(key, values):
    body = struct.pack("<IIQ", T_ARRAY, T_INT32, len(values))
    return s(key) + body + b"".join(struct.pack("<i", v) for v in values)


def header(n_tensors, kvs, version=3):
    return GGUF_MAGIC + struct.pack("<IQQ", version, n_tensors, len(kvs)) + b"".join(kvs)


def tensor_info(name, ne, ggml_type, offset):
    return s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne) + \
        struct.pack("<IQ", ggml_type, offset)


def pad(blob, alignment=32):
    return blob + b"\0" * (-len(blob) % alignment)


def tokenizer_kvs():
    tokens = ["a", "b", "c", "d"]
    return [kv_str("tokenizer.ggml.model", "gpt2"), kv_str("tokenizer.ggml.pre", "deepseek-llm"),
            kv_str_array("tokenizer.ggml.tokens", tokens),
            kv_i32_array("tokenizer.ggml.token_type", [1] * len(tokens)),
            kv_str_array("tokenizer.ggml.merges", [])]


def corpus():
    files = {
        "empty.gguf": b"",
        "text.gguf": b"this is not a GGUF file\n",
        "version1.gguf": header(0, [], version=1),
        "version99.gguf": header(0, [], version=99),
        "big_endian.gguf": GGUF_MAGIC + struct.pack(">IQQ", 3, 0, 0),
        "huge_tensor_count.gguf": GGUF_MAGIC + struct.pack("<IQQ", 3, 1 << 62, 0),
        "huge_kv_count.gguf": GGUF_MAGIC + struct.pack("<IQQ", 3, 0, 1 << 40),
        "huge_string.gguf": GGUF_MAGIC + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1 << 60),
        "huge_array.gguf": header(0, [s("x") + struct.pack("<IIQ", T_ARRAY, T_UINT32, 1 << 61)]),
        "bad_value_type.gguf": header(0, [s("x") + struct.pack("<I", 77)]),
    }
    arch = [kv_str("general.architecture", "llama")] + tokenizer_kvs()
    body = header(1, arch) + tensor_info("token_embd.weight", [4, 4], GGML_F32, 1 << 40)
    files["offset_past_end.gguf"] = pad(body) + b"\0" * 64
    body = header(1, arch) + tensor_info("token_embd.weight", [4, 4], 99, 0)
    files["unknown_type.gguf"] = pad(body) + b"\0" * 64
    body = header(1, arch) + tensor_info("token_embd.weight", [4] * 7, GGML_F32, 0)
    files["too_many_dims.gguf"] = pad(body) + b"\0" * 64
    body = header(1, [kv_str("general.architecture", "gpt-neox")] + tokenizer_kvs()) + \
        tensor_info("token_embd.weight", [4, 4], GGML_F32, 0)
    files["unsupported_arch.gguf"] = pad(body) + b"\0" * 64
    files["vocab_only.gguf"] = header(0, arch)
    return files


def main():
    out = sys.argv[1]
    valid = sys.argv[2] if len(sys.argv) > 2 else None
    os.makedirs(out, exist_ok=True)
    files = corpus()
    if valid:  # truncated copies of a valid model at several lengths
        data = open(valid, "rb").read()
        for n in (4, 10, 24, 100, 1000, len(data) // 2, len(data) - 1):
            files[f"truncated_{n}.gguf"] = data[:n]
    for name, blob in files.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    main()
