// CommBackend: the engine's collectives on a comm::Communicator (shared memory within a host,
// TCP across hosts; the algorithms are chosen by the communication core). The communicator is
// owned by the backend and so used only by the engine thread, as comm requires.
#pragma once

#include <memory>

#include "cadre/comm/communicator.h"
#include "cadre/engine/backend.h"

namespace cadre::engine {

class CommBackend final : public CollectiveBackend {
 public:
  explicit CommBackend(std::unique_ptr<comm::Communicator> comm) : comm_(std::move(comm)) {}
  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  comm::Communicator& communicator() { return *comm_; }

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
};

}  // namespace cadre::engine
