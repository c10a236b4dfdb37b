#!/usr/bin/env python3
"""An independent safetensors reader, for the tests of runtime/checkpoint/safetensors.cpp.

Parses FILE the way safetensors.torch.load_file does (8-byte little-endian header size, JSON
header, torch.frombuffer over the byte buffer at each tensor's data_offsets), checks the format's
rules on the way, and prints {"metadata": {...}, "tensors": {name: {"dtype", "shape", "values"}}}
as JSON: the values flattened in row-major order (floats as Python floats, complex numbers as
[re, im], dtypes that this torch lacks decoded with struct, F8 types as their raw bytes).
Exits 1 with a message on anything it does not accept. Uses the standard library and torch only
(the project's environment, PP_PYTHON; not the safetensors package, which would not be independent).
"""
import json
import struct
import sys

import torch

TORCH = {
    "BOOL": torch.bool,
    "U8": torch.uint8,
    "I8": torch.int8,
    "I16": torch.int16,
    "I32": torch.int32,
    "I64": torch.int64,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F32": torch.float32,
    "F64": torch.float64,
    "C64": torch.complex64,
}
STRUCT = {"U16": "H", "U32": "I", "U64": "Q"}  # read with struct (torch 1.13 had no such dtypes)
RAW = {"F8_E5M2", "F8_E4M3", "F8_E8M0"}
SIZE = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4,
        "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8,
        "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1}


def fail(message):
    print(f"safetensors_reader.py: {message}", file=sys.stderr)
    sys.exit(1)


def main(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        fail("shorter than 8 bytes")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        fail("header larger than the file")
    raw = data[8 : 8 + n]
    if not raw.startswith(b"{"):
        fail("header does not start with {")
    header = json.loads(raw.decode("utf-8").rstrip(" "))
    metadata = header.pop("__metadata__", {})
    if not all(isinstance(v, str) for v in metadata.values()):
        fail("metadata values must be strings")
    buffer = bytearray(data[8 + n :])  # writable: torch.frombuffer warns on read-only bytes
    end = 0
    for name, info in sorted(header.items(), key=lambda kv: tuple(kv[1]["data_offsets"])):
        begin, stop = info["data_offsets"]
        if begin != end:
            fail(f"{name}: offsets do not follow the previous tensor")
        end = stop
    if end != len(buffer):
        fail("the tensors do not cover the buffer")
    out = {}
    for name, info in header.items():
        dtype, shape = info["dtype"], info["shape"]
        begin, stop = info["data_offsets"]
        numel = 1
        for d in shape:
            numel *= d
        if stop - begin != numel * SIZE[dtype]:
            fail(f"{name}: data_offsets do not match the shape")
        if dtype in TORCH:
            if numel == 0:
                t = torch.empty(shape, dtype=TORCH[dtype])
            else:
                t = torch.frombuffer(buffer, dtype=TORCH[dtype], count=numel,
                                     offset=begin).reshape(shape)
            if list(t.shape) != shape:
                fail(f"{name}: torch gives shape {list(t.shape)}")
            flat = t.flatten()
            if dtype in ("F16", "BF16"):
                values = flat.float().tolist()
            elif dtype == "C64":
                values = [[z.real, z.imag] for z in flat.tolist()]
            else:
                values = flat.tolist()
        elif dtype in STRUCT:
            values = list(struct.unpack(f"<{numel}{STRUCT[dtype]}", bytes(buffer[begin:stop])))
        elif dtype in RAW:
            values = list(buffer[begin:stop])
        else:
            fail(f"{name}: unknown dtype {dtype}")
        out[name] = {"dtype": dtype, "shape": shape, "values": values}
    print(json.dumps({"metadata": metadata, "tensors": out}))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        fail("usage: safetensors_reader.py FILE")
    main(sys.argv[1])
