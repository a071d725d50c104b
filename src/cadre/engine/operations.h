// Executor: runs negotiated Responses on this rank on the engine's communicator — the fusion buffer
// for allreduces, engine-owned outputs for allgather/alltoall/reducescatter.
//
// The FusionBuffer is reused across cycles (grown, never shrunk below its high-water mark up to
// the fusion threshold) so steady-state steps allocate nothing. Not thread-safe: engine thread.
#pragma once

#include <memory>
#include <vector>

#include "cadre/comm/collective_options.h"
#include "cadre/comm/communicator.h"
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
  // Fused allreduces run in segments of segment_bytes (see Executor::Allreduce); every allreduce
  // with `algorithm` (kAuto: comm's choice by size and topology).
  Executor(comm::Communicator& comm, size_t segment_bytes, comm::AllreduceAlgorithm algorithm)
      : comm_(comm), segment_bytes_(segment_bytes), algorithm_(algorithm) {}

  // Runs a Response of kind kRun. local[i] is this rank's entry for response.names[i], or null
  // when this rank has joined. Writes engine-owned outputs into the handles but does not
  // complete them. Throws cadre::Error from the communicator.
  void Run(const Response& response, const std::vector<TensorEntry*>& local);

 private:
  void Allreduce(const Response& response, const std::vector<TensorEntry*>& local);
  void Allgather(const Response& response, TensorEntry* local);
  void Alltoall(const Response& response, TensorEntry* local);
  void Reducescatter(const Response& response, TensorEntry* local);

  // In place, with algorithm_.
  void AllreduceInPlace(void* buffer, size_t count, comm::DataType dtype, comm::ReduceOp op);

  comm::Communicator& comm_;
  const size_t segment_bytes_;
  const comm::AllreduceAlgorithm algorithm_;
  FusionBuffer fusion_;
};

// Rows of the first dimension each rank receives from reducescatter of `rows` rows: an even
// split, the first rows % size ranks getting one more (Horovod's rule).
std::vector<int64_t> ReducescatterRows(int64_t rows, int size);

}  // namespace cadre::engine
