#!/usr/bin/env python3
"""Copies test models with one weight set to NaN, for tests/cli_test.sh.

usage: make_nan_models.py OUT_DIR MODEL.gguf...
Writes OUT_DIR/nan-<model>.gguf with blk.0.attn_norm.weight[0] = NaN (an F32 vector in every
model, whatever the matrices' type): the engine must stop with an error, not print text.
"""
import os
import shutil
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
from gguf import GGUFReader  # noqa: E402

TENSOR = "blk.0.attn_norm.weight"
NAN_F32 = struct.pack("<I", 0x7FC00000)


def main():
    out_dir, models = sys.argv[1], sys.argv[2:]
    os.makedirs(out_dir, exist_ok=True)
    for model in models:
        reader = GGUFReader(model)
        offset = reader.data_offset + reader.tensors[TENSOR].offset
        del reader  # release the memory map before writing a copy
        out = os.path.join(out_dir, "nan-" + os.path.basename(model))
        shutil.copyfile(model, out)
        with open(out, "r+b") as f:
            f.seek(offset)
            f.write(NAN_F32)


if __name__ == "__main__":
    main()
