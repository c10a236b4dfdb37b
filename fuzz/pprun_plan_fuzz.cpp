// pprun's checks before it runs anything (launch/plan_load.h): read the JSON plan, verify it
// (lowering it first if it holds only compute orders), check that pprun can run it, and the NCCL
// transport's check of the send/receive order. No LibTorch: plan_load.cpp is plain C++.
#include "fuzz/fuzz_target.h"
#include "runtime/launch/plan_load.h"

PP_FUZZ_TARGET(pprun_plan) {
  auto plan = ppfuzz::accepted([&] { return pprt::load_plan_text(input, "fuzz.json"); });
  if (!plan) return;
  ppfuzz::must_succeed("the FIFO-order check", [&] { (void)pprt::check_fifo_order(*plan); });
}
