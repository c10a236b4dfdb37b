// Helpers of the visualization tests: compiled, verified and simulated plans, and a real XML
// parser (expat) that returns every element with its attributes.
#pragma once

#include <expat.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/lower_for_model.h"
#include "compiler/lower_send_recv.h"
#include "compiler/simulate.h"
#include "compiler/verify.h"

namespace pptest {

struct Simulated {
  ppc::Plan plan;
  ppc::VerifyReport report;
  ppc::Simulation sim;
};

// compile -> lower -> verify -> simulate, with unit costs (or `cost`).
inline Simulated simulated(const std::string& schedule, int stages, int pp, int microbatches,
                           const ppc::CostModel& cost = {}) {
  ppc::CompileOptions co;
  co.layout = ppc::generic_layout(stages);
  co.pp = pp;
  co.schedule = schedule;
  co.microbatches = microbatches;
  Simulated s;
  s.plan = ppc::compile(co);
  s.plan = ppc::lower_send_recv(s.plan, ppc::lowering_costs(s.plan, cost));
  s.report = ppc::verify(s.plan);
  EXPECT_TRUE(s.report.ok()) << schedule;
  s.sim = ppc::simulate(s.plan, cost);
  return s;
}

// Plans covering every action kind and placement: F/B, I/W, OVERLAP_F_B, loop and V placement,
// vpp 1, 2 and 4, two model copies.
struct PlanCase {
  const char* schedule;
  int stages, pp, microbatches;
};
inline const std::vector<PlanCase>& plan_cases() {
  static const std::vector<PlanCase> cases = {
      {"1F1B", 2, 2, 4},
      {"GPipe", 4, 4, 4},
      {"Interleaved1F1B", 8, 4, 8},
      {"Interleaved1F1B", 16, 4, 8},
      {"LoopedBFS", 8, 4, 4},
      {"ZB-H1", 4, 4, 8},
      {"ZB-H2", 4, 4, 8},
      {"InterleavedZeroBubble", 8, 4, 8},
      {"ZBVZeroBubble", 8, 4, 8},
      {"DualPipeV", 8, 4, 8},
      {"DualPipe", 4, 4, 8},
      {"1F1B", 1, 1, 3},
  };
  return cases;
}
inline std::string case_name(const PlanCase& c) {
  return std::string(c.schedule) + " stages " + std::to_string(c.stages) + " pp " +
         std::to_string(c.pp) + " m " + std::to_string(c.microbatches);
}

struct XmlElement {
  std::string name;
  std::map<std::string, std::string> attrs;
  std::string text;  // character data directly inside (not in children)
  bool has(const std::string& a) const { return attrs.count(a) > 0; }
  const std::string& at(const std::string& a) const { return attrs.at(a); }
};

struct XmlDoc {
  bool ok = false;
  std::string error;                 // "line L: message" when not well-formed
  std::vector<XmlElement> elements;  // in document order
};

// Parses `text` with expat. Not well-formed input gives ok = false and the parser's message.
inline XmlDoc parse_xml(const std::string& text) {
  struct State {
    XmlDoc doc;
    std::vector<size_t> open;
  } st;
  XML_Parser p = XML_ParserCreate("UTF-8");
  XML_SetUserData(p, &st);
  XML_SetElementHandler(
      p,
      [](void* ud, const XML_Char* name, const XML_Char** atts) {
        auto* s = static_cast<State*>(ud);
        XmlElement e;
        e.name = name;
        for (int i = 0; atts[i]; i += 2) e.attrs[atts[i]] = atts[i + 1];
        s->open.push_back(s->doc.elements.size());
        s->doc.elements.push_back(std::move(e));
      },
      [](void* ud, const XML_Char*) { static_cast<State*>(ud)->open.pop_back(); });
  XML_SetCharacterDataHandler(p, [](void* ud, const XML_Char* s, int len) {
    auto* st = static_cast<State*>(ud);
    if (!st->open.empty())
      st->doc.elements[st->open.back()].text.append(s, static_cast<size_t>(len));
  });
  if (XML_Parse(p, text.data(), static_cast<int>(text.size()), 1) == XML_STATUS_ERROR) {
    st.doc.error = "line " + std::to_string(XML_GetCurrentLineNumber(p)) + ": " +
                   XML_ErrorString(XML_GetErrorCode(p));
  } else {
    st.doc.ok = true;
  }
  XML_ParserFree(p);
  return st.doc;
}

}  // namespace pptest
