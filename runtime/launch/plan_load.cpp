#include "runtime/launch/plan_load.h"

#include <fmt/format.h>

#include <map>
#include <tuple>

#include "compiler/dependencies.h"
#include "compiler/diagnostic.h"
#include "compiler/lower_send_recv.h"
#include "compiler/plan_json.h"
#include "compiler/read_file.h"
#include "compiler/verify.h"
#include "runtime/fail.h"

namespace pprt {

namespace {

void check_verified(const ppc::Plan& plan, const std::string& input) {
  const ppc::VerifyReport rep = ppc::verify(plan);
  if (rep.ok()) return;
  std::string msg = "the plan is not valid: " + rep.errors.front();
  if (rep.errors.size() > 1 || rep.truncated)
    msg += fmt::format(" (and {} more errors)", rep.errors.size() - 1);
  fail(input, msg);
}

}  // namespace

ppc::Plan load_plan(const std::string& path) {
  return load_plan_text(ppc::read_file(path), path);
}

ppc::Plan load_plan_text(std::string_view text, const std::string& input) {
  ppc::Plan plan = ppc::read_plan_json(text, input);
  // The compute order first: lowering and the checks of a lowered plan assume a sound one.
  ppc::Plan compute_only = plan;
  compute_only.lowered.clear();
  check_verified(compute_only, input);
  if (!plan.is_lowered()) plan = ppc::lower_send_recv(plan);
  check_verified(plan, input);
  check_runnable(plan, input);
  return plan;
}

void check_runnable(const ppc::Plan& plan, const std::string& input) {
  if (!plan.has_model)
    fail(input,
         "layout: the plan describes no model (it was compiled with --stages N); compile it with "
         "--layout or "
         "--layout-file");
  try {
    ppc::check_model(plan.layout);
  } catch (const ppc::UserError& e) {
    fail(input, "layout: " + e.message());
  }
}

std::optional<std::string> check_fifo_order(const ppc::Plan& plan) {
  using Msg =
      std::tuple<int, int, int>;  // sending stage, microbatch, 0 = activation / 1 = gradient
  std::map<std::pair<int, int>, std::vector<Msg>> sent, received;
  const auto& order = plan.order();
  for (int r = 0; r < plan.pp(); ++r) {
    for (const ppc::Action& a : order[static_cast<size_t>(r)]) {
      if (!ppc::is_comm(a.kind)) continue;
      const ppc::CommMatch m = ppc::comm_match(plan, a);
      switch (a.kind) {
        case ppc::ActionKind::SendF:
          sent[{r, m.rank}].push_back({a.stage, a.microbatch, 0});
          break;
        case ppc::ActionKind::SendB:
          sent[{r, m.rank}].push_back({a.stage, a.microbatch, 1});
          break;
        case ppc::ActionKind::RecvF:
          received[{m.rank, r}].push_back({m.stage, a.microbatch, 0});
          break;
        case ppc::ActionKind::RecvB:
          received[{m.rank, r}].push_back({m.stage, a.microbatch, 1});
          break;
        default:
          break;
      }
    }
  }
  for (const auto& [pair, msgs] : sent) {
    const auto& rec = received[pair];
    for (size_t k = 0; k < msgs.size() && k < rec.size(); ++k) {
      if (msgs[k] == rec[k]) continue;
      auto text = [](const Msg& m) {
        return fmt::format("{} of stage {} microbatch {}",
                           std::get<2>(m) ? "gradient" : "activation", std::get<0>(m),
                           std::get<1>(m));
      };
      return fmt::format(
          "rank {} sends the {} as its message {} to rank {}, which receives the {} there",
          pair.first, text(msgs[k]), k, pair.second, text(rec[k]));
    }
  }
  return std::nullopt;
}

}  // namespace pprt
