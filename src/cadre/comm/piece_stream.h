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
#include <cstring>
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
  // Optional: after ready() said the producer gave up, why (its own failure), so that the
  // allreduce's error, and what its peers are told, carry the cause.
  std::function<Status()> why_stopped;

  size_t size() const { return counts.size(); }
};

// The error of an allreduce over `s` whose producer gave up before piece k.
inline Status StreamStopped(const PieceStream& s, size_t k) {
  const Status why = s.why_stopped ? s.why_stopped() : Status::Ok();
  return AbortedError("streamed allreduce stopped: piece " + std::to_string(k) + " of " +
                      std::to_string(s.size()) + " was never produced" +
                      (why.ok() ? "" : ": " + why.message()));
}

// The pieces one after another, for an allreduce that cannot keep several in flight: waits for
// each, copies its input to its output, runs allreduce(output, count) there in place, reports
// it. StreamStopped when the producer gives up; what `allreduce` throws propagates.
template <class InPlaceAllreduce>
Status AllreducePiecesInTurn(const PieceStream& s, size_t element_size,
                             InPlaceAllreduce&& allreduce) {
  for (size_t k = 0; k < s.size(); ++k) {
    if (!s.ready(k, /*wait=*/true)) return StreamStopped(s, k);
    if (s.counts[k] > 0) std::memcpy(s.outputs[k], s.inputs[k], s.counts[k] * element_size);
    allreduce(s.outputs[k], s.counts[k]);
    s.done(k);
  }
  return Status::Ok();
}

}  // namespace cadre::comm
