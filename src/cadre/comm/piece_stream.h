// PieceStream: a message handed to an allreduce piece by piece, as a pipeline produces it. The
// level above the host in a pipelined hierarchical allreduce gets its input this way: a chunk's
// shard becomes ready once the host's slots have reduce-scattered it, and the host's allgather
// of a chunk can start as soon as that chunk's result is in (hierarchical_pipeline.cc).
//
// An allreduce over a PieceStream (StreamedAllreduce in collectives.h,
// HierarchyGroup::StreamedAllreduce) reduces piece k of every rank into outputs[k], for k in
// order. Every rank passes the same number of pieces and the same counts.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "cadre/base/status.h"

namespace cadre::comm {

struct PieceStream {
  std::vector<const void*> inputs;  // piece k's input, counts[k] elements
  std::vector<void*> outputs;       // its result; no output overlaps any input
  std::vector<size_t> counts;
  // Piece k's input may be read once ready(k, wait) has returned true. With wait false it only
  // asks; with wait true it blocks until the piece is ready, and false then means the producer
  // has given up (the allreduce then fails with kAborted). It must not wait on the allreduce
  // itself: the producer makes pieces ready whatever the allreduce does.
  std::function<bool(size_t k, bool wait)> ready;
  // Called once outputs[k] holds piece k's result, in piece order, on the allreduce's thread.
  std::function<void(size_t k)> done;

  size_t size() const { return counts.size(); }
};

// The error of an allreduce whose producer gave up before piece k of `pieces`.
inline Status StreamStopped(size_t k, size_t pieces) {
  return AbortedError("streamed allreduce stopped: piece " + std::to_string(k) + " of " +
                      std::to_string(pieces) + " was never produced");
}

}  // namespace cadre::comm
