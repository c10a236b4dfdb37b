"""ppcompile's CSV in torch 2.13: every plan it writes is read by torch's own code.

For one schedule of ppcompile (argument), over pp 1-8, the stages per rank it takes (1-3 for the
interleaved schedules) and microbatch counts that are and are not multiples of pp:
  - the compute-only CSV (`--emit csv --compute-only`) loads with
    _PipelineScheduleRuntime._load_csv(format="compute_only"): torch parses every cell, its
    _validate_schedule accepts the order and infers the placement ppcompile used, the order torch
    holds is the CSV's, and torch's own lowering of it (SEND/RECV) runs through torch's simulator
    _simulate_comms_compute without stalling;
  - the lowered CSV (`--emit csv`, with SEND/RECV) loads with format="compute_comms" (torch
    validates the compute actions among them) and ppcompile's own SEND/RECV order runs through
    _simulate_comms_compute without stalling.
DualPipeV's OVERLAP_F_B cells are among them. DualPipe (two model copies) is the exception torch
cannot express: its test checks that torch rejects it, and why (docs/schedules.md).

  PPCOMPILE=build/tools/ppcompile/ppcompile .venv/bin/python tests/torch/test_csv_into_torch.py ZB-H2
  ... test_csv_into_torch.py --registered "GPipe,1F1B,..."   (ctest: every schedule has a test)
"""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pipelining as P  # noqa: E402

SCHEDULE = None  # set from the command line


def configurations(schedule):
    stages_per_rank, placement = P.PPCOMPILE_SCHEDULES[schedule]
    for pp in range(1, 9):
        if schedule == "DualPipe" and pp % 2:
            continue  # DualPipe needs an even pp
        for v in stages_per_rank:
            for m in P.microbatch_counts(pp):
                if schedule == "DualPipe" and m < 2:
                    continue  # one microbatch per model copy at least
                yield pp, v, m, placement or P.plan_placement(pp, pp * v, m, schedule)


class OursIntoTorch(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def write(self, name, text):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def compile_csv(self, pp, v, m, *extra):
        return P.run_ppcompile("--stages", pp * v, "--pp", pp, "--schedule", SCHEDULE,
                               "--microbatches", m, "--emit", "csv", *extra)

    def test_compute_only_csv_loads_validates_and_lowers_in_torch(self):
        if SCHEDULE == "DualPipe":
            self.skipTest("two model copies: see test_dualpipe_is_rejected")
        n = 0
        for pp, v, m, placement in configurations(SCHEDULE):
            with self.subTest(pp=pp, stages_per_rank=v, microbatches=m):
                text = self.compile_csv(pp, v, m, "--compute-only")
                rt = P.load_into_runtime(self.write("plan.csv", text), "compute_only", pp, pp * v,
                                         placement, m)
                self.assertEqual(P.compute_order(rt.pipeline_order), P.csv_rows(text))
                expected_rank = {s: r for r in range(pp)
                                 for s in P.rank_stages(r, pp, pp * v, placement)}
                self.assertEqual(rt.stage_index_to_group_rank, expected_rank)
                P.simulate(rt.pipeline_order_with_comms, rt.stage_index_to_group_rank.__getitem__,
                           pp * v)
                n += 1
        self.assertGreater(n, 0)

    def test_lowered_csv_loads_and_its_sends_and_receives_simulate_in_torch(self):
        if SCHEDULE == "DualPipe":
            self.skipTest("two model copies: see test_dualpipe_is_rejected")
        n = 0
        for pp, v, m, placement in configurations(SCHEDULE):
            with self.subTest(pp=pp, stages_per_rank=v, microbatches=m):
                text = self.compile_csv(pp, v, m)
                rt = P.load_into_runtime(self.write("lowered.csv", text), "compute_comms", pp,
                                         pp * v, placement, m)
                self.assertEqual([[str(a) for a in rt.pipeline_order_with_comms[r]]
                                  for r in range(pp)], P.csv_rows(text))
                P.simulate(rt.pipeline_order_with_comms, rt.stage_index_to_group_rank.__getitem__,
                           pp * v)
                n += 1
        self.assertGreater(n, 0)

    def test_overlap_cells_reach_torch_as_two_actions(self):
        if SCHEDULE != "DualPipeV":
            self.skipTest("OVERLAP_F_B: DualPipeV (DualPipe's CSV does not load into torch)")
        text = self.compile_csv(2, 2, 4, "--compute-only")
        rt = P.load_into_runtime(self.write("plan.csv", text), "compute_only", 2, 4, "v", 4)
        overlapped = [a for r in rt.pipeline_order.values() for a in r
                      if a is not None and a.computation_type == P.S.OVERLAP_F_B]
        self.assertEqual(len(overlapped), text.count("OVERLAP_F_B"))
        self.assertGreater(len(overlapped), 0)
        for a in overlapped:
            self.assertEqual([s.computation_type for s in a.sub_actions],
                             [P.S.FORWARD, P.S.FULL_BACKWARD])

    def test_dualpipe_is_rejected(self):
        if SCHEDULE != "DualPipe":
            self.skipTest("DualPipe only")
        # Two copies of the model on V placement: copy 0 takes microbatches [0, m/2) through
        # stages [0, pp), copy 1 the rest through [pp, 2pp). Torch knows one model whose every
        # microbatch crosses every stage, so its _validate_schedule counts half the forwards.
        text = self.compile_csv(4, 1, 8, "--compute-only")
        with self.assertRaisesRegex(AssertionError, r"Got 4 \S*FORWARD microbatches for stage 0, expected 8"):
            P.load_into_runtime(self.write("plan.csv", text), "compute_only", 4, 8, "v", 8)


def check_registered(registered):
    """ctest registers one test per schedule: every schedule of ppcompile must be among them."""
    listed = [line.split()[0] for line in P.run_ppcompile("--list-schedules").splitlines()[1:]]
    missing = set(listed) - set(registered.split(","))
    unknown = set(listed) - set(P.PPCOMPILE_SCHEDULES)
    if missing or unknown:
        print(f"schedules of ppcompile without a ctest registration: {sorted(missing)}; "
              f"unknown to tests/torch/pipelining.py: {sorted(unknown)}")
        return 1
    print(f"every schedule of ppcompile has a test: {', '.join(listed)}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--registered":
        sys.exit(check_registered(sys.argv[2]))
    if len(sys.argv) < 2 or sys.argv[1] not in P.PPCOMPILE_SCHEDULES:
        sys.exit(f"usage: {sys.argv[0]} SCHEDULE (one of {', '.join(P.PPCOMPILE_SCHEDULES)})")
    SCHEDULE = sys.argv[1]
    unittest.main(argv=sys.argv[:1] + sys.argv[2:])
