#include "runtime/train/peers.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <set>
#include <vector>

namespace pprt {

void connect_peers(Transport& transport, const ppc::Plan& plan, int rank, const c10::Device& device,
                   std::chrono::milliseconds timeout) {
  std::set<int> peers;
  for (const ppc::Action& a : plan.order()[static_cast<size_t>(rank)])
    if (ppc::is_comm(a.kind)) peers.insert(a.peer);
  if (peers.empty()) return;
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  std::vector<at::Tensor> sent, received;  // (sized first: the ops point into them)
  for (size_t i = 0; i < peers.size(); ++i) {
    sent.push_back(at::full({1}, static_cast<double>(rank), options));
    received.push_back(at::full({1}, -1.0, options));
  }
  std::vector<P2POp> ops;
  size_t i = 0;
  for (int peer : peers) {
    ops.push_back(P2POp{P2POp::Kind::Send, peer, kConnectTag, &sent[i]});
    ops.push_back(P2POp{P2POp::Kind::Recv, peer, kConnectTag, &received[i]});
    ++i;
  }
  std::vector<std::unique_ptr<Work>> works = transport.post(ops, timeout);
  for (auto& w : works) w->wait(timeout);
  i = 0;
  for (int peer : peers) {
    const double got = received[i++].item<double>();
    if (got != peer)
      throw TransportError(fmt::format(
          "connecting to rank {}: received {} where that rank sends its number", peer, got));
  }
}

}  // namespace pprt
