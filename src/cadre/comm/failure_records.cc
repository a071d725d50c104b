#include "cadre/comm/failure_records.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <future>
#include <thread>
#include <utility>
#include <variant>

namespace cadre::comm {
namespace {

// Runs f on a detached thread and waits at most `limit` for it: nullopt when it took longer or
// threw cadre::Error (the store is gone or stopped; *error: its message, when given). f must
// own everything it uses.
struct StoreError {
  std::string message;
};

template <typename T>
std::optional<T> Bounded(Duration limit, std::function<T()> f, std::string* error = nullptr) {
  auto result = std::make_shared<std::promise<std::variant<T, StoreError>>>();
  auto done = result->get_future();
  std::thread([result, f = std::move(f)] {
    try {
      result->set_value(f());
    } catch (const Error& e) {
      result->set_value(StoreError{e.what()});
    } catch (...) {
      result->set_exception(std::current_exception());
    }
  }).detach();
  if (limit <= Duration::zero() || done.wait_for(limit) != std::future_status::ready) {
    return std::nullopt;
  }
  auto value = done.get();
  if (auto* failed = std::get_if<StoreError>(&value)) {
    if (error != nullptr) *error = failed->message;
    return std::nullopt;
  }
  return std::get<T>(std::move(value));
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
                                          bool explained, Duration limit,
                                          std::string* store_problem) {
  // Every later error names the rank at the root of the failure, not only the neighbour that
  // hung up: a failure that names its cause (explained) is recorded for the others, and the
  // first failure too, as "<code>|<message>". The peers learn of a failure only after its rank
  // recorded it when the store is slow, so an unexplained one waits a moment for an explained
  // record before it takes the first.
  return Bounded<SharedFailure>(
      limit,
      [c, status, explained]() {
        SharedFailure out{status, status.code()};
        const std::string mine = c.collective.empty() ? "no collective yet" : c.collective;
        c.store->set_string(CalledKey(c.rank), mine);
        const std::string record_of_mine =
            std::to_string(static_cast<int>(status.code())) + "|" + status.message();
        if (explained) c.store->set_string("failure/explained", record_of_mine);
        if (c.store->add("failure/count", 1) == 1) {
          c.store->set_string("failure/first", record_of_mine);
        }
        if (explained) return out;
        // A connection that broke (kIo) or a group aborted by a peer has its cause elsewhere,
        // which an explained record may name; a timeout or a mismatch is its own.
        std::string key = "failure/first";
        if (status.code() == Code::kIo || status.code() == Code::kAborted) {
          try {
            c.store->wait({"failure/explained"}, c.record_wait / 4);
            key = "failure/explained";
          } catch (const Error& e) {
            if (e.code() != Code::kTimeout) throw;
          }
        }
        if (key == "failure/first") c.store->wait({key}, std::chrono::milliseconds(200));
        const std::string record = c.store->get_string(key);
        if (record == record_of_mine) return out;
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
        // A peer's failure notice (transport/tcp/pair.h) may have brought the first one already, or
        // carried this rank's into the first record.
        const bool said = status.message().find(first) != std::string::npos ||
                          first.find(status.message()) != std::string::npos;
        out.status = Status(mine_code,
                            said ? status.message()
                                 : status.message() + "; the first failure in the group: " + first);
        return out;
      },
      store_problem);
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
