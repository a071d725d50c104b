// Test helpers: a Communicator per thread over an in-memory store (threads as ranks,
// base/test_ranks.h).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "cadre/base/test_ranks.h"
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

// Runs fn(comm) on `size` threads (base/test_ranks.h), each with its own Communicator over one
// shared HashStore. `host_of(rank)` (optional) emulates several hosts. Exceptions escaping fn are
// reported as test failures naming the rank.
inline void RunRanks(int size, const CommunicatorOptions& base,
                     const std::function<void(Communicator&)>& fn,
                     const std::function<std::string(int)>& host_of = nullptr) {
  auto store = std::make_shared<store::HashStore>();
  cadre::testing::RunThreadsAsRanks(size, [&](int r) {
    CommunicatorOptions o = RankOptions(base, r, size);
    o.store = store;
    if (host_of) o.host = host_of(r);
    auto comm = Communicator::Create(o);
    fn(*comm);
  });
}

}  // namespace cadre::comm::testing
