"""torch 2.13's schedules in ppcompile: every order torch generates imports, verifies, and equals
ppcompile's own order for the same configuration.

For one schedule class of torch.distributed.pipelining (argument), over pp 1-8, the stages per
rank it takes (1-3 for the looped classes, 2 for the V ones) and microbatch counts that are and
are not multiples of pp, wherever torch accepts the configuration:
  - torch's pipeline_order, written as its _dump_csv writes it (compute only: idle cells, and the
    REDUCE_GRAD cells the single-stage classes add), imports with `ppcompile --from-csv` and
    verifies; so does _dump_csv(format="compute_comms") of the multi-stage classes: torch's own
    lowering, with its UNSHARD, RESHARD, REDUCE_GRAD and SEND/RECV cells;
  - torch's compute order equals ppcompile's for the same schedule, pp, stages and microbatches
    (and ScheduleInterleavedZeroBubble with one stage per rank equals ppcompile's ZB-H1).
Where torch rejects a configuration, ppcompile still compiles a verified plan (docs/schedules.md,
"Differences from PyTorch"). The one difference in torch's orders is a bug in
Schedule1F1B._get_pipeline_order (test_1f1b_last_rank_is_off_by_one below).

  PPCOMPILE=build/tools/ppcompile/ppcompile .venv/bin/python tests/torch/test_csv_from_torch.py ScheduleZBVZeroBubble
"""
import csv
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pipelining as P  # noqa: E402

CLASS = None  # set from the command line


def configurations():
    ours, stages_per_rank = P.TORCH_SCHEDULES[CLASS]
    for pp in range(1, 9):
        for v in stages_per_rank:
            for m in P.microbatch_counts(pp):
                yield pp, v, m


def dump_compute_only(schedule, path):
    """torch's compute-only CSV of `schedule`: _dump_csv(format="compute_only") where the class
    has it, else the same csv.writer rows (PipelineScheduleSingle has no _dump_csv)."""
    if isinstance(schedule, P.S._PipelineScheduleRuntime):
        schedule._dump_csv(path, format="compute_only")
        return
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        for rank in schedule.pipeline_order:
            writer.writerow(schedule.pipeline_order[rank])


class TorchIntoOurs(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def import_and_verify(self, path):
        """ppcompile --from-csv: parses, infers the placement and microbatches, verifies (exit 2 and
        the verifier's message otherwise), lowers and writes the plan's statistics."""
        return P.run_ppcompile("--from-csv", path, "--emit", "stats")

    def test_torch_orders_import_verify_and_equal_ours(self):
        ours, _ = P.TORCH_SCHEDULES[CLASS]
        compared = rejected = 0
        for pp, v, m in configurations():
            with self.subTest(pp=pp, stages_per_rank=v, microbatches=m):
                try:
                    schedule = P.torch_schedule(CLASS, pp, v, m)
                except ValueError as e:
                    # torch rejects it: ppcompile compiles and verifies a plan all the same
                    P.ppcompile_order(ours, pp, pp * v, m)
                    rejected += 1
                    self.assertRegex(str(e), "microbatches")
                    continue
                path = os.path.join(self.dir.name, "torch.csv")
                dump_compute_only(schedule, path)
                order = P.compute_order(schedule.pipeline_order)
                if CLASS == "Schedule1F1B":
                    self.check_1f1b(schedule, path, pp, m)
                else:
                    self.import_and_verify(path)
                    self.assertEqual(order, P.ppcompile_order(ours, pp, pp * v, m))
                    if CLASS == "ScheduleInterleavedZeroBubble" and v == 1:  # ZB1P on one stage
                        self.assertEqual(order, P.ppcompile_order("ZB-H1", pp, pp, m))
                if isinstance(schedule, P.S._PipelineScheduleRuntime):
                    lowered = os.path.join(self.dir.name, "torch-lowered.csv")
                    schedule._dump_csv(lowered, format="compute_comms")
                    self.import_and_verify(lowered)
                compared += 1
        self.assertGreater(compared, 0)
        print(f"{CLASS}: {compared} configurations compared with ppcompile's, {rejected} rejected by torch",
              file=sys.stderr)

    def test_torch_runtime_cells_are_checked_and_dropped(self):
        """UNSHARD, RESHARD and REDUCE_GRAD: torch's lowering adds them (FSDP and gradient
        reduction). ppcompile accepts them on the row of their stage's rank and drops them: the
        import's compute order is the compute-only CSV's. Anywhere else they are an error."""
        if CLASS in ("ScheduleGPipe", "Schedule1F1B"):
            self.skipTest("single-stage classes: no lowering (their REDUCE_GRAD cells are imported "
                          "by the grid test)")
        ours, stages_per_rank = P.TORCH_SCHEDULES[CLASS]
        pp, v = 2, max(stages_per_rank)
        schedule = P.torch_schedule(CLASS, pp, v, 2 * pp * v)
        lowered = os.path.join(self.dir.name, "lowered.csv")
        schedule._dump_csv(lowered, format="compute_comms")
        with open(lowered) as f:
            text = f.read()
        for token in ("UNSHARD", "RESHARD", "REDUCE_GRAD"):
            self.assertIn(token, text)
        compute_only = os.path.join(self.dir.name, "compute.csv")
        dump_compute_only(schedule, compute_only)
        plan = P.csv_rows(P.run_ppcompile("--from-csv", lowered, "--emit", "csv", "--compute-only"))
        self.assertEqual(plan, P.csv_rows(P.run_ppcompile("--from-csv", compute_only, "--emit",
                                                          "csv", "--compute-only")))
        rows = text.splitlines()
        rows[0] += ",1REDUCE_GRAD"  # stage 1 is rank 1's
        moved = os.path.join(self.dir.name, "moved.csv")
        with open(moved, "w") as f:
            f.write("\n".join(rows) + "\n")
        with self.assertRaisesRegex(AssertionError, "stage 1 is on rank 1, not on rank 0"):
            P.run_ppcompile("--from-csv", moved)

    def check_1f1b(self, schedule, path, pp, m):
        """Schedule1F1B: its _get_pipeline_order (the IR torch exposes; its runtime loop in
        _step_microbatches does not read it) numbers the last rank's forwards 1..m instead of
        0..m-1 (its steady-state loop increments the microbatch before the first forward when
        there is no warm-up). Every other rank equals ours; torch's own _validate_schedule and
        ppcompile's verifier both reject the last rank's row."""
        order = P.compute_order(schedule.pipeline_order)
        ours = P.ppcompile_order("1F1B", pp, pp, m)
        self.assertEqual(order[:-1], ours[:-1])
        shifted = [f"{pp - 1}F{int(a.split('F')[1]) + 1}" if "F" in a else a for a in ours[-1]]
        self.assertEqual(order[-1], shifted)
        with self.assertRaisesRegex(AssertionError, f"stage {pp - 1}"):
            P.S._validate_schedule(schedule.pipeline_order, pp, pp, m)
        with self.assertRaisesRegex(AssertionError, f"stage {pp - 1} microbatch 0 has 0 forwards"):
            self.import_and_verify(path)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in P.TORCH_SCHEDULES:
        sys.exit(f"usage: {sys.argv[0]} CLASS (one of {', '.join(P.TORCH_SCHEDULES)})")
    CLASS = sys.argv[1]
    unittest.main(argv=sys.argv[:1] + sys.argv[2:])
