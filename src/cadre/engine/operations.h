// Executor: runs negotiated Responses on this rank with the backend — the fusion buffer for
// allreduces, engine-owned outputs for allgather/alltoall/reducescatter.
//
// The FusionBuffer is reused across cycles (grown, never shrunk below its high-water mark up to
// the fusion threshold) so steady-state steps allocate nothing. Not thread-safe: engine thread.
#pragma once

#include <memory>
#include <vector>

#include "cadre/engine/backend.h"
#include "cadre/engine/controller.h"
#include "cadre/engine/handle.h"

namespace cadre::engine {

// This rank's side of one submitted operation.
struct TensorEntry {
  Request request;
  void* data = nullptr;
  std::shared_ptr<Handle> handle;
};

class FusionBuffer {
 public:
  // A buffer of at least `bytes`, valid until the next call.
  uint8_t* Get(size_t bytes);

 private:
  std::vector<uint8_t> buffer_;
};

class Executor {
 public:
  // Fused allreduces run in segments of segment_bytes (see Executor::Allreduce).
  Executor(CollectiveBackend& backend, size_t segment_bytes)
      : backend_(backend), segment_bytes_(segment_bytes) {}

  // Runs a Response of kind kRun. local[i] is this rank's entry for response.names[i], or null
  // when this rank has joined. Writes engine-owned outputs into the handles but does not
  // complete them. Throws cadre::Error from the backend.
  void Run(const Response& response, const std::vector<TensorEntry*>& local);

 private:
  void Allreduce(const Response& response, const std::vector<TensorEntry*>& local);
  void Allgather(const Response& response, TensorEntry* local);
  void Alltoall(const Response& response, TensorEntry* local);
  void Reducescatter(const Response& response, TensorEntry* local);

  CollectiveBackend& backend_;
  const size_t segment_bytes_;
  FusionBuffer fusion_;
};

// Rows of the first dimension each rank receives from reducescatter of `rows` rows: an even
// split, the first rows % size ranks getting one more (Horovod's rule).
std::vector<int64_t> ReducescatterRows(int64_t rows, int size);

}  // namespace cadre::engine
