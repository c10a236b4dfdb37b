"""examples/prepare_data.py against the real `tokenizers` package, and pprun training on its output.

The test trains and saves its own byte-level BPE tokenizer (none can be downloaded here), writes
text files, runs the script, and checks:
  - the token file holds exactly the tokenizer's ids of the documents (each followed by --eos), in
    the width asked for (uint16 by default for a small vocabulary, uint32 with --dtype), and
    decodes back to the text; --val-fraction puts the last document in OUT.val.bin;
  - pprun trains on it (2 ranks, 1F1B) and its loss falls;
  - bad input (a missing tokenizer, an unknown --eos token, a missing input file, a JSON-lines
    file that is not JSON, a missing output directory) exits 2 with a one-line message and writes
    nothing.

Environment: PPCOMPILE, PPRUN (ctest sets them).
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "examples", "prepare_data.py")
PPCOMPILE = os.environ.get("PPCOMPILE", "build/tools/ppcompile/ppcompile")
PPRUN = os.environ.get("PPRUN", "build/tools/pprun/pprun")

WORDS = ("the quick brown fox jumps over the lazy dog while a small bird sings about rivers "
         "mountains and the long winter night").split()


def make_tokenizer(path, vocab_size):
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    rng = np.random.default_rng(0)
    tok.train_from_iterator([" ".join(rng.choice(WORDS, 12)) for _ in range(300)], trainer)
    tok.save(path)
    return tok


def make_docs(d, n):
    rng = np.random.default_rng(1)
    paths, texts = [], []
    for i in range(n):
        text = "\n".join(" ".join(rng.choice(WORDS, 10)) for _ in range(40)) + "\n"
        path = os.path.join(d, f"doc{i}.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        paths.append(path)
        texts.append(text)
    return paths, texts


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


class PrepareData(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.d = cls.tmp.name
        cls.tok_path = os.path.join(cls.d, "tokenizer.json")
        cls.tok = make_tokenizer(cls.tok_path, 320)
        cls.docs, cls.texts = make_docs(cls.d, 4)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def prepare(self, *args):
        return run([sys.executable, SCRIPT, "--tokenizer", self.tok_path, *args])

    def test_tokens_are_the_tokenizers_ids(self):
        out = os.path.join(self.d, "ids.bin")
        p = self.prepare("-o", out, "--eos", "</s>", "--val-fraction", "0.25", *self.docs)
        self.assertEqual(p.returncode, 0, p.stderr)
        eos = self.tok.token_to_id("</s>")
        want = [self.tok.encode(t, add_special_tokens=False).ids + [eos] for t in self.texts]
        got = np.fromfile(out, dtype="<u2")
        self.assertEqual(got.tolist(), sum(want[:3], []))
        self.assertEqual(np.fromfile(os.path.join(self.d, "ids.val.bin"), dtype="<u2").tolist(),
                         want[3])
        self.assertEqual(self.tok.decode(np.fromfile(out, dtype="<u2")[:len(want[0]) - 1]
                                         .tolist()), self.texts[0])
        out32 = os.path.join(self.d, "ids32.bin")
        p = self.prepare("-o", out32, "--dtype", "uint32", *self.docs)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(np.fromfile(out32, dtype="<u4").tolist(),
                         sum((self.tok.encode(t, add_special_tokens=False).ids
                              for t in self.texts), []))

    def test_jsonl_documents(self):
        path = os.path.join(self.d, "docs.jsonl")
        with open(path, "w") as f:
            for t in self.texts[:2]:
                f.write(json.dumps({"text": t, "id": 1}) + "\n")
        out = os.path.join(self.d, "jsonl.bin")
        p = self.prepare("-o", out, "--jsonl", "text", path)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(np.fromfile(out, dtype="<u2").tolist(),
                         sum((self.tok.encode(t, add_special_tokens=False).ids
                              for t in self.texts[:2]), []))

    def test_pprun_trains_on_the_tokens(self):
        out = os.path.join(self.d, "train.bin")
        p = self.prepare("-o", out, "--eos", "</s>", *self.docs)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("--data-format uint16", p.stdout)
        plan = os.path.join(self.d, "plan.json")
        p = run([PPCOMPILE, "--layout", "Et|tL", "--pp", "2", "--schedule", "1F1B",
                 "--microbatches", "2", "--emit", "json", "-o", plan])
        self.assertEqual(p.returncode, 0, p.stderr)
        metrics = os.path.join(self.d, "m.jsonl")
        p = run([PPRUN, "--plan", plan, "--data", out, "--data-format", "uint16", "--vocab",
                 str(self.tok.get_vocab_size()), "--seq-len", "32", "--hidden", "32", "--ffn",
                 "64", "--steps", "20", "--global-batch", "4", "--lr", "1e-2", "--metrics",
                 metrics, "--progress", "none", "--threads", "1"])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("uint16 tokens of " + out, p.stdout)
        with open(metrics) as f:
            # whole lines only (a killed run may leave its last one half-written)
            losses = [j["loss"] for j in (json.loads(l) for l in f if l.endswith("\n"))
                      if "loss" in j]
        self.assertEqual(len(losses), 20)
        self.assertAlmostEqual(losses[0], np.log(self.tok.get_vocab_size()), delta=0.3)
        self.assertLess(np.mean(losses[-3:]), losses[0] - 1.0)

    def test_bad_input_exits_2_naming_it(self):
        out = os.path.join(self.d, "bad.bin")
        cases = [
            (["--tokenizer", os.path.join(self.d, "none.json"), "-o", out, self.docs[0]],
             "none.json: no such tokenizer file"),
            (["--tokenizer", self.tok_path, "-o", out, "--eos", "<eos>", self.docs[0]],
             "--eos: '<eos>' is not a token of"),
            (["--tokenizer", self.tok_path, "-o", out, os.path.join(self.d, "missing.txt")],
             "missing.txt: no such file"),
            (["--tokenizer", self.tok_path, "-o", out, "--jsonl", "body", self.docs[0]],
             "doc0.txt:1: not JSON"),
            (["--tokenizer", self.tok_path, "-o", os.path.join(self.d, "no", "x.bin"),
              self.docs[0]], "does not exist"),
        ]
        for args, message in cases:
            with self.subTest(message=message):
                p = run([sys.executable, SCRIPT, *args])
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn(message, p.stderr)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                self.assertFalse(os.path.exists(out))
        p = run([sys.executable, SCRIPT, "--help"])
        self.assertEqual(p.returncode, 0)
        self.assertIn("--tokenizer", p.stdout)


if __name__ == "__main__":
    unittest.main()
