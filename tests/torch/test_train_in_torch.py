"""ppcompile plans trained inside torch.distributed.pipelining, end to end.

Two plans torch has no schedule class for:
  - ZB-H2 (zero bubble with 2pp-1 microbatches in flight; torch has ZB-H1 as ZB1P only), pp 4;
  - DualPipeV on an uneven layout (1, 3, 2 and 1 decoder layers per stage) with 3 microbatches,
    a count torch's own ScheduleDualPipeV refuses (it needs 2pp); OVERLAP_F_B cells.
Each is written by `ppcompile --emit csv`, compute-only (torch lowers it) and lowered (torch runs
ppcompile's SEND/RECV order), and trained by bench/torch_pipelining.py: pprun's Llama-style model
in PyTorch, one PipelineStage per stage, torch's _PipelineScheduleRuntime with _load_csv (what
torchtitan's pipeline_parallel_schedule_csv does), Gloo, one process per rank started by torchrun.
Its losses must equal the unpipelined model's (the same model in one process, gradient
accumulation) and pprun --reference's, within 1e-5 relative: the microbatches' gradients are
summed in another order, nothing else differs.

Environment: PPCOMPILE, PPRUN, PP_TORCHRUN (ctest sets them).
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TRAINER = os.path.join(ROOT, "bench", "torch_pipelining.py")
PPCOMPILE = os.environ.get("PPCOMPILE", "build/tools/ppcompile/ppcompile")
PPRUN = os.environ.get("PPRUN", "build/tools/pprun/pprun")
TORCHRUN = os.environ.get("PP_TORCHRUN", os.path.join(os.path.dirname(sys.executable), "torchrun"))

STEPS = 4
MODEL = ["--hidden", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "176", "--vocab", "256",
         "--seq-len", "32", "--steps", str(STEPS)]
PLANS = {
    "ZB-H2": {"layout": "Et|tt|tt|tL", "pp": 4, "schedule": "ZB-H2", "microbatches": 8,
              "global_batch": 8},
    "DualPipeV-uneven": {"layout": "Et|ttt|tt|tL", "pp": 2, "schedule": "DualPipeV",
                         "microbatches": 3, "global_batch": 6},
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(cmd, timeout=300):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p.stdout + p.stderr


def losses(path):
    """The losses of a metrics file's whole lines (a killed run may leave its last one
    half-written, without its newline: docs/pprun.md, Outputs)."""
    with open(path) as f:
        return [j["loss"] for j in (json.loads(l) for l in f if l.endswith("\n")) if "loss" in j]


class TrainInTorch(unittest.TestCase):
    plan = None  # set from the command line

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        c = PLANS[self.plan]
        self.batch = ["--microbatches", str(c["microbatches"]),
                      "--global-batch", str(c["global_batch"])]

    def file(self, name):
        return os.path.join(self.dir.name, name)

    def reference_losses(self):
        c = PLANS[self.plan]
        run([sys.executable, TRAINER, "--layout", c["layout"], "--reference", *MODEL, *self.batch,
             "--metrics", self.file("torch-reference.jsonl")])
        run([PPRUN, "--reference", "--layout", c["layout"], *MODEL, *self.batch, "--threads", "1",
             "--progress", "none", "--metrics", self.file("pprun-reference.jsonl")])
        return losses(self.file("torch-reference.jsonl")), losses(self.file("pprun-reference.jsonl"))

    def train(self, fmt):
        c = PLANS[self.plan]
        plan = self.file(f"{fmt}.csv")
        run([PPCOMPILE, "--layout", c["layout"], "--pp", str(c["pp"]), "--schedule", c["schedule"],
             "--microbatches", str(c["microbatches"]), "--emit", "csv", "-o", plan,
             *(["--compute-only"] if fmt == "compute_only" else [])])
        out = run([TORCHRUN, "--nnodes", "1", "--nproc_per_node", str(c["pp"]), "--master_addr",
                   "127.0.0.1", "--master_port", str(free_port()), TRAINER, "--layout", c["layout"],
                   "--csv", plan, "--csv-format", fmt, *MODEL, *self.batch,
                   "--metrics", self.file(f"{fmt}.jsonl")])
        self.assertIn(f"{plan} ({fmt}) on {c['pp']} ranks", out)
        with open(plan) as f:
            return losses(self.file(f"{fmt}.jsonl")), f.read()

    def assert_close(self, got, expected, what):
        self.assertEqual(len(got), STEPS, what)
        for step, (a, b) in enumerate(zip(got, expected), 1):
            self.assertLess(abs(a - b) / abs(b), 1e-5, f"{what}, step {step}: {a} vs {b}")

    def test_losses_equal_the_unpipelined_model(self):
        torch_ref, pprun_ref = self.reference_losses()
        self.assert_close(torch_ref, pprun_ref, "the unpipelined model in PyTorch vs pprun --reference")
        for fmt in ("compute_only", "compute_comms"):
            with self.subTest(csv_format=fmt):
                got, text = self.train(fmt)
                if self.plan.startswith("DualPipeV"):
                    self.assertIn("OVERLAP_F_B", text)
                if fmt == "compute_comms":
                    self.assertIn("SEND_F", text)
                self.assert_close(got, torch_ref, f"{self.plan} ({fmt}) in torch vs unpipelined")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in PLANS:
        sys.exit(f"usage: {sys.argv[0]} PLAN (one of {', '.join(PLANS)})")
    TrainInTorch.plan = sys.argv[1]
    unittest.main(argv=sys.argv[:1] + sys.argv[2:])
