// Test helpers: a Communicator per thread over an in-memory store (threads as ranks,
// base/test_ranks.h).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cadre/base/test_ranks.h"
#include "cadre/comm/collective_options.h"
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

// Element i of rank r: small, so sums and products are exact in every type used here.
inline int64_t Value(int r, size_t i) {
  return static_cast<int64_t>((static_cast<size_t>(r) * 5 + i) % 7);
}

// Runs `allreduce` on float32 sums and int64 max for counts that do and do not divide by the
// slots and hosts, in and out of place, and checks every element.
inline void CheckSumAndMax(Communicator& comm,
                           const std::function<void(const AllreduceOptions&)>& run) {
  const int n = comm.size(), r = comm.rank();
  for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{7}, size_t{1001}, size_t{40000}}) {
    std::vector<float> in(count), out(count, -1.0f);
    for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(Value(r, i));
    AllreduceOptions o;
    o.input = in.data();
    o.output = out.data();
    o.count = count;
    o.segment_bytes = 512;  // many pieces per step
    run(o);
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int q = 0; q < n; ++q) want += static_cast<float>(Value(q, i));
      ASSERT_EQ(out[i], want) << "float32 sum, count " << count << ", element " << i;
    }

    std::vector<int64_t> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = Value(r, i) - 3;
    AllreduceOptions m;
    m.input = m.output = buf.data();
    m.count = count;
    m.dtype = DataType::kInt64;
    m.op = ReduceOp::kMax;
    run(m);
    for (size_t i = 0; i < count; ++i) {
      int64_t want = INT64_MIN;
      for (int q = 0; q < n; ++q) want = std::max(want, Value(q, i) - 3);
      ASSERT_EQ(buf[i], want) << "int64 max in place, count " << count << ", element " << i;
    }
  }
}

}  // namespace cadre::comm::testing
