// Device: moves Transfers between this rank and its peers.
//
// Run() progresses every transfer of the batch concurrently (so a rank may send to and receive
// from the same or different peers at once without deadlock) and returns when all completed, or
// with the first failure: kTimeout naming the peers still owed bytes when the deadline passes,
// kIo naming a peer whose connection broke, kProtocol for a malformed frame, kMismatch for a
// message of unexpected size. After a failure the device is broken: every later Run fails at
// once. The owner then calls Shutdown(why, ...), so peers blocked on this rank fail fast too, and
// learn why where the transport can tell them (TCP: a failure notice, tcp/pair.h).
//
// Thread-safety: one thread calls Run at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/transport/pair.h"

namespace cadre::transport {

class Device {
 public:
  virtual ~Device() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Pair& pair(int peer) = 0;
  virtual Status Run(std::span<const Transfer> transfers, Deadline deadline) = 0;
  // Run, where the end of a receive may start more transfers (a pipeline: forward a piece as
  // soon as it has arrived, while later pieces are still on their way). Receives are numbered
  // in the order they join the batch (the given ones first); once receive k has completed,
  // on_received(k, &more) is called, and the transfers it appends to `more` join the batch.
  // Receives from one peer complete in the order they were queued. Returns when every
  // transfer, added ones included, has completed; failures as Run. A callback that returns an
  // error ends the run with that error, and breaks the device as any failure does (transfers
  // of the batch may be left half done).
  using OnReceived = std::function<Status(size_t, std::vector<Transfer>*)>;
  virtual Status RunStreaming(std::span<const Transfer> transfers, Deadline deadline,
                              const OnReceived& on_received) = 0;
  // Breaks the device (see above) and closes its connections, first telling each peer `why`
  // (when not ok) where the transport can; `explained`: `why` names its cause (see
  // failure_explained()). Also after a failure elsewhere, e.g. another transport of the same
  // communicator.
  virtual void Shutdown(const Status& why, bool explained) = 0;
  void Shutdown() { Shutdown(Status::Ok(), false); }
  // Whether the failure that broke the device names its cause from what the peers said or did
  // (a peer's own account of its failure, a connection that ended with none: its process
  // exited), rather than only the neighbour that hung up.
  virtual bool failure_explained() const { return false; }
  // Names the collective the following runs belong to: `digest` identifies it (the same on
  // every rank that calls the same collective with the same arguments), `description` is how
  // messages show it ("allreduce(count 5, float32, sum)"). A device that can carries the digest
  // with every message and fails a receive whose digest differs with kMismatch, so ranks that
  // disagree on a collective fail instead of mixing their data. Stays in force until the next
  // call; the default ignores it.
  virtual void BeginCollective(uint32_t digest, std::string description) {
    (void)digest;
    (void)description;
  }
};

}  // namespace cadre::transport
