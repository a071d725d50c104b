// ReceiveOrder: the numbering of Device::RunStreaming's receives (device.h), kept alike by every
// device: receives are numbered in the order they join the batch, and each peer's are reported
// in the order they were queued, as its pair completes them.
// Not thread-safe: one per run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace cadre::transport {

class ReceiveOrder {
 public:
  explicit ReceiveOrder(int size) : peers_(static_cast<size_t>(size)) {}

  // `peer` joins the batch; its pair had completed `done` receives before.
  void Joined(int peer, uint64_t done) { peers_[peer].done_before = done; }
  // A receive from `peer` joined the batch.
  void Queued(int peer) { peers_[peer].numbers.push_back(next_++); }
  // The number of the next receive from `peer` to report, when its pair, having completed
  // `done` receives, has completed one not reported yet; it counts as reported.
  std::optional<size_t> NextCompleted(int peer, uint64_t done) {
    Peer& p = peers_[peer];
    if (done - p.done_before <= p.reported) return std::nullopt;
    return p.numbers[p.reported++];
  }

 private:
  struct Peer {
    std::vector<size_t> numbers;  // of its queued receives, in order
    size_t reported = 0;
    uint64_t done_before = 0;
  };
  std::vector<Peer> peers_;
  size_t next_ = 0;
};

}  // namespace cadre::transport
