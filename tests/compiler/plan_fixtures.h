// Plans and cost models that several compiler tests share.
#pragma once

#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/lower_send_recv.h"
#include "compiler/schedule.h"

namespace pptest {

// The rows of the schedule table whose order a generator fills: every schedule but Auto, whose
// order the search synthesizes from the costs (synthesize_test.cpp).
inline std::vector<ppc::ScheduleInfo> generated_schedules() {
  std::vector<ppc::ScheduleInfo> out;
  for (const ppc::ScheduleInfo& s : ppc::all_schedules())
    if (s.generate) out.push_back(s);
  return out;
}

// The plan `schedule` generates over pp * vpp generic stages: its compute order, lowered if asked.
inline ppc::Plan generated_plan(const std::string& schedule, int pp, int vpp, int m,
                                bool lower = false) {
  ppc::CompileOptions o;
  o.layout = ppc::generic_layout(pp * vpp);
  o.pp = pp;
  o.schedule = schedule;
  o.microbatches = m;
  return lower ? ppc::lower_send_recv(ppc::compile(o)) : ppc::compile(o);
}

// A cost model with every term set: unequal F, B and W, activations, parameters, message latency
// and bandwidth, and a partial F/B overlap.
inline ppc::CostModel mixed_costs() {
  ppc::CostFlags f;
  f.f = 1;
  f.b = 2.3;
  f.w = 0.9;
  f.activation = 3;
  f.params = 5;
  f.latency = 0.07;
  f.bandwidth = 30;
  f.message_bytes = 100;
  f.overlap = 0.3;
  return ppc::cost_model_from_flags(f);
}

}  // namespace pptest
