// MixedDevice: point-to-point transfers over shared memory to the peers on this host and over TCP
// to the others, for flat collectives over a group that spans hosts with several ranks each.
//
// Connect() builds a TcpDevice (tcp/device.h) connected to the ranks of other hosts only, and a
// ShmMesh (shm/mesh.h) among this host's ranks: one ShmPair per same-host peer. Each Transfer
// goes by its peer's route; Run and RunStreaming keep Device's contract whatever the mix:
// messages between two ranks arrive in order, a length or collective that differs from the
// receiver's fails with kMismatch naming the peer, a timeout names every peer still owed bytes.
//
// Progress: one thread moves every pair. With nothing to move it yields for a moment when only
// same-host peers are owed bytes (a peer on another core answers within microseconds), then sleeps
// in poll(2) on the TCP sockets, this rank's doorbell (rung by same-host peers that moved bytes
// while it slept) and the pidfds of the same-host peers it waits for. A same-host peer that dies
// (its process exits) or closes its end (Shutdown, destruction, as a socket closes) while this
// rank waits for it fails the run naming it, at once: with kIo when it died, with its own code
// and reason when it failed and said why (Shutdown(why, ...), as TCP's failure notices).
//
// Thread-safety: one thread calls Run at a time (Device's).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/store/store.h"
#include "cadre/transport/device.h"
#include "cadre/transport/shm/mesh.h"
#include "cadre/transport/shm/pair.h"
#include "cadre/transport/tcp/device.h"

namespace cadre::transport::mixed {

struct ConnectOptions {
  // Rank, size, token, names, addresses as for a TcpDevice; `peers` is set here (the ranks of
  // other hosts).
  tcp::ConnectOptions tcp;
  // The ranks on this rank's host, this one included (any order). Every rank of a host must
  // list the same ones.
  std::vector<int> local_ranks;
  size_t channel_bytes = shm::kDefaultChannelBytes;  // each direction's ring (ShmMesh)
};

class MixedDevice final : public Device {
 public:
  static Status Connect(store::Store& store, const ConnectOptions& options, Deadline deadline,
                        std::unique_ptr<MixedDevice>* out);
  ~MixedDevice() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Pair& pair(int peer) override;
  // Whether transfers to `peer` go over shared memory.
  bool on_host(int peer) const { return shm_pairs_[peer] != nullptr; }
  Status Run(std::span<const Transfer> transfers, Deadline deadline) override;
  Status RunStreaming(std::span<const Transfer> transfers, Deadline deadline,
                      const OnReceived& on_received) override;
  using Device::Shutdown;
  void Shutdown(const Status& why, bool explained) override;
  bool failure_explained() const override { return explained_; }
  void BeginCollective(uint32_t digest, std::string description) override;

 private:
  MixedDevice() = default;
  // As TcpDevice::Fail; `failed`: the TCP pair whose transfer failed.
  Status Fail(Status status, tcp::TcpPair* failed = nullptr);
  tcp::TcpPair* TcpPairOf(int peer) const { return tcp_ ? tcp_->tcp_pair(peer) : nullptr; }
  void ClearPairs();
  // A same-host peer owed bytes that is gone (its end closed, its process exited): its error.
  Status GonePeer(const std::vector<int>& active);
  Status Timeout(const std::vector<int>& active);

  int rank_ = 0;
  int size_ = 1;
  std::unique_ptr<tcp::TcpDevice> tcp_;  // null when every peer is on this host
  std::unique_ptr<shm::ShmMesh> mesh_;
  std::vector<std::unique_ptr<shm::ShmPair>> shm_pairs_;  // by rank; null unless on this host
  Status broken_;
  bool explained_ = false;
  bool gone_explained_ = false;  // GonePeer's last error names its cause
  std::string collective_;       // BeginCollective's description; the shm pairs point at it
};

}  // namespace cadre::transport::mixed
