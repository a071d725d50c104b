#include "cadre/engine/controller.h"

#include <algorithm>

#include "cadre/engine/dtype.h"

namespace cadre::engine {

namespace {
constexpr uint8_t kFlagShutdown = 1;
constexpr uint8_t kFlagJoined = 2;
constexpr uint8_t kFlagAbort = 4;         // followed by the status code and message
constexpr uint8_t kFlagPayloads = 8;      // a payload section follows the requests
constexpr uint8_t kFlagBatchWindow = 16;  // a varint follows: the batching window, microseconds
// Every flag this version knows; any other bit is a message from a different version.
constexpr uint8_t kKnownFlags =
    kFlagShutdown | kFlagJoined | kFlagAbort | kFlagPayloads | kFlagBatchWindow;
// A payload is a small tensor (EngineOptions::inline_bytes); anything larger is malformed.
constexpr uint64_t kMaxPayloadBytes = 1 << 16;
constexpr uint64_t kMaxItems = 1 << 20;
}  // namespace

std::vector<uint8_t> Message::Encode() const {
  std::vector<uint8_t> out;
  out.push_back((shutdown ? kFlagShutdown : 0) | (joined ? kFlagJoined : 0) |
                (abort.ok() ? 0 : kFlagAbort) | (payloads.empty() ? 0 : kFlagPayloads) |
                (batch_window ? kFlagBatchWindow : 0));
  if (!abort.ok()) {
    PutVarint(static_cast<uint64_t>(abort.code()), out);
    PutVarint(abort.message().size(), out);
    out.insert(out.end(), abort.message().begin(), abort.message().end());
  }
  if (batch_window) {
    if (*batch_window < std::chrono::microseconds::zero() || *batch_window > kMaxBatchWindow) {
      throw Error(InternalError("a batch window must be between 0 and 1 s"));
    }
    PutVarint(static_cast<uint64_t>(batch_window->count()), out);
  }
  PutVarint(cache_bits.size(), out);
  for (uint32_t b : cache_bits) PutVarint(b, out);
  PutVarint(requests.size(), out);
  for (const Request& r : requests) EncodeRequest(r, out);
  if (!payloads.empty()) {
    if (payloads.size() != cache_bits.size() + requests.size()) {
      throw Error(InternalError("a message needs one payload slot per cache bit and request"));
    }
    for (const auto& p : payloads) {
      PutVarint(p.size(), out);
      out.insert(out.end(), p.begin(), p.end());
    }
  }
  return out;
}

Message Message::Decode(const uint8_t* data, size_t size, int rank) {
  try {
    Reader in(data, size);
    Message m;
    uint8_t flags = in.Byte();
    if (flags & ~kKnownFlags) {
      throw Error(ProtocolError("unknown flags " + std::to_string(flags & ~kKnownFlags) +
                                " (is every rank running the same cadre version?)"));
    }
    m.shutdown = flags & kFlagShutdown;
    m.joined = flags & kFlagJoined;
    if (flags & kFlagAbort) {
      const uint64_t code = in.Varint();
      if (code == 0 || code > static_cast<uint64_t>(Code::kInternal)) {
        throw Error(ProtocolError("unknown status code " + std::to_string(code)));
      }
      m.abort = Status(static_cast<Code>(code), in.String());
    }
    if (flags & kFlagBatchWindow) {
      const uint64_t us = in.Varint();
      if (us > static_cast<uint64_t>(kMaxBatchWindow.count())) {
        throw Error(
            ProtocolError("batch window of " + std::to_string(us) + " us is longer than 1 s"));
      }
      m.batch_window = std::chrono::microseconds(us);
    }
    uint64_t nbits = in.Varint();
    if (nbits > kMaxItems) throw Error(ProtocolError("too many cache bits"));
    for (uint64_t i = 0; i < nbits; ++i) m.cache_bits.push_back(static_cast<uint32_t>(in.Varint()));
    uint64_t nreq = in.Varint();
    if (nreq > kMaxItems) throw Error(ProtocolError("too many requests"));
    for (uint64_t i = 0; i < nreq; ++i) m.requests.push_back(DecodeRequest(in));
    if (flags & kFlagPayloads) {
      for (uint64_t i = 0; i < nbits + nreq; ++i) {
        const uint64_t n = in.Varint();
        if (n > kMaxPayloadBytes) throw Error(ProtocolError("inline payload too large"));
        m.payloads.emplace_back(n);
        if (n) in.Bytes(m.payloads.back().data(), n);
      }
    }
    if (!in.done()) throw Error(ProtocolError("trailing bytes"));
    return m;
  } catch (const Error& e) {
    throw Error(e.status().WithContext("message from rank " + std::to_string(rank)));
  }
}

Controller::Controller(int rank, int size, size_t fusion_threshold_bytes, size_t cache_capacity,
                       size_t fusion_tensor_limit_bytes)
    : rank_(rank),
      size_(size),
      fusion_threshold_(fusion_threshold_bytes),
      fusion_tensor_limit_(fusion_tensor_limit_bytes),
      cache_(cache_capacity),
      joined_(size, false) {}

Message Controller::MakeMessage(const std::vector<Request>& fresh, bool shutdown, bool joined,
                                const Status& abort,
                                std::vector<std::vector<uint8_t>> payloads) const {
  Message m;
  m.shutdown = shutdown;
  m.joined = joined;
  m.abort = abort;
  std::vector<std::vector<uint8_t>> request_payloads;
  const bool any_payload =
      std::any_of(payloads.begin(), payloads.end(), [](const auto& p) { return !p.empty(); });
  for (size_t i = 0; i < fresh.size(); ++i) {
    const Request& r = fresh[i];
    std::vector<uint8_t> payload = any_payload ? std::move(payloads.at(i)) : std::vector<uint8_t>{};
    if (auto bit = cache_.Lookup(r, rank_)) {
      m.cache_bits.push_back(*bit);
      if (any_payload) m.payloads.push_back(std::move(payload));
    } else {
      m.requests.push_back(r);
      if (any_payload) request_payloads.push_back(std::move(payload));
    }
  }
  for (auto& p : request_payloads) m.payloads.push_back(std::move(p));
  return m;
}

std::vector<Response> Controller::Process(const std::vector<Message>& messages) {
  const auto now = Clock::now();
  std::vector<int> shutdown_ranks;
  arrivals_.clear();
  for (int r = 1; r < size_; ++r) {
    if (messages[r].batch_window) {
      throw Error(ProtocolError("rank " + std::to_string(r) +
                                " announced a batch window; only rank 0 decides it"));
    }
  }
  announced_batch_window_ = messages[0].batch_window;
  auto add = [&](int r, const Request& req, const std::vector<std::vector<uint8_t>>& payloads,
                 size_t index) {
    Entry& e = table_[req.name];
    if (e.per_rank.empty()) {
      e.sequence = next_sequence_++;
      e.first_seen = now;
      e.per_rank.resize(size_);
    }
    if (e.per_rank[r]) {
      throw Error(ProtocolError("rank " + std::to_string(r) + " submitted '" + req.name +
                                "' twice while it was pending"));
    }
    e.per_rank[r] = req;
    if (record_arrivals_) arrivals_.emplace_back(req.name, r);
    if (index < payloads.size() && !payloads[index].empty()) {
      if (e.payloads.empty()) e.payloads.resize(size_);
      e.payloads[r] = payloads[index];
    }
  };
  for (int r = 0; r < size_; ++r) {
    const Message& m = messages[r];
    if (m.shutdown) shutdown_ranks.push_back(r);
    if (m.joined && !joined_[r]) {
      joined_[r] = true;
      last_joined_ = r;
    }
    if (!m.payloads.empty() && m.payloads.size() != m.cache_bits.size() + m.requests.size()) {
      throw Error(ProtocolError("rank " + std::to_string(r) + " sent " +
                                std::to_string(m.payloads.size()) + " payloads for " +
                                std::to_string(m.cache_bits.size() + m.requests.size()) +
                                " requests"));
    }
    size_t index = 0;
    for (uint32_t bit : m.cache_bits) add(r, cache_.Get(bit, r), m.payloads, index++);
    for (const Request& req : m.requests) add(r, req, m.payloads, index++);
  }

  std::vector<Response> responses;
  for (int r = 0; r < size_; ++r) {
    if (messages[r].abort.ok()) continue;
    // The lowest aborting rank's error, identical on every rank.
    Response s;
    s.kind = Response::Kind::kShutdown;
    s.error = messages[r].abort.WithContext("job stopped by rank " + std::to_string(r));
    responses.push_back(std::move(s));
    return responses;
  }
  if (!shutdown_ranks.empty()) {
    std::string who;
    for (int r : shutdown_ranks) who += (who.empty() ? "" : ", ") + std::to_string(r);
    // Names still pending then were submitted by some ranks and never will be by the ones that
    // shut down: say which, so that a rank waiting on one learns why.
    std::string pending;
    for (const PendingName& p : Pending()) {
      if (p.missing_ranks.empty()) continue;
      std::string missing;
      for (int r : p.missing_ranks) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      pending += "; '" + p.name + "' was pending, never submitted by rank(s) " + missing;
      if (pending.size() > 2000) {
        pending += " ...";
        break;
      }
    }
    Response s;
    s.kind = Response::Kind::kShutdown;
    s.error = AbortedError("the engine was shut down (by rank " + who + ")" + pending);
    responses.push_back(std::move(s));
    return responses;
  }

  // A second pass decides the orphan members that the first pass's group mismatches revealed.
  for (uint64_t recorded = UINT64_MAX; recorded != orphans_recorded_;) {
    recorded = orphans_recorded_;
    std::vector<std::pair<uint64_t, std::string>> ready;
    for (const auto& [name, e] : table_) {
      bool all = true;
      for (int r = 0; r < size_ && all; ++r) all = !Awaits(e, r);
      if (all) ready.emplace_back(e.sequence, name);
    }
    std::sort(ready.begin(), ready.end());
    for (const auto& [seq, name] : ready) {
      auto it = table_.find(name);
      responses.push_back(Decide(name, it->second));
      table_.erase(it);
    }
  }
  if (std::all_of(joined_.begin(), joined_.end(), [](bool j) { return j; })) {
    Response j;
    j.kind = Response::Kind::kJoin;
    j.op = OpType::kJoin;
    j.join_rank = last_joined_;
    responses.push_back(std::move(j));
    joined_.assign(size_, false);
    last_joined_ = -1;
  }
  Fuse(responses);
  return responses;
}

const Controller::OrphanMember* Controller::OrphanOf(const Entry& entry) const {
  if (orphans_.empty()) return nullptr;
  for (const auto& q : entry.per_rank) {
    if (!q) continue;
    if (!q->grouped) return nullptr;
    auto it = orphans_.find({q->group, q->group_index});
    return it == orphans_.end() ? nullptr : &it->second;
  }
  return nullptr;
}

bool Controller::Awaits(const Entry& entry, int r) const {
  if (entry.per_rank[r] || joined_[r]) return false;
  const OrphanMember* orphan = OrphanOf(entry);
  return !orphan || orphan->submitters[r];
}

void Controller::RecordOrphans(const std::vector<std::optional<Request>>& per_rank,
                               const Status& error) {
  uint32_t smallest = UINT32_MAX;
  uint32_t largest = 0;
  const Request* any = nullptr;
  for (const auto& q : per_rank) {
    if (!q || !q->grouped) continue;
    smallest = std::min(smallest, q->group_size);
    largest = std::max(largest, q->group_size);
    any = &*q;
  }
  // Once per mismatched group, when its last member that every rank submitted is decided (a
  // member is never decided before the ones of lower index): recorded again for a later member,
  // an orphan that was already decided would wait for the next use of the group.
  // An empty group's marker stands at index 0, the last member every rank submitted.
  if (!any || smallest == largest || any->group_index + 1 != std::max(smallest, 1u)) return;
  smallest = std::max(smallest, 1u);
  for (uint32_t index = smallest; index < largest; ++index) {
    OrphanMember& orphan = orphans_[{any->group, index}];
    orphan.submitters.assign(size_, false);
    for (int r = 0; r < size_; ++r) {
      orphan.submitters[r] = per_rank[r] && per_rank[r]->group_size > index;
    }
    orphan.error = error;
  }
  ++orphans_recorded_;
}

Response Controller::Decide(const std::string& name, Entry& entry) {
  Response resp;
  resp.names = {name};
  resp.per_rank = {entry.per_rank};
  if (const OrphanMember* orphan = OrphanOf(entry)) {
    const Request& member = **std::find_if(entry.per_rank.begin(), entry.per_rank.end(),
                                           [](const auto& q) { return q.has_value(); });
    std::string who;
    for (int r = 0; r < size_; ++r) {
      if (orphan->submitters[r]) who += (who.empty() ? "" : ", ") + std::to_string(r);
    }
    resp.op = member.op;
    resp.kind = Response::Kind::kError;
    resp.error =
        orphan->error.WithContext("tensor '" + name + "' (only rank(s) " + who + " submitted it)");
    orphans_.erase({member.group, member.group_index});
    return resp;
  }
  const Request* first = nullptr;
  std::vector<int> absent;
  for (int r = 0; r < size_; ++r) {
    if (!entry.per_rank[r]) {
      absent.push_back(r);
    } else if (!first) {
      first = &*entry.per_rank[r];
    }
  }
  resp.op = first->op;
  std::optional<std::string> diff;
  for (int r = 0; r < size_ && !diff; ++r) {
    if (entry.per_rank[r]) diff = Incompatibility(*first, *entry.per_rank[r]);
  }
  if (diff) {
    std::string msg = "mismatched " + std::string(OpTypeName(first->op)) + " for tensor '" + name +
                      "' (" + *diff + "):";
    for (int r = 0; r < size_; ++r) {
      msg += " rank " + std::to_string(r) + ": " +
             (entry.per_rank[r] ? entry.per_rank[r]->Describe() : std::string("joined")) +
             (r + 1 < size_ ? ";" : "");
    }
    resp.kind = Response::Kind::kError;
    resp.error = MismatchError(msg);
    RecordOrphans(entry.per_rank, resp.error);
    return resp;
  }
  if (!absent.empty()) {
    // As in Horovod, a joined rank takes part in allreduces (contributing zeros, which only sum
    // and average can absorb) and barriers; every other operation fails on the ranks that
    // submitted it, and the engine carries on.
    // An external allreduce cannot: the joined rank's data path is not the engine's.
    const bool allowed = (first->op == OpType::kAllreduce &&
                          first->reduce_op == comm::ReduceOp::kSum && !first->external) ||
                         first->op == OpType::kBarrier;
    if (!allowed) {
      std::string who;
      for (int r : absent) who += (who.empty() ? "" : ", ") + std::to_string(r);
      resp.kind = Response::Kind::kError;
      resp.error =
          InvalidArgument(first->Describe() + " of '" + name + "' is not supported after rank(s) " +
                          who + " joined (only sum/average allreduce and barrier)");
      return resp;
    }
  } else {
    std::vector<Request> all;
    for (auto& r : entry.per_rank) all.push_back(*r);
    cache_.Put(all);
    // Inline when every rank sent exactly the tensor's bytes.
    const size_t bytes =
        static_cast<size_t>(first->num_elements()) * comm::ElementSize(first->dtype);
    const bool inline_ready =
        first->op == OpType::kAllreduce && bytes > 0 && !entry.payloads.empty() &&
        std::all_of(entry.payloads.begin(), entry.payloads.end(),
                    [&](const std::vector<uint8_t>& p) { return p.size() == bytes; });
    if (inline_ready) resp.inline_inputs = std::move(entry.payloads);
  }
  return resp;
}

void Controller::Fuse(std::vector<Response>& responses) const {
  auto key_of = [&](const Response& r) -> const Request* {
    if (r.kind != Response::Kind::kRun || r.op != OpType::kAllreduce) return nullptr;
    if (!r.inline_inputs.empty()) return nullptr;  // reduced locally, never fused
    for (const auto& q : r.per_rank[0]) {
      if (q) return &*q;
    }
    return nullptr;
  };
  auto bytes_of = [&](const Response& r) {
    size_t total = 0;
    for (const auto& pr : r.per_rank) {
      for (const auto& q : pr) {
        if (q) {
          total += static_cast<size_t>(q->num_elements()) * comm::ElementSize(q->dtype);
          break;
        }
      }
    }
    return total;
  };
  std::vector<Response> out;
  for (Response& r : responses) {
    const Request* k = bytes_of(r) > fusion_tensor_limit_ ? nullptr : key_of(r);
    if (k && !out.empty()) {
      Response& prev = out.back();
      const Request* pk = bytes_of(prev) > fusion_tensor_limit_ ? nullptr : key_of(prev);
      if (pk && pk->external == k->external && pk->dtype == k->dtype &&
          pk->reduce_op == k->reduce_op && pk->prescale == k->prescale &&
          pk->postscale == k->postscale && bytes_of(prev) + bytes_of(r) <= fusion_threshold_) {
        prev.names.push_back(r.names[0]);
        prev.per_rank.push_back(std::move(r.per_rank[0]));
        continue;
      }
    }
    out.push_back(std::move(r));
  }
  responses = std::move(out);
}

bool Controller::has_pending() const {
  return !table_.empty() || std::any_of(joined_.begin(), joined_.end(), [](bool j) { return j; });
}

bool Controller::waiting_only_for_others() const {
  if (table_.empty() || joined_[rank_]) return false;
  return std::all_of(table_.begin(), table_.end(),
                     [&](const auto& item) { return item.second.per_rank[rank_].has_value(); });
}

std::vector<PendingName> Controller::Pending() const {
  std::vector<std::pair<uint64_t, PendingName>> items;
  const auto now = Clock::now();
  for (const auto& [name, e] : table_) {
    PendingName p;
    p.name = name;
    for (int r = 0; r < size_; ++r) {
      if (Awaits(e, r)) p.missing_ranks.push_back(r);
    }
    p.age = std::chrono::duration_cast<Duration>(now - e.first_seen);
    items.emplace_back(e.sequence, std::move(p));
  }
  std::sort(items.begin(), items.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<PendingName> out;
  for (auto& [seq, p] : items) out.push_back(std::move(p));
  return out;
}

}  // namespace cadre::engine
