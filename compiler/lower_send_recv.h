// Lowering: inserts the SEND/RECV actions of a compute-only plan.
//
// Lowering replays the compute orders in simulated time under the deadlock model of
// docs/deadlock-model.md (a send waits until its receiver posts the receive in its current batch)
// and places each transfer where both ranks meet:
//  - when a rank finishes a compute whose output another rank needs, it posts the SEND right
//    after that compute;
//  - the receiver posts the RECV in the batch it is in now if it is between computes, else in the
//    batch that follows its running compute (the sender waits for it, as it would at run time);
//  - a rank starts its next compute once its current batch is complete and the compute's inputs
//    are there (received, or produced by an earlier local compute).
// Every op is thus matched as soon as both sides are between computes, and the running computes
// always finish, so no batch waits forever: the plan is deadlock-free by construction (and the
// verifier checks it again). Stages on the same rank pass tensors locally: no SEND/RECV.
//
// Durations default to unit costs (F=1, B=2, I=W=1 per stage, communication free); a cost model
// (lower_for_model.h) makes the batches follow the real timing.
//
// Throws UserError if the compute order cannot run at all (ranks wait for each other's later
// actions); the message names the ranks, their actions and the cycle.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "compiler/plan.h"

namespace ppc {

struct LoweringCosts {
  std::function<double(const Action&, int rank)> compute;  // null = unit costs
  std::function<double(const Action& send)> transfer;      // null = free
  // Set when every duration (compute and transfer) is a whole number no larger than this:
  // lowering then uses a faster event queue. 0 = arbitrary durations. Unit costs (both functions
  // null) are whole numbers up to 3 by themselves.
  int max_integral_duration = 0;
  // Placement policy for a SEND whose receiver is computing. false (default): post it now; the
  // sender waits for the receiver's boundary. true: hold it back to the sender's next boundary
  // (the sender keeps computing) when the receiver's next compute does not need the data, or when
  // the receiver would then wait less than the sender would now. Neither is always faster under
  // blocking exchanges; lower_for_model (lower_for_model.h) tries both.
  bool defer_sends = false;
};

// A lowered order as lowering writes it, for a reader on another thread (lower_while_verifying,
// verify.h). Lowering sizes every rank's order to its final length before it writes, so actions
// never move: it says where the orders are, then publishes their sizes from time to time (the
// actions below a published size are final), then says that it has ended.
class LoweringFeed {
 public:
  enum class State : int { Pending, Writing, Done, Failed };

  // Reader. Waits (asleep, not spinning) until lowering has started writing or has failed.
  State wait_until_started() const;
  State state() const { return state_.load(std::memory_order_acquire); }
  // Counts the writer's changes (start, each publish, the end). A reader that found nothing new
  // since it read version() v sleeps in wait_for_change(v) until the writer changes something; a
  // change made after v was read wakes it at once.
  unsigned version() const { return version_.load(std::memory_order_acquire); }
  void wait_for_change(unsigned v) const { version_.wait(v, std::memory_order_acquire); }
  // Valid once the state is past Pending (and not Failed): per rank, where its order is, its final
  // length, and how many of its actions are written.
  const Action* data(int r) const { return data_[static_cast<size_t>(r)]; }
  size_t final_size(int r) const { return final_size_[static_cast<size_t>(r)]; }
  size_t written(int r) const { return written_[r].load(std::memory_order_acquire); }

  // Writer (lowering).
  void start(const std::vector<std::vector<Action>>& orders);
  void publish(const std::vector<std::vector<Action>>& orders);
  void end(bool ok) {
    state_.store(ok ? State::Done : State::Failed, std::memory_order_release);
    changed();
  }
  // Ends the feed as Failed, keeping what was written alive for the reader, which may still be
  // reading it: it is freed with the feed.
  void fail(std::vector<std::vector<Action>>&& written) {
    kept_ = std::move(written);
    end(false);
  }

 private:
  void changed() {
    version_.fetch_add(1, std::memory_order_release);
    version_.notify_all();
  }

  std::atomic<State> state_{State::Pending};
  std::atomic<unsigned> version_{0};
  std::vector<const Action*> data_;
  std::vector<size_t> final_size_;
  std::unique_ptr<std::atomic<size_t>[]> written_;
  std::vector<std::vector<Action>> kept_;
};

Plan lower_send_recv(const Plan& plan, const LoweringCosts& costs = {});
Plan lower_send_recv(Plan&& plan, const LoweringCosts& costs = {});
// lower_send_recv in place: sets plan.lowered (once it is complete) and changes nothing else of the
// plan, so that another thread may read the rest meanwhile. With a feed, lowering publishes the
// orders as it writes them and ends the feed (Done, or Failed when it throws).
void lower_in_place(Plan& plan, const LoweringCosts& costs = {}, LoweringFeed* feed = nullptr);

// Runs the compute order as lower_send_recv(plan) does, without building the lowered order:
// throws the UserError lowering would throw. The verifier's check that a compute order can run.
void check_compute_order_runs(const Plan& plan);

// Unit cost of an action: F=1, B=2, I=1, W=1, OVERLAP_F_B = F + B.
double unit_cost(const Action& a);

}  // namespace ppc
