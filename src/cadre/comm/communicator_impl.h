// CommunicatorImpl: the one implementation of Communicator (internal to comm/).
//
// Transports, decided at creation from the topology:
// - every rank on one host and use_shm: one ShmGroup over all ranks, no sockets at all;
// - otherwise: a full TCP mesh (TcpDevice), or with shm_pairs, where this host holds several
//   ranks, TCP to the other hosts and shared-memory pairs inside this one (MixedDevice). Allreduce
//   across hosts may go hierarchical through Local() (shared memory inside a host) and Cross()
//   (TCP between hosts).
// Rendezvous keys live under "cadre-comm/<generation>/" of the caller's store, where the
// generation counts the communicators this rank created on that store, so creating several
// communicators on one store in the same order on every rank never mixes their keys.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/comm/communicator.h"
#include "cadre/transport/device.h"
#include "cadre/transport/shm/group.h"

namespace cadre::comm {

class Hierarchy;

// What a communicator and the subgroups made from it (the hierarchical allreduce's levels) learn
// of a failure together.
struct FailureFamily {
  // A failure in the family named its cause from what the peers said or did
  // (Device::failure_explained); the failures it causes in the other levels carry it.
  std::atomic<bool> explained{false};
  // The store gave no answer to a failure exchange in time: later ones do not wait for it again.
  std::atomic<bool> store_silent{false};
};

class CommunicatorImpl final : public Communicator {
 public:
  explicit CommunicatorImpl(CommunicatorOptions options);
  ~CommunicatorImpl() override;

  const Topology& topology() const override { return topology_; }
  Duration timeout() const override { return options_.timeout; }
  std::unique_ptr<Communicator> Subgroup(const std::vector<int>& ranks,
                                         const std::string& name) override;
  Communicator& Local() override;
  Communicator& Cross() override;

  // communicator_collectives.cc
  void CheckUsable() const override;
  bool HierarchicalPossible() const override;
  bool StreamsPieces() const override;
  void RunAllreduce(const AllreduceOptions& options) override;
  void RunStreamedAllreduce(const StreamedAllreduceOptions& options) override;
  void RunBroadcast(const BroadcastOptions& options) override;
  void RunAllgather(const AllgatherOptions& options) override;
  void RunReduceScatter(const ReduceScatterOptions& options) override;
  void RunAlltoall(const AlltoallOptions& options) override;
  void RunBarrier(std::optional<Duration> timeout) override;

  // Null when not in use (see the header comment).
  transport::shm::ShmGroup* shm() const { return shm_.get(); }
  transport::Device* tcp() const { return tcp_.get(); }
  bool use_shm() const { return options_.use_shm; }

  // Marks the communicator broken, makes peers fail fast (closes connections, aborts the shared
  // group) and throws Error(status). `in_subgroup`: the failure came from one of this
  // communicator's subgroups (the hierarchical allreduce's levels), whose message names this
  // rank already.
  [[noreturn]] void Fail(const Status& status, bool in_subgroup = false);
  // Closes this communicator's transports, telling the peers `why` where the transport can (TCP
  // notices; the shared-memory group's abort word, with `culprit`, a rank or -1). Fail's, and
  // for the levels of a hierarchy that failed.
  void ShutdownTransports(const Status& why, bool explained, int culprit);
  Deadline MakeDeadline(std::optional<Duration> timeout) const {
    return Deadline(timeout.value_or(options_.timeout));
  }
  const std::string& name(int rank) const { return names_[rank]; }
  // The collective this rank is running over TCP (collectives.cc), for failure messages.
  void set_collective(std::string description) { collective_ = std::move(description); }

 private:
  void Rendezvous();

  CommunicatorOptions options_;
  std::shared_ptr<store::Store> store_;  // prefixed for this communicator
  Topology topology_;
  std::vector<std::string> names_;
  std::unique_ptr<transport::shm::ShmGroup> shm_;
  std::unique_ptr<transport::Device> tcp_;  // point to point: TcpDevice or MixedDevice (above)
  std::unique_ptr<Communicator> local_;
  std::unique_ptr<Communicator> cross_;
  std::unique_ptr<Hierarchy> hierarchy_;  // for kHierarchical, made on first use
  bool warned_not_hierarchical_ = false;
  Status broken_;
  std::string collective_;
  std::shared_ptr<FailureFamily> family_ = std::make_shared<FailureFamily>();
};

}  // namespace cadre::comm
