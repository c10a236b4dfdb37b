"""Shared helpers of the tests that hold ppcompile against the real torch.distributed.pipelining.

The tests run on PyTorch 2.13 (the project's .venv, or the torch of PP_PYTHON) and use its own
code: the schedule classes, _PipelineScheduleRuntime._load_csv, _validate_schedule and
_simulate_comms_compute. A schedule object needs PipelineStage objects, and those need a process
group of the pipeline's size: torch's "fake" process group (torch.testing's FakeProcessGroup, a
real c10d backend that hallucinates communication) gives one in a single process. Nothing is
communicated in these tests; the end-to-end test (test_train_in_torch.py) uses Gloo processes.

Environment: PPCOMPILE (the ppcompile binary; ctest sets it).
"""
import contextlib
import csv
import io
import json
import os
import subprocess

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining import schedules as S
from torch.testing._internal.distributed.fake_pg import FakeStore

PPCOMPILE = os.environ.get("PPCOMPILE", "build/tools/ppcompile/ppcompile")

# The actions torch adds for FSDP and gradient reduction; ppcompile's plans have none of them.
FSDP_AND_REDUCE = {"UNSHARD", "RESHARD", "REDUCE_GRAD"}

# ppcompile's schedules: (stages per rank it takes, placement).
PPCOMPILE_SCHEDULES = {
    "GPipe": ([1], "loop"),
    "1F1B": ([1], "loop"),
    "Interleaved1F1B": ([1, 2, 3], "loop"),
    "LoopedBFS": ([1, 2, 3], "loop"),
    "ZB-H1": ([1], "loop"),
    "ZB-H2": ([1], "loop"),
    "InterleavedZeroBubble": ([1, 2, 3], "loop"),
    "ZBVZeroBubble": ([2], "v"),
    "DualPipeV": ([2], "v"),
    "DualPipe": ([1], "v"),  # two model copies on V placement (docs/schedules.md)
    "Combined1F1B": ([1], "loop"),  # 1F1B's steady state as OVERLAP_F_B pairs
    "Auto": ([1, 2], None),  # synthesized: the plan says which placement it chose (plan_placement)
}

# Every schedule class torch 2.13 has, with ppcompile's name for the same schedule and the stages
# per rank it takes (_ScheduleForwardOnly is inference only and has no order).
TORCH_SCHEDULES = {
    "ScheduleGPipe": ("GPipe", [1]),
    "Schedule1F1B": ("1F1B", [1]),
    "ScheduleInterleaved1F1B": ("Interleaved1F1B", [1, 2, 3]),
    "ScheduleLoopedBFS": ("LoopedBFS", [1, 2, 3]),
    "ScheduleInterleavedZeroBubble": ("InterleavedZeroBubble", [1, 2, 3]),
    "ScheduleZBVZeroBubble": ("ZBVZeroBubble", [2]),
    "ScheduleDualPipeV": ("DualPipeV", [2]),
}


def microbatch_counts(pp):
    """The microbatch counts the grids use on `pp` ranks: every count up to 2pp + 2 (fewer than
    pp, one and two rounds of the interleaved schedules, DualPipeV's 2pp), then larger multiples
    of pp and counts that are not (up to five rounds)."""
    small = range(1, 2 * pp + 3)
    large = [3 * pp, 3 * pp + 1, 4 * pp, 4 * pp + 3, 5 * pp + 2]
    return sorted(set(small) | set(large))


def run_ppcompile(*args):
    """ppcompile's standard output; raises AssertionError with its message if it fails."""
    p = subprocess.run([PPCOMPILE, *map(str, args)], capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError(f"ppcompile {' '.join(map(str, args))} exited {p.returncode}: "
                             f"{p.stderr.strip()}")
    return p.stdout


def plan_placement(pp, stages, m, schedule="Auto"):
    """The placement ("loop" or "v") of ppcompile's plan for the configuration, from its JSON."""
    return json.loads(run_ppcompile("--stages", stages, "--pp", pp, "--schedule", schedule,
                                    "--microbatches", m, "--emit", "json"))["placement"]


def csv_rows(text):
    """The cells of a CSV text, row by row, empty cells dropped."""
    return [[c for c in row if c.strip()] for row in csv.reader(io.StringIO(text))]


def ppcompile_order(schedule, pp, stages, m):
    """ppcompile's compute order for the configuration, one list of action strings per rank."""
    return csv_rows(run_ppcompile("--stages", stages, "--pp", pp, "--schedule", schedule,
                                  "--microbatches", m, "--emit", "csv", "--compute-only"))


def compute_order(pipeline_order):
    """A torch schedule IR as action strings per rank: idle slots (None) and the FSDP / gradient
    reduction actions torch adds dropped, every other action as torch prints it."""
    return [[str(a) for a in pipeline_order[r]
             if a is not None and a.computation_type.value not in FSDP_AND_REDUCE]
            for r in sorted(pipeline_order)]


def rank_stages(rank, pp, num_stages, placement):
    """The stage indices `rank` holds: loop placement (s on s mod pp) or V (r and 2pp-1-r)."""
    if placement == "v":
        return [rank, num_stages - 1 - rank]
    return list(range(rank, num_stages, pp))


@contextlib.contextmanager
def fake_world(pp, rank=0):
    """A process group of `pp` ranks in this process, this process being `rank`."""
    dist.init_process_group("fake", rank=rank, world_size=pp, store=FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


def stages_of(rank, pp, num_stages, placement):
    """Real PipelineStage objects for the stages `rank` holds (a tiny module each: nothing runs)."""
    return [PipelineStage(torch.nn.Linear(1, 1), s, num_stages, torch.device("cpu"))
            for s in rank_stages(rank, pp, num_stages, placement)]


def torch_schedule(class_name, pp, stages_per_rank, m):
    """torch's schedule object for the configuration (rank 0's view; every rank computes the
    whole pipeline_order). Raises what torch raises for a configuration it rejects."""
    cls = getattr(S, class_name)
    placement = "v" if cls in (S.ScheduleZBVZeroBubble, S.ScheduleDualPipeV) else "loop"
    with fake_world(pp):
        stages = stages_of(0, pp, pp * stages_per_rank, placement)
        if issubclass(cls, S.PipelineScheduleSingle):
            return cls(stages[0], m)
        return cls(stages, m)


def load_into_runtime(path, fmt, pp, num_stages, placement, m):
    """torch's _PipelineScheduleRuntime (rank 0's) with the CSV at `path` loaded by _load_csv in
    `fmt` ("compute_only" or "compute_comms"): torch parses every cell, checks the order with
    _validate_schedule and infers the stage-to-rank mapping; for compute_only it also lowers the
    order with its own passes (UNSHARD/RESHARD, REDUCE_GRAD, SEND/RECV)."""
    with fake_world(pp):
        runtime = S._PipelineScheduleRuntime(stages_of(0, pp, num_stages, placement), m)
        runtime._load_csv(path, format=fmt)
        return runtime


def simulate(order_with_comms, stage_to_rank, num_stages):
    """torch's _simulate_comms_compute over a lowered order, which raises if the order stalls (a
    RECV before its SEND, a compute before its input). The simulator knows compute and SEND/RECV
    only: the FSDP and gradient-reduction actions are left out (they wait on nothing in it), and an
    OVERLAP_F_B cell is given as its two actions in order, as torch's runtime performs them."""
    flat = {}
    for rank, actions in order_with_comms.items():
        flat[rank] = []
        for a in actions:
            if a is None or a.computation_type.value in FSDP_AND_REDUCE:
                continue
            flat[rank].extend(a.sub_actions if a.computation_type == S.OVERLAP_F_B else [a])
    return S._simulate_comms_compute(flat, stage_to_rank, num_stages)
