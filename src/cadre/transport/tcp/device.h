// TcpDevice: a full mesh of authenticated TCP pairs between the ranks of a group.
//
// Connect() rendezvouses through the store: every rank listens, publishes "tcp-addr/<rank>"
// (host:port), connects to every lower rank and, at the same time, accepts every higher one.
// Each connection starts with the job-token handshake (net/handshake.h) carrying the identity
// "cadre rank R of N". Accepted connections are authenticated concurrently (tcp/acceptor.h),
// each within handshake_timeout: one that fails the handshake (wrong token, garbage, another
// version) or says nothing is dropped and logged alone, and never delays a genuine peer; the
// rank keeps accepting until its peers arrive or the deadline passes. An empty token is refused
// (kInvalidArgument) when there is anyone to connect to.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/net/socket.h"
#include "cadre/store/store.h"
#include "cadre/transport/device.h"
#include "cadre/transport/tcp/pair.h"

namespace cadre::transport::tcp {

struct ConnectOptions {
  int rank = 0;
  int size = 1;
  std::string token;
  std::vector<std::string> names;  // names[r] describes rank r in errors ("rank 3 (host a)")
  std::string bind_address;        // listen here; empty = every IPv4 address
  std::string advertise_address;   // what peers connect to; empty = 127.0.0.1
  // A hosts(5) file consulted for the addresses above and the peers' before getaddrinfo
  // (net/resolver.h; the learner contract's CADRE_HOSTS); empty: none.
  std::string hosts_file;
  // The ranks to connect to; empty: every other rank (a full mesh). Every rank must list its
  // peers consistently (r lists s exactly when s lists r). A transfer to a rank left out fails
  // with kInternal.
  std::vector<int> peers;
  // How long one accepted connection may take to finish the handshake (from its accept), and how
  // many may be mid-handshake at once (the oldest is dropped beyond that).
  Duration handshake_timeout = std::chrono::seconds(10);
  size_t max_pending = 64;
};

class TcpDevice final : public Device {
 public:
  static Status Connect(store::Store& store, const ConnectOptions& options, Deadline deadline,
                        std::unique_ptr<TcpDevice>* out);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Pair& pair(int peer) override { return *pairs_[peer]; }
  // The connection to `peer`; null for this rank and ranks left out of ConnectOptions::peers.
  TcpPair* tcp_pair(int peer) const { return pairs_[peer].get(); }
  Status Run(std::span<const Transfer> transfers, Deadline deadline) override;
  Status RunStreaming(std::span<const Transfer> transfers, Deadline deadline,
                      const OnReceived& on_received) override;
  using Device::Shutdown;
  void Shutdown(const Status& why, bool explained) override;
  bool failure_explained() const override { return explained_; }
  void BeginCollective(uint32_t digest, std::string description) override;

 private:
  TcpDevice() = default;
  // Breaks the device with `status`; a kIo failure of a transfer with `failed` is first explained
  // from the ends of the connections (ExplainBrokenConnection). Returns the device's error.
  Status Fail(Status status, TcpPair* failed = nullptr);

  int rank_ = 0;
  int size_ = 1;
  std::vector<std::unique_ptr<TcpPair>> pairs_;  // null at rank_
  Status broken_;
  bool explained_ = false;
  std::string collective_;  // BeginCollective's description; the pairs point at it
};

}  // namespace cadre::transport::tcp
