// CommBackend: the engine's collectives on a comm::Communicator (shared memory within a host,
// TCP across hosts; the algorithms are chosen by the communication core). The communicator is
// owned by the backend and so used only by the engine thread, as comm requires.
#pragma once

#include <memory>

#include "cadre/comm/communicator.h"
#include "cadre/comm/hierarchical_allreduce.h"
#include "cadre/engine/backend.h"

namespace cadre::engine {

class CommBackend final : public CollectiveBackend {
 public:
  // The allreduce algorithm is read from the environment here, once (every rank must agree):
  //   CADRE_ALLREDUCE_ALGORITHM: auto (default; hierarchical when hosts hold several slots,
  //     else comm's choice by size), ring, halving_doubling, recursive_doubling or hierarchical.
  //     HOROVOD_HIERARCHICAL_ALLREDUCE=1 (Horovod's
  //     --hierarchical-allreduce) means hierarchical, =0 the flat ring.
  //   CADRE_HOST_GRID: for hierarchical, the hosts as a grid "AxB.." (DDL's multi-ring);
  //     default chosen from the number of hosts (comm::ChooseHostGrid).
  // For hierarchical it builds the comm::Hierarchy now, collectively. Throws cadre::Error
  // (kInvalidArgument naming the variable) for a bad value.
  explicit CommBackend(std::unique_ptr<comm::Communicator> comm);
  ~CommBackend() override;
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  comm::Communicator& communicator() { return *comm_; }
  // The allreduce algorithm in force: kHierarchical (auto resolved so, or asked for), or the
  // one asked for, kAuto leaving the choice to comm per call.
  comm::AllreduceAlgorithm algorithm() const { return algorithm_; }

  void AllgatherFixed(const void* in, void* out, size_t bytes) override;
  void Allgather(const void* in, void* out, const std::vector<size_t>& counts,
                 DataType dtype) override;
  void Allreduce(void* buffer, size_t count, DataType dtype, ReduceOp op) override;
  void Broadcast(void* buffer, size_t count, DataType dtype, int root) override;
  void Alltoall(const void* in, void* out, const std::vector<size_t>& send_counts,
                const std::vector<size_t>& recv_counts, DataType dtype) override;
  void ReduceScatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                     ReduceOp op) override;

 private:
  std::unique_ptr<comm::Communicator> comm_;
  comm::AllreduceAlgorithm algorithm_ = comm::AllreduceAlgorithm::kAuto;
  std::unique_ptr<comm::Hierarchy> hierarchy_;  // set when algorithm_ is kHierarchical
};

}  // namespace cadre::engine
