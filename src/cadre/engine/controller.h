// Controller: how the ranks agree, each cycle, on which operations run and in what order.
//
// The protocol, one cycle (every rank runs the same steps with the same data, so no rank needs to
// tell the others its decisions — the whole "coordinator" is a deterministic function of the
// messages every rank received):
//  1. Each rank encodes a Message: its flags (shutting down, joined), the cache bits of requests
//     submitted since the last cycle whose description is cached (ResponseCache), and the full
//     description of the others.
//  2. The messages are allgathered (engine.cc: one fixed-size round; a second, sized round only
//     when some rank's message did not fit).
//  3. Process() adds every rank's new requests to the table of pending names (name -> request of
//     each rank). A name is ready when every rank that has not joined has submitted it.
//  4. Ready names become Responses in the order the table first saw them (rank order within a
//     cycle). A name whose ranks disagree (op, dtype, shape, reduce op, root, scales) becomes an
//     error Response carrying each rank's description; every rank fails it the same way and the
//     engine carries on. Members of a group (Request::group) whose ranks disagree on the group's
//     size fail alike, and so do, at once, the members that only the ranks with the larger
//     groups submitted: each is ready when those ranks have submitted it. Allreduces of one dtype,
//     op and scale, in sequence, are fused up to the fusion threshold.
//  5. Names that were negotiated successfully enter the cache; the next time, a rank sends a bit.
//  6. Rank 0 alone may announce a batching window (EngineOptions::batch_wait, measured by its
//     BatchWindowTuner or fixed by its options): every rank, rank 0 included, uses it from this
//     cycle on (announced_batch_window()), so all ranks batch alike for the same steps. A window
//     from any other rank is a protocol error.
// Small allreduces travel inline: a rank may attach its input bytes (a payload) to a request
// in its message. When every rank's payload for a name is there, the Response carries them all
// and each rank reduces them locally in rank order, identically everywhere, with no collective
// of its own (a 4-byte allreduce costs one exchange instead of two). Without every payload (a
// rank joined, or left its payload out), the name runs as a normal allreduce.
// Not thread-safe: owned by the engine thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/engine/request.h"
#include "cadre/engine/response_cache.h"

namespace cadre::engine {

struct Message {
  bool shutdown = false;
  bool joined = false;
  // Set when this rank stops the job with an error (the stall inspector's shutdown): every rank
  // fails its pending operations with this status, so all of them report the same cause.
  Status abort;
  std::vector<uint32_t> cache_bits;
  std::vector<Request> requests;
  // Empty, or one entry per cache bit and then per request (in that order): the input bytes of
  // that allreduce, or empty for none.
  std::vector<std::vector<uint8_t>> payloads;
  // Rank 0's batching window from this cycle on (step 6 above); sent only when it changes.
  std::optional<std::chrono::microseconds> batch_window;

  // The longest window a message may carry (CADRE_BATCH_WAIT_MS accepts up to 1000 ms).
  static constexpr std::chrono::microseconds kMaxBatchWindow = std::chrono::seconds(1);

  std::vector<uint8_t> Encode() const;
  // Throws Error(kProtocol) naming `rank` when the bytes are malformed (unknown flags, which a
  // different cadre version would send, included).
  static Message Decode(const uint8_t* data, size_t size, int rank);
};

struct Response {
  enum class Kind { kRun, kError, kJoin, kShutdown };
  Kind kind = Kind::kRun;
  OpType op = OpType::kAllreduce;
  // The names this response covers (several for a fused allreduce), each with every rank's
  // request (nullopt for a rank that has joined and contributes nothing).
  std::vector<std::string> names;
  std::vector<std::vector<std::optional<Request>>> per_rank;
  Status error;        // kError / kShutdown
  int join_rank = -1;  // kJoin: the rank that joined last
  // An inline allreduce (one name): every rank's input bytes, in rank order.
  std::vector<std::vector<uint8_t>> inline_inputs;
};

struct PendingName {
  std::string name;
  std::vector<int> missing_ranks;  // ranks that have not submitted it
  Duration age{};
};

class Controller {
 public:
  // Allreduces larger than fusion_tensor_limit_bytes are never fused: they are reduced in place,
  // since copying them through the fusion buffer costs more than the latency fusion saves.
  Controller(int rank, int size, size_t fusion_threshold_bytes, size_t cache_capacity,
             size_t fusion_tensor_limit_bytes = SIZE_MAX);

  // Builds this rank's message for `fresh` (requests submitted since the last cycle);
  // `payloads`, when not empty, holds the inline input bytes of each fresh request (empty for
  // none). A non-ok `abort` asks every rank to stop with that error.
  Message MakeMessage(const std::vector<Request>& fresh, bool shutdown, bool joined,
                      const Status& abort = Status::Ok(),
                      std::vector<std::vector<uint8_t>> payloads = {}) const;

  // Steps 3-6 above. `messages` holds one message per rank.
  std::vector<Response> Process(const std::vector<Message>& messages);
  // The window rank 0 announced in the last Process() call, if it announced one.
  std::optional<std::chrono::microseconds> announced_batch_window() const {
    return announced_batch_window_;
  }

  // While set, Process() records which rank's request for which name arrived in that cycle
  // (arrivals(), replaced by each Process call): the timeline's per-rank marks.
  void set_record_arrivals(bool on) { record_arrivals_ = on; }
  const std::vector<std::pair<std::string, int>>& arrivals() const { return arrivals_; }

  // Names some ranks submitted and others did not, oldest first (the stall inspector's input).
  std::vector<PendingName> Pending() const;
  const ResponseCache& cache() const { return cache_; }
  // True while any name is waiting for some rank, or some rank has joined.
  bool has_pending() const;
  // True when names are pending and this rank has submitted every one of them: only other
  // ranks can make progress, so this rank should enter the next exchange at once (it blocks
  // there until they submit) rather than sleep a cycle time after they do.
  bool waiting_only_for_others() const;

 private:
  struct Entry {
    uint64_t sequence = 0;
    Clock::time_point first_seen;
    std::vector<std::optional<Request>> per_rank;
    std::vector<std::vector<uint8_t>> payloads;  // per rank; empty when not inline
  };
  // A group member that only some ranks submit (their groups are larger than the others'):
  // which ranks will submit it, and the error it fails with.
  struct OrphanMember {
    std::vector<bool> submitters;
    Status error;
  };
  // Whether rank r's request for the entry is still to come (it has not joined, and the entry
  // is not an orphan member that r will never submit).
  bool Awaits(const Entry& entry, int r) const;
  const OrphanMember* OrphanOf(const Entry& entry) const;
  // Records the orphan members of a group whose ranks' sizes differ (per_rank: one member).
  void RecordOrphans(const std::vector<std::optional<Request>>& per_rank, const Status& error);
  Response Decide(const std::string& name, Entry& entry);
  void Fuse(std::vector<Response>& responses) const;

  const int rank_;
  const int size_;
  const size_t fusion_threshold_;
  const size_t fusion_tensor_limit_;
  ResponseCache cache_;
  std::map<std::string, Entry> table_;
  std::map<std::pair<std::string, uint32_t>, OrphanMember> orphans_;  // (group, index)
  uint64_t orphans_recorded_ = 0;  // RecordOrphans calls that recorded some: Process's passes
  std::vector<bool> joined_;
  int last_joined_ = -1;
  uint64_t next_sequence_ = 0;
  bool record_arrivals_ = false;
  std::vector<std::pair<std::string, int>> arrivals_;
  std::optional<std::chrono::microseconds> announced_batch_window_;
};

}  // namespace cadre::engine
