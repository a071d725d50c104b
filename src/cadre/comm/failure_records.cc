#include "cadre/comm/failure_records.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <future>
#include <thread>
#include <utility>

namespace cadre::comm {
namespace {

// Runs f on a detached thread and waits at most `limit` for it: nullopt when it took longer or
// threw cadre::Error (the store is gone or stopped). f must own everything it uses.
template <typename T>
std::optional<T> Bounded(Duration limit, std::function<T()> f) {
  auto result = std::make_shared<std::promise<std::optional<T>>>();
  std::future<std::optional<T>> done = result->get_future();
  std::thread([result, f = std::move(f)] {
    try {
      result->set_value(f());
    } catch (const Error&) {
      result->set_value(std::nullopt);
    } catch (...) {
      result->set_exception(std::current_exception());
    }
  }).detach();
  if (done.wait_for(limit) != std::future_status::ready) return std::nullopt;
  return done.get();
}

std::string CalledKey(int rank) { return "failure/called/" + std::to_string(rank); }

// What each rank recorded as called when it failed, waiting briefly for every record; empty for
// a rank that has recorded nothing. Every rank fails soon after the first (its connections
// close), and records what it called first thing.
std::vector<std::optional<std::string>> FailureRecords(const FailureContext& c) {
  std::vector<std::string> keys;
  for (size_t r = 0; r < c.names.size(); ++r) keys.push_back(CalledKey(static_cast<int>(r)));
  try {
    c.store->wait(keys, c.record_wait);
  } catch (const Error& e) {
    if (e.code() != Code::kTimeout) throw;
    // Some rank did not get there in time: the others' records are still worth having.
  }
  std::vector<std::optional<std::string>> records;
  for (const auto& key : keys) {
    records.push_back(c.store->check({key}) ? std::optional(c.store->get_string(key))
                                            : std::nullopt);
  }
  return records;
}

}  // namespace

std::optional<SharedFailure> ShareFailure(const FailureContext& c, const Status& status,
                                          Duration limit) {
  // The first rank to fail records why before it closes its connections, so every later error
  // names the rank at the root of the failure, not only the neighbour that hung up. The record
  // is "<code>|<message>".
  return Bounded<SharedFailure>(limit, [c, status]() {
    SharedFailure out{status, status.code()};
    const std::string mine = c.collective.empty() ? "no collective yet" : c.collective;
    c.store->set_string(CalledKey(c.rank), mine);
    if (c.store->add("failure/count", 1) == 1) {
      c.store->set_string("failure/first",
                          std::to_string(static_cast<int>(status.code())) + "|" + status.message());
      return out;
    }
    c.store->wait({"failure/first"}, std::chrono::milliseconds(200));
    const std::string record = c.store->get_string("failure/first");
    const size_t bar = record.find('|');
    const std::string first = bar == std::string::npos ? record : record.substr(bar + 1);
    int code = 0;
    if (bar != std::string::npos &&
        std::from_chars(record.data(), record.data() + bar, code).ec == std::errc()) {
      out.first = static_cast<Code>(code);
    }
    // When the root was a mismatch, so is this failure: the ranks that only saw a neighbour
    // hang up fail with kMismatch too.
    const Code mine_code = out.first == Code::kMismatch ? Code::kMismatch : status.code();
    out.status = Status(mine_code, status.message() + "; the first failure in the group: " + first);
    return out;
  });
}

Status WithWhatEachRankCalled(const FailureContext& c, const Status& s, Duration limit) {
  // The per-rank diff, ranks grouped by what they called.
  auto diff = Bounded<std::string>(c.record_wait + limit, [c]() {
    const auto records = FailureRecords(c);
    std::vector<std::pair<std::string, std::string>> groups;  // what was called, by which ranks
    for (size_t r = 0; r < records.size(); ++r) {
      const std::string what = records[r].value_or("(did not say)");
      auto g = std::find_if(groups.begin(), groups.end(),
                            [&](const auto& x) { return x.first == what; });
      if (g == groups.end()) {
        groups.emplace_back(what, "rank " + std::to_string(r));
      } else {
        g->second += ", " + std::to_string(r);
      }
    }
    std::string text;
    for (const auto& [what, ranks] : groups) {
      text += (text.empty() ? "" : "; ") + ranks + ": " + what;
    }
    return text;
  });
  if (!diff) return s;
  return Status(s.code(), s.message() + "; what each rank called: " + *diff);
}

// A rank that stalls (stopped, stuck outside the collective, cut off) closes no connection: its
// peers time out, in a ring each waiting on its neighbour, and whichever records its failure
// first may name an innocent rank ("rank 0: ... waiting for rank 3"). Every rank that fails
// records what it called (ShareFailure) within moments of the first; the ranks that have not,
// a moment later, are the ones that stopped answering.
Status WithRanksThatDidNotFail(const FailureContext& c, const Status& s, Duration limit) {
  auto silent = Bounded<std::pair<std::string, int>>(c.record_wait + limit, [c]() {
    const auto records = FailureRecords(c);
    std::string names;
    int count = 0;
    for (size_t r = 0; r < records.size(); ++r) {
      if (records[r]) continue;
      names += (names.empty() ? "" : ", ") + c.names[r];
      ++count;
    }
    return std::pair{names, count};
  });
  if (!silent || silent->first.empty()) return s;
  return Status(s.code(), s.message() + "; " + silent->first +
                              (silent->second == 1 ? " has" : " have") +
                              " not failed with the others: stalled (stopped, stuck outside the "
                              "collective) or cut off, and the likely cause");
}

}  // namespace cadre::comm
