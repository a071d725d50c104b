// CollectiveBackend: the seam between the engine and whatever moves the bytes.
//
// The engine's background thread is the only caller of a backend (not thread-safe; one call at a
// time, every rank in the same order, exactly as comm::Communicator). Every call either completes
// or throws cadre::Error within the backend's timeout, naming the faulty rank; after a throw the
// backend is broken and the engine fails everything still pending.
//
// Implementations:
// - CommBackend (comm_backend.h): the communication core, used by real jobs.
// - GatherBackend: every collective built from one primitive, ExchangeBytes (all ranks get all
//   ranks' bytes), with the reduction done locally. Simple and obviously correct, O(size) traffic
//   per rank, so it is meant for tests and bring-up:
//     - InProcessGroup::Backend: threads of one process as ranks (c10d's FakeProcessGroup idea);
//     - StoreBackend (store_backend.h): processes rendezvousing through a store::Store.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/comm/types.h"

namespace cadre::engine {

using comm::DataType;
using comm::ReduceOp;

class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Everyone contributes the same number of bytes; out holds size() * bytes, in rank order.
  virtual void AllgatherFixed(const void* in, void* out, size_t bytes) = 0;
  // counts[r] elements from rank r, concatenated in rank order.
  virtual void Allgather(const void* in, void* out, const std::vector<size_t>& counts,
                         DataType dtype) = 0;
  virtual void Allreduce(void* buffer, size_t count, DataType dtype, ReduceOp op) = 0;
  virtual void Broadcast(void* buffer, size_t count, DataType dtype, int root) = 0;
  virtual void Alltoall(const void* in, void* out, const std::vector<size_t>& send_counts,
                        const std::vector<size_t>& recv_counts, DataType dtype) = 0;
  // `in` holds sum(counts) elements; this rank receives the reduction of block rank().
  virtual void ReduceScatter(const void* in, void* out, const std::vector<size_t>& counts,
                             DataType dtype, ReduceOp op) = 0;
};

// A backend whose collectives are all derived from ExchangeBytes.
class GatherBackend : public CollectiveBackend {
 public:
  using Bytes = std::vector<uint8_t>;

  void AllgatherFixed(const void* in, void* out, size_t bytes) override;
  void Allgather(const void* in, void* out, const std::vector<size_t>& counts,
                 DataType dtype) override;
  void Allreduce(void* buffer, size_t count, DataType dtype, ReduceOp op) override;
  void Broadcast(void* buffer, size_t count, DataType dtype, int root) override;
  void Alltoall(const void* in, void* out, const std::vector<size_t>& send_counts,
                const std::vector<size_t>& recv_counts, DataType dtype) override;
  void ReduceScatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                     ReduceOp op) override;

 protected:
  // Returns every rank's `mine`, indexed by rank. Throws cadre::Error on failure/timeout.
  virtual std::vector<Bytes> ExchangeBytes(Bytes mine) = 0;

 private:
  static void PutCount(uint64_t c, Bytes& out);
};

// Ranks as threads of one process. Make one group, then one Backend per rank (each used by its
// own thread). A rank that does not arrive within the timeout fails the others, naming it; a
// rank that called Abort() (a "crash") fails everyone waiting with an error naming it.
class InProcessGroup : public std::enable_shared_from_this<InProcessGroup> {
 public:
  static std::shared_ptr<InProcessGroup> Create(int size, Duration timeout);
  std::unique_ptr<CollectiveBackend> Backend(int rank);
  void Abort(int rank);

 private:
  InProcessGroup(int size, Duration timeout) : size_(size), timeout_(timeout) {}
  std::vector<GatherBackend::Bytes> Exchange(int rank, uint64_t round, GatherBackend::Bytes mine);
  class RankBackend;

  const int size_;
  const Duration timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  struct Round {
    std::vector<GatherBackend::Bytes> data;
    std::vector<bool> arrived;
    int arrived_count = 0;
    int taken = 0;
  };
  std::map<uint64_t, Round> rounds_;  // GUARDED_BY(mu_); erased once every rank took its copy
  int aborted_rank_ = -1;             // GUARDED_BY(mu_)
};

}  // namespace cadre::engine
