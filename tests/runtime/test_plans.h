// Compiled plans for the runtime's tests.
#pragma once

#include <sstream>
#include <string>

#include "compiler/compile.h"
#include "compiler/lower_send_recv.h"
#include "compiler/plan_json.h"
#include "compiler/verify.h"

namespace rttest {

// The plan ppcompile compiles for a model layout.
inline ppc::Plan compile(const std::string& layout, int pp, const std::string& schedule, int mbs) {
  ppc::CompileOptions o;
  o.layout = ppc::parse_layout(layout);
  o.has_model = true;
  o.pp = pp;
  o.schedule = schedule;
  o.microbatches = mbs;
  return ppc::lower_send_recv(ppc::compile(o));
}

// The plan as ppcompile --emit json writes it.
inline std::string plan_json(const ppc::Plan& plan) {
  std::ostringstream os;
  ppc::emit_json(plan, ppc::verify(plan), os);
  return os.str();
}

}  // namespace rttest
