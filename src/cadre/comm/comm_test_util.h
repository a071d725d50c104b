// Test helpers: ranks as threads of one process over an in-memory store (Gloo's base_test idea).
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cadre/comm/communicator.h"
#include "cadre/store/hash_store.h"

namespace cadre::comm::testing {

inline constexpr char kToken[] = "test-token";

// Options for rank `rank` of `size`; everything else as in `base`.
inline CommunicatorOptions RankOptions(const CommunicatorOptions& base, int rank, int size) {
  CommunicatorOptions o = base;
  o.rank = rank;
  o.size = size;
  if (o.token.empty()) o.token = kToken;
  return o;
}

// Runs fn(comm) on `size` threads, each with its own Communicator over one shared HashStore.
// `host_of(rank)` (optional) emulates several hosts. Exceptions escaping fn are reported as test
// failures naming the rank.
inline void RunRanks(int size, const CommunicatorOptions& base,
                     const std::function<void(Communicator&)>& fn,
                     const std::function<std::string(int)>& host_of = nullptr) {
  auto store = std::make_shared<store::HashStore>();
  std::vector<std::thread> threads;
  std::mutex mu;
  std::vector<std::string> failures;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        CommunicatorOptions o = RankOptions(base, r, size);
        o.store = store;
        if (host_of) o.host = host_of(r);
        auto comm = Communicator::Create(o);
        fn(*comm);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back("rank " + std::to_string(r) + ": " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& f : failures) ADD_FAILURE() << f;
}

}  // namespace cadre::comm::testing
