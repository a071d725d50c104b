// Request::external (the data path outside the engine, cadre.torch's NCCL path): negotiated like
// every request, numbered alike on every rank, never touched, never fused with engine data,
// refused where the other ranks could not follow. Engines are threads over comm::InProcessGroup.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <thread>

#include "cadre/base/test_ranks.h"
#include "cadre/comm/in_process.h"
#include "cadre/engine/engine.h"

namespace cadre::engine {
namespace {

using namespace std::chrono_literals;

std::vector<std::unique_ptr<Engine>> Engines(int size) {
  EngineOptions o;
  o.cycle_time = 1ms;
  o.fusion_threshold_bytes = 64;
  o.inline_bytes = 0;  // small engine allreduces must be fusable neighbours, not inline
  auto group = comm::InProcessGroup::Create(size, 20s);
  std::vector<std::unique_ptr<Engine>> engines;
  for (int r = 0; r < size; ++r) engines.push_back(std::make_unique<Engine>(group->Member(r), o));
  return engines;
}

void EachRank(int size, const std::function<void(int)>& body) {
  cadre::testing::RunThreadsAsRanks(size, body);
}

Request Allreduce(const std::string& name, int64_t n, bool external) {
  Request r;
  r.op = OpType::kAllreduce;
  r.name = name;
  r.shape = {n};
  r.external = external;
  return r;
}

TEST(ExternalTest, RoundTripsOnTheWireAndDescribesItself) {
  Request r = Allreduce("fc.weight", 3, true);
  r.prescale = 0.5;
  std::vector<uint8_t> bytes;
  EncodeRequest(r, bytes);
  Reader in(bytes.data(), bytes.size());
  EXPECT_EQ(DecodeRequest(in), r);
  EXPECT_NE(r.Describe().find("data=external"), std::string::npos) << r.Describe();
  auto diff = Incompatibility(r, Allreduce("fc.weight", 3, false));
  ASSERT_TRUE(diff.has_value());
  EXPECT_NE(diff->find("data path external vs engine"), std::string::npos) << *diff;
}

TEST(ExternalTest, NumberedAlikeOnEveryRankWhateverTheSubmissionOrder) {
  constexpr int kSize = 3, kNames = 12;
  auto engines = Engines(kSize);
  std::vector<std::map<std::string, int64_t>> seen(kSize);
  EachRank(kSize, [&](int rank) {
    // Every rank submits the names in its own order, and an engine allreduce of the same dtype
    // among them (which must not be fused with the external ones: their data is not here).
    std::vector<std::vector<float>> data(kNames, std::vector<float>(4, float(rank)));
    std::vector<float> normal(4, 1.0f);
    std::vector<std::pair<std::string, std::shared_ptr<Handle>>> handles;
    for (int k = 0; k < kNames; ++k) {
      const int i = (k * 5 + rank * 7) % kNames;
      const std::string name = "x" + std::to_string(i);
      // The data pointer may be null: the engine never reads an external operation's data.
      void* ptr = i % 2 ? data[i].data() : nullptr;
      handles.emplace_back(name, engines[rank]->Enqueue(Allreduce(name, 4, true), ptr, true));
      if (k == kNames / 2) {
        handles.emplace_back("normal",
                             engines[rank]->Enqueue(Allreduce("normal", 4, false), normal.data()));
      }
    }
    engines[rank]->Flush();
    for (auto& [name, h] : handles) {
      ASSERT_TRUE(h->Wait(30s)) << name;
      ASSERT_TRUE(h->status().ok()) << h->status().ToString();
      if (name != "normal") seen[rank][name] = h->external_sequence();
    }
    EXPECT_EQ(handles[kNames / 2 + 1].second->external_sequence(), -1);
    for (float v : normal) EXPECT_EQ(v, float(kSize));
    for (const auto& d : data) {
      for (float v : d) EXPECT_EQ(v, float(rank)) << "external data was touched";
    }
  });
  std::vector<int64_t> numbers;
  for (const auto& [name, n] : seen[0]) numbers.push_back(n);
  std::sort(numbers.begin(), numbers.end());
  for (int64_t i = 0; i < kNames; ++i) EXPECT_EQ(numbers[i], i);
  for (int r = 1; r < kSize; ++r) EXPECT_EQ(seen[r], seen[0]) << "rank " << r;
}

TEST(ExternalTest, NeverFusedWithAllreducesTheEngineMoves) {
  constexpr int kSize = 2, kPairs = 8;
  auto engines = Engines(kSize);
  EachRank(kSize, [&](int rank) {
    // External and engine allreduces of one dtype and op, alternating: fusable neighbours.
    std::vector<std::vector<float>> external(kPairs, std::vector<float>(2, float(rank + 10)));
    std::vector<std::vector<float>> normal(kPairs, std::vector<float>(2, 1.0f));
    std::vector<std::shared_ptr<Handle>> handles;
    for (int i = 0; i < kPairs; ++i) {
      handles.push_back(engines[rank]->Enqueue(Allreduce("e" + std::to_string(i), 2, true),
                                               external[i].data(), true));
      handles.push_back(engines[rank]->Enqueue(Allreduce("n" + std::to_string(i), 2, false),
                                               normal[i].data(), true));
    }
    engines[rank]->Flush();
    for (auto& h : handles) {
      ASSERT_TRUE(h->Wait(30s));
      ASSERT_TRUE(h->status().ok()) << h->status().ToString();
    }
    for (int i = 0; i < kPairs; ++i) {
      EXPECT_EQ(normal[i][0], float(kSize)) << "engine allreduce n" << i << " not reduced";
      EXPECT_EQ(external[i][1], float(rank + 10)) << "external e" << i << " was touched";
    }
  });
}

TEST(ExternalTest, DisagreementOnTheDataPathFailsEveryRank) {
  auto engines = Engines(2);
  EachRank(2, [&](int rank) {
    std::vector<float> v(2, 1.0f);
    auto h = engines[rank]->Enqueue(Allreduce("g", 2, rank == 0), v.data());
    ASSERT_TRUE(h->Wait(30s));
    EXPECT_EQ(h->status().code(), Code::kMismatch);
    EXPECT_NE(h->status().message().find("data path"), std::string::npos) << h->status().message();
    EXPECT_EQ(h->external_sequence(), -1);
  });
}

TEST(ExternalTest, RefusedForOtherOperationsAndAfterAJoin) {
  auto engines = Engines(2);
  Request gather = Allreduce("a", 2, true);
  gather.op = OpType::kAllgather;
  std::vector<float> v(2, 1.0f);
  try {
    engines[0]->Enqueue(gather, v.data());
    FAIL() << "an external allgather was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidArgument);
  }
  EachRank(2, [&](int rank) {
    if (rank == 1) {
      auto j = engines[1]->Join();
      ASSERT_TRUE(j->Wait(30s));
      return;
    }
    // Rank 1 joined: it cannot contribute zeros to data the engine does not move.
    auto h = engines[0]->Enqueue(Allreduce("late", 2, true), nullptr);
    ASSERT_TRUE(h->Wait(30s));
    EXPECT_EQ(h->status().code(), Code::kInvalidArgument);
    EXPECT_NE(h->status().message().find("joined"), std::string::npos) << h->status().message();
    ASSERT_TRUE(engines[0]->Join()->Wait(30s));
  });
}

}  // namespace
}  // namespace cadre::engine
