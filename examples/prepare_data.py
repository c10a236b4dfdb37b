#!/usr/bin/env python3
"""Tokenize text files into the flat token files `pprun --data` reads (docs/huggingface.md).

Each input is a document: a text file read whole, or, with --jsonl KEY, a JSON-lines file whose
lines each hold one document under KEY. Documents are tokenized with a Hugging Face tokenizer
(the `tokenizers` package, a tokenizer.json file) and concatenated, each followed by --eos if
given, into OUT as flat little-endian token ids with no header: uint16 when every id of the
vocabulary fits, else uint32 (--dtype forces one). pprun reads it with
`--data OUT --data-format uint16` (or `uint32`; a .bin name is uint16 by default).

--val-fraction F writes the last F of the documents (at least one) to a second file, OUT with
`.val` before its extension: tokens held out from training.

Example:
    python3 examples/prepare_data.py --tokenizer tokenizer.json -o train.bin corpus/*.txt
    pprun --plan plan.json --init-from model/ --data train.bin --data-format uint16

Exit codes: 0 done, 2 bad input (a one-line message naming the file); nothing is left half
written (files are written beside OUT and renamed into place).
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np


class InputError(Exception):
    pass


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="prepare_data.py",
        description="Tokenize text files into flat uint16/uint32 token files for pprun --data.",
        epilog="Example: prepare_data.py --tokenizer tokenizer.json -o train.bin docs/*.txt")
    p.add_argument("inputs", nargs="+", metavar="FILE", help="text files (one document each), "
                   "or JSON-lines files with --jsonl")
    p.add_argument("--tokenizer", required=True, metavar="JSON",
                   help="a Hugging Face tokenizer.json (the tokenizers package reads it)")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="the token file to write")
    p.add_argument("--dtype", choices=["auto", "uint16", "uint32"], default="auto",
                   help="token width (default auto: uint16 if the vocabulary fits, else uint32)")
    p.add_argument("--eos", metavar="TOKEN",
                   help="a token (e.g. '</s>' or '<|endoftext|>') appended after every document")
    p.add_argument("--jsonl", metavar="KEY",
                   help="inputs are JSON lines; each line's KEY field is one document")
    p.add_argument("--add-special-tokens", action="store_true",
                   help="let the tokenizer add its special tokens (BOS ...) to every document")
    p.add_argument("--val-fraction", type=float, default=0.0, metavar="F",
                   help="write the last F of the documents to OUT's .val file (0 < F < 1)")
    return p.parse_args(argv)


def load_tokenizer(path):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise InputError("the 'tokenizers' package is not installed (pip install -r "
                         "scripts/requirements.txt)")
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such tokenizer file")
    try:
        return Tokenizer.from_file(path)
    except Exception as e:  # the Rust library's error: one line
        raise InputError(f"{path}: not a tokenizer.json: {str(e).splitlines()[0]}")


def documents(paths, jsonl_key):
    """Yields (where, text) for every document of the inputs, in order."""
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                if jsonl_key is None:
                    yield path, f.read()
                    continue
                for n, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise InputError(f"{path}:{n}: not JSON: {e.msg}")
                    if not isinstance(obj, dict) or not isinstance(obj.get(jsonl_key), str):
                        raise InputError(f"{path}:{n}: no string field '{jsonl_key}'")
                    yield f"{path}:{n}", obj[jsonl_key]
        except FileNotFoundError:
            raise InputError(f"{path}: no such file")
        except UnicodeDecodeError as e:
            raise InputError(f"{path}: not UTF-8 text (byte {e.start})")
        except IsADirectoryError:
            raise InputError(f"{path}: is a directory")


def write_tokens(path, arrays, dtype):
    """Writes the concatenated arrays to `path` atomically (a temporary file renamed)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".prepare_data.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            for a in arrays:
                f.write(a.astype(dtype.newbyteorder("<"), copy=False).tobytes())
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return sum(len(a) for a in arrays)


def val_path(path):
    root, ext = os.path.splitext(path)
    return f"{root}.val{ext}"


def main(argv):
    args = parse_args(argv)
    if not 0 <= args.val_fraction < 1:
        raise InputError(f"--val-fraction: {args.val_fraction} is not in [0, 1)")
    tok = load_tokenizer(args.tokenizer)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    if args.dtype == "auto":
        dtype = np.dtype(np.uint16 if vocab <= 1 << 16 else np.uint32)
    else:
        dtype = np.dtype(args.dtype)
        if vocab > np.iinfo(dtype).max + 1:
            raise InputError(f"--dtype {args.dtype}: the tokenizer has {vocab} ids, more than "
                             f"{args.dtype} holds")
    eos = None
    if args.eos is not None:
        eos = tok.token_to_id(args.eos)
        if eos is None:
            raise InputError(f"--eos: '{args.eos}' is not a token of {args.tokenizer}")
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir):
        raise InputError(f"-o: the directory {out_dir} does not exist")

    docs = []
    total_chars = 0
    for where, text in documents(args.inputs, args.jsonl):
        ids = tok.encode(text, add_special_tokens=args.add_special_tokens).ids
        if eos is not None:
            ids.append(eos)
        docs.append(np.asarray(ids, dtype=np.int64))
        total_chars += len(text)
        if len(docs) % 1000 == 0:
            print(f"prepare_data: {len(docs)} documents ...", file=sys.stderr)
    if not docs:
        raise InputError("no documents in the inputs")
    for a in docs:
        if len(a) and a.max() >= vocab:  # cannot happen with a consistent tokenizer
            raise InputError(f"{args.tokenizer}: token id {a.max()} >= its vocabulary {vocab}")

    n_val = 0
    if args.val_fraction > 0:
        if len(docs) < 2:
            raise InputError("--val-fraction needs at least two documents")
        n_val = min(len(docs) - 1, max(1, round(len(docs) * args.val_fraction)))
    train, val = docs[:len(docs) - n_val], docs[len(docs) - n_val:]
    n = write_tokens(args.output, train, dtype)
    print(f"prepare_data: wrote {n} {dtype.name} tokens of {len(train)} documents to "
          f"{args.output} (vocabulary {vocab}; pprun --data {args.output} --data-format "
          f"{dtype.name})")
    if val:
        nv = write_tokens(val_path(args.output), val, dtype)
        print(f"prepare_data: wrote {nv} {dtype.name} tokens of {len(val)} documents to "
              f"{val_path(args.output)}")
    tokens = n + (nv if val else 0)
    print(f"prepare_data: {total_chars} characters, {total_chars / max(1, tokens):.2f} per token")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except InputError as e:
        print(f"prepare_data.py: error: {e}", file=sys.stderr)
        sys.exit(2)
