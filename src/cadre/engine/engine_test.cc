// Engines as threads of one process over comm::InProcessGroup (and comm::StoreCommunicator over a
// HashStore):
// closed-form results for every operation, and the error contracts of engine.h.
#include "cadre/engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <thread>

#include <unistd.h>

#include "cadre/base/test_ranks.h"
#include "cadre/comm/in_process.h"
#include "cadre/comm/store_communicator.h"
#include "cadre/store/hash_store.h"

namespace cadre::engine {
namespace {

using namespace std::chrono_literals;

EngineOptions FastOptions() {
  EngineOptions o;
  o.cycle_time = 1ms;
  o.fusion_threshold_bytes = 64;  // small, so tests exercise both fused and unfused paths
  o.fusion_segment_bytes = 12;    // fused buffers reduced in pieces that split tensors
  return o;
}

std::vector<std::unique_ptr<Engine>> MakeEngines(int size, EngineOptions options = FastOptions(),
                                                 Duration timeout = 20s) {
  auto group = comm::InProcessGroup::Create(size, timeout);
  std::vector<std::unique_ptr<Engine>> engines;
  for (int r = 0; r < size; ++r)
    engines.push_back(std::make_unique<Engine>(group->Member(r), options));
  return engines;
}

// Runs body(rank) on one thread per rank.
void OnEveryRank(int size, const std::function<void(int)>& body) {
  cadre::testing::RunThreadsAsRanks(size, body);
}

Request Make(OpType op, const std::string& name, std::vector<int64_t> shape,
             comm::DataType dtype = comm::DataType::kFloat32) {
  Request r;
  r.op = op;
  r.name = name;
  r.shape = std::move(shape);
  r.dtype = dtype;
  return r;
}

void WaitOk(const std::shared_ptr<Handle>& h) {
  ASSERT_TRUE(h->Wait(30s));
  ASSERT_TRUE(h->status().ok()) << h->status().ToString();
}

// Forwards to another communicator, counting the allreduces that move data.
class CountingCommunicator final : public comm::Communicator {
 public:
  CountingCommunicator(std::unique_ptr<comm::Communicator> inner, std::atomic<int>* allreduces)
      : inner_(std::move(inner)), allreduces_(allreduces) {}
  const comm::Topology& topology() const override { return inner_->topology(); }
  Duration timeout() const override { return inner_->timeout(); }
  std::unique_ptr<Communicator> Subgroup(const std::vector<int>& ranks,
                                         const std::string& name) override {
    return inner_->Subgroup(ranks, name);
  }
  Communicator& Local() override { return inner_->Local(); }
  Communicator& Cross() override { return inner_->Cross(); }
  void CheckUsable() const override { inner_->CheckUsable(); }
  bool HierarchicalPossible() const override { return inner_->HierarchicalPossible(); }
  bool StreamsPieces() const override { return inner_->StreamsPieces(); }
  void RunAllreduce(const comm::AllreduceOptions& o) override {
    ++*allreduces_;
    inner_->RunAllreduce(o);
  }
  void RunStreamedAllreduce(const comm::StreamedAllreduceOptions& o) override {
    inner_->RunStreamedAllreduce(o);
  }
  void RunBroadcast(const comm::BroadcastOptions& o) override { inner_->RunBroadcast(o); }
  void RunAllgather(const comm::AllgatherOptions& o) override { inner_->RunAllgather(o); }
  void RunReduceScatter(const comm::ReduceScatterOptions& o) override {
    inner_->RunReduceScatter(o);
  }
  void RunAlltoall(const comm::AlltoallOptions& o) override { inner_->RunAlltoall(o); }
  void RunBarrier(std::optional<Duration> timeout) override { inner_->RunBarrier(timeout); }

 private:
  std::unique_ptr<Communicator> inner_;
  std::atomic<int>* allreduces_;
};

// Ranks x whether small allreduces travel inline in the negotiation (the default) or not.
class EngineSizes : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(EngineSizes, FusedAndUnfusedAllreduceMatchClosedForm) {
  const auto [size, inline_small] = GetParam();
  EngineOptions options = FastOptions();
  if (!inline_small) options.inline_bytes = 0;
  auto engines = MakeEngines(size, options);
  OnEveryRank(size, [&](int rank) {
    // Ten tensors of different lengths (0, 1, odd, larger than the fusion threshold).
    std::vector<std::vector<float>> data;
    std::vector<std::shared_ptr<Handle>> handles;
    const std::vector<int64_t> lens = {0, 1, 3, 7, 16, 17, 2, 100, 5, 1};
    for (size_t t = 0; t < lens.size(); ++t) data.emplace_back(lens[t], float(rank + 1) * (t + 1));
    for (size_t t = 0; t < lens.size(); ++t) {
      Request r = Make(OpType::kAllreduce, "t" + std::to_string(t), {lens[t]});
      if (t == 4) r.postscale = 0.5;
      if (t == 2) r.prescale = 4.0;
      // Every other one is batchable (as backward-hook gradients): same results either way.
      handles.push_back(engines[rank]->Enqueue(r, data[t].data(), /*batchable=*/t % 2 == 0));
    }
    const float ranksum = size * (size + 1) / 2.0f;
    for (size_t t = 0; t < lens.size(); ++t) {
      WaitOk(handles[t]);
      const float expect = ranksum * (t + 1) * (t == 4 ? 0.5f : t == 2 ? 4.0f : 1.0f);
      for (float v : data[t]) EXPECT_FLOAT_EQ(v, expect) << "tensor " << t << " rank " << rank;
    }
    // Min / max / product on int64.
    for (auto op : {comm::ReduceOp::kMin, comm::ReduceOp::kMax, comm::ReduceOp::kProduct}) {
      std::vector<int64_t> v(3, rank + 2);
      Request r =
          Make(OpType::kAllreduce, "i" + std::to_string(int(op)), {3}, comm::DataType::kInt64);
      r.reduce_op = op;
      WaitOk(engines[rank]->Enqueue(r, v.data()));
      int64_t expect = op == comm::ReduceOp::kMin ? 2 : op == comm::ReduceOp::kMax ? size + 1 : 1;
      if (op == comm::ReduceOp::kProduct) {
        for (int i = 0; i < size; ++i) expect *= i + 2;
      }
      EXPECT_EQ(v[2], expect);
    }
  });
}

TEST_P(EngineSizes, AllgatherBroadcastAlltoallReducescatter) {
  const auto [size, inline_small] = GetParam();
  EngineOptions options = FastOptions();
  if (!inline_small) options.inline_bytes = 0;
  auto engines = MakeEngines(size, options);
  OnEveryRank(size, [&](int rank) {
    Engine& e = *engines[rank];
    // Ragged allgather: rank r contributes r+1 rows of 2 columns, valued r.
    std::vector<int32_t> rows((rank + 1) * 2, rank);
    auto h = e.Enqueue(Make(OpType::kAllgather, "ag", {rank + 1, 2}, comm::DataType::kInt32),
                       rows.data());
    WaitOk(h);
    const int64_t total = size * (size + 1) / 2;
    EXPECT_EQ(h->output_shape(), (std::vector<int64_t>{total, 2}));
    const int32_t* out = reinterpret_cast<const int32_t*>(h->output().data());
    int64_t i = 0;
    for (int r = 0; r < size; ++r) {
      for (int k = 0; k < (r + 1) * 2; ++k) EXPECT_EQ(out[i++], r);
    }
    // Broadcast from the last rank.
    std::vector<double> b(5, rank == size - 1 ? 42.0 : -1.0);
    Request br = Make(OpType::kBroadcast, "bc", {5}, comm::DataType::kFloat64);
    br.root = size - 1;
    WaitOk(e.Enqueue(br, b.data()));
    EXPECT_EQ(b, std::vector<double>(5, 42.0));
    // Alltoall: rank r sends j+1 rows valued 100*r+j to rank j.
    std::vector<float> send;
    Request a = Make(OpType::kAlltoall, "a2a", {0});
    for (int j = 0; j < size; ++j) {
      a.splits.push_back(j + 1);
      for (int k = 0; k <= j; ++k) send.push_back(100.0f * rank + j);
    }
    a.shape = {static_cast<int64_t>(send.size())};
    auto ah = e.Enqueue(a, send.data());
    WaitOk(ah);
    EXPECT_EQ(ah->output_shape(), (std::vector<int64_t>{int64_t(size) * (rank + 1)}));
    EXPECT_EQ(ah->received_splits(), std::vector<int64_t>(size, rank + 1));
    const float* ao = reinterpret_cast<const float*>(ah->output().data());
    for (int j = 0; j < size; ++j) {
      for (int k = 0; k <= rank; ++k) EXPECT_EQ(*ao++, 100.0f * j + rank);
    }
    // Reducescatter of size+1 rows of 3: rank 0 gets 2 rows, the others 1.
    std::vector<float> rs((size + 1) * 3);
    std::iota(rs.begin(), rs.end(), 0.0f);
    auto rh = e.Enqueue(Make(OpType::kReducescatter, "rs", {size + 1, 3}), rs.data());
    WaitOk(rh);
    const int64_t my_rows = rank == 0 ? 2 : 1;
    const int64_t first_row = rank == 0 ? 0 : rank + 1;
    EXPECT_EQ(rh->output_shape(), (std::vector<int64_t>{my_rows, 3}));
    const float* ro = reinterpret_cast<const float*>(rh->output().data());
    for (int64_t k = 0; k < my_rows * 3; ++k) EXPECT_EQ(ro[k], size * float(first_row * 3 + k));
    WaitOk(e.Enqueue(Make(OpType::kBarrier, "barrier", {}), nullptr));
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, EngineSizes,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Bool()));

TEST(EngineTest, SmallAllreducesTravelInlineAndLargeOnesRunACollective) {
  const int size = 3;
  auto group = comm::InProcessGroup::Create(size, 20s);
  std::atomic<int> allreduces{0};
  EngineOptions options = FastOptions();
  options.inline_bytes = 16;
  std::vector<std::unique_ptr<Engine>> engines;
  for (int r = 0; r < size; ++r) {
    engines.push_back(std::make_unique<Engine>(
        std::make_unique<CountingCommunicator>(group->Member(r), &allreduces), options));
  }
  OnEveryRank(size, [&](int rank) {
    // 4 floats = 16 bytes: inline. Ranks submit at different times, so payloads arrive in
    // different cycles and must be kept until the name is ready.
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * rank));
    std::vector<float> small = {1.0f * rank, 2, 3, 4};
    Request r = Make(OpType::kAllreduce, "small", {4});
    r.reduce_op = comm::ReduceOp::kMax;
    WaitOk(engines[rank]->Enqueue(r, small.data()));
    EXPECT_EQ(small, (std::vector<float>{2, 2, 3, 4}));
  });
  EXPECT_EQ(allreduces.load(), 0);
  OnEveryRank(size, [&](int rank) {
    std::vector<float> large(5, float(rank));  // 20 bytes: a collective
    WaitOk(engines[rank]->Enqueue(Make(OpType::kAllreduce, "large", {5}), large.data()));
    EXPECT_EQ(large[4], 3.0f);
  });
  EXPECT_EQ(allreduces.load(), size);  // once per rank
}

TEST(EngineTest, MismatchFailsEveryRankAndEngineStaysUsable) {
  auto engines = MakeEngines(3);
  OnEveryRank(3, [&](int rank) {
    std::vector<float> v(rank == 1 ? 5 : 4, 1.0f);
    auto h = engines[rank]->Enqueue(Make(OpType::kAllreduce, "w", {int64_t(v.size())}), v.data());
    ASSERT_TRUE(h->Wait(30s));
    EXPECT_EQ(h->status().code(), Code::kMismatch);
    EXPECT_NE(h->status().message().find("rank 1: allreduce float32[5]"), std::string::npos)
        << h->status().message();
    std::vector<float> ok(4, 1.0f);
    WaitOk(engines[rank]->Enqueue(Make(OpType::kAllreduce, "w", {4}), ok.data()));
    EXPECT_EQ(ok[0], 3.0f);
  });
}

TEST(EngineTest, DuplicatePendingNameIsRejectedAtSubmission) {
  auto engines = MakeEngines(2);
  std::vector<float> a(1), b(1);
  auto h = engines[0]->Enqueue(Make(OpType::kAllreduce, "dup", {1}), a.data());
  try {
    engines[0]->Enqueue(Make(OpType::kAllreduce, "dup", {1}), b.data());
    FAIL() << "duplicate accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kAlreadyExists);
  }
  WaitOk(engines[1]->Enqueue(Make(OpType::kAllreduce, "dup", {1}), b.data()));
  WaitOk(h);
}

TEST(EngineTest, JoinLetsOtherRanksFinishUnevenWork) {
  auto engines = MakeEngines(3);
  OnEveryRank(3, [&](int rank) {
    // Rank r runs r+1 steps, then joins; joined ranks contribute zeros.
    for (int step = 0; step <= rank; ++step) {
      std::vector<float> g(3, 1.0f);
      WaitOk(engines[rank]->Enqueue(Make(OpType::kAllreduce, "g", {3}), g.data()));
      EXPECT_EQ(g[0], float(3 - step)) << "rank " << rank << " step " << step;
    }
    auto j = engines[rank]->Join();
    WaitOk(j);
    EXPECT_EQ(j->join_rank(), 2);
  });
}

TEST(EngineTest, ScaleFactorsFollowHorovodArithmeticForEveryType) {
  // Integers are scaled in double and truncated toward zero, before the sum on every rank and
  // after it; floats with the factor in their own precision. Reducescatter likewise.
  auto engines = MakeEngines(2);
  OnEveryRank(2, [&](int rank) {
    Engine& e = *engines[rank];
    std::vector<int32_t> ints = {7, -7, 3};  // * 0.5 -> 3, -3, 1; sum 6, -6, 2; * 0.75 -> 4, -4, 1
    Request ar = Make(OpType::kAllreduce, "ints", {3}, comm::DataType::kInt32);
    ar.prescale = 0.5;
    ar.postscale = 0.75;
    WaitOk(e.Enqueue(ar, ints.data()));
    EXPECT_EQ(ints, (std::vector<int32_t>{4, -4, 1}));
    std::vector<int16_t> rows = {5, 5, 9, 9};  // two rows of two; rank r gets row r
    Request rs = Make(OpType::kReducescatter, "rs16", {2, 2}, comm::DataType::kInt16);
    rs.prescale = 0.5;   // 2, 2, 4, 4 per rank
    rs.postscale = 1.5;  // sums 4, 4, 8, 8 -> 6, 6, 12, 12
    auto h = e.Enqueue(rs, rows.data());
    WaitOk(h);
    EXPECT_EQ(rows, (std::vector<int16_t>{5, 5, 9, 9})) << "the input is left alone";
    std::vector<int16_t> mine(2);
    std::memcpy(mine.data(), h->output().data(), 4);
    EXPECT_EQ(mine, (std::vector<int16_t>(2, rank == 0 ? 6 : 12)));
    std::vector<uint8_t> flags = {uint8_t(rank), 1, 0};  // bool: sum is "or"
    WaitOk(e.Enqueue(Make(OpType::kAllreduce, "bools", {3}, comm::DataType::kBool), flags.data()));
    EXPECT_EQ(flags, (std::vector<uint8_t>{1, 1, 0}));
    Request scaled_bool = Make(OpType::kAllreduce, "bad", {3}, comm::DataType::kBool);
    scaled_bool.postscale = 0.5;
    EXPECT_THROW(e.Enqueue(scaled_bool, flags.data()), Error);
  });
}

TEST(EngineTest, AllgatherAfterAJoinFailsTheOthersAndTheEngineCarriesOn) {
  auto engines = MakeEngines(3);
  OnEveryRank(3, [&](int rank) {
    Engine& e = *engines[rank];
    if (rank != 0) {
      std::vector<float> rows(2, 1.0f);
      auto h = e.Enqueue(Make(OpType::kAllgather, "rows", {2}), rows.data());
      ASSERT_TRUE(h->Wait(30s));
      EXPECT_EQ(h->status().code(), Code::kInvalidArgument);
      EXPECT_NE(h->status().message().find("after rank(s) 0 joined"), std::string::npos)
          << h->status().message();
      std::vector<float> g(2, 1.0f);  // sums still run, the joined rank adding zeros
      WaitOk(e.Enqueue(Make(OpType::kAllreduce, "g", {2}), g.data()));
      EXPECT_EQ(g[0], 2.0f);
    }
    auto j = e.Join();
    WaitOk(j);
    EXPECT_NE(j->join_rank(), 0);
  });
}

std::string ReadFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  std::string text;
  if (!f) return text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  return text;
}

TEST(EngineTest, TimelineIsHorovodsFormatAndValidAfterEveryRecord) {
  const std::string path = ::testing::TempDir() + "timeline-" + std::to_string(getpid()) + ".json";
  auto engines = MakeEngines(2);
  engines[0]->StartTimeline(path, /*mark_cycles=*/true);
  engines[1]->StartTimeline(path + ".rank1", true);  // only rank 0 writes, as in Horovod
  OnEveryRank(2, [&](int rank) {
    std::vector<float> t(6, 1.0f);
    WaitOk(engines[rank]->Enqueue(Make(OpType::kAllreduce, "t", {2, 3}), t.data()));
    std::vector<float> a(2, 1.0f);  // named as Horovod names it already: not prefixed twice
    WaitOk(engines[rank]->Enqueue(Make(OpType::kAllgather, "allgather.noname.1", {2}), a.data()));
  });
  const std::string during = ReadFile(path);
  engines[0]->StopTimeline();
  const std::string text = ReadFile(path);
  EXPECT_EQ(during, text.substr(0, during.size()));
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.front(), '[');
  EXPECT_EQ(text.back(), ']');
  for (const char* want :
       {R"({"name": "process_name", "ph": "M", "pid": 0, "args": {"start_time_since_epoch)",
        R"({"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "allreduce.t"}})",
        R"({"name": "process_sort_index", "ph": "M", "pid": 1, "args": {"sort_index": 1}})",
        R"("args": {"name": "allgather.noname.1"})", R"({"ph": "B", "name": "NEGOTIATE_ALLREDUCE")",
        R"({"ph": "X", "name": "1", "ts": )", R"({"ph": "B", "name": "ALLREDUCE")",
        R"({"ph": "B", "name": "ALLGATHER")",
        R"("args": {"dtype": "HOROVOD_FLOAT32", "shape": "[2, 3]"})",
        R"({"ph": "i", "name": "CYCLE_START", "ts": )"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
  EXPECT_TRUE(ReadFile(path + ".rank1").empty());
  std::remove(path.c_str());
}

TEST(EngineTest, DeadRankFailsEveryPendingHandleNamingIt) {
  auto group = comm::InProcessGroup::Create(3, 20s);
  std::vector<std::unique_ptr<Engine>> engines;
  for (int r = 0; r < 2; ++r)
    engines.push_back(std::make_unique<Engine>(group->Member(r), FastOptions()));
  std::vector<float> a(2), b(2);
  auto h0 = engines[0]->Enqueue(Make(OpType::kAllreduce, "x", {2}), a.data());
  auto h1 = engines[1]->Enqueue(Make(OpType::kAllreduce, "x", {2}), b.data());
  group->Abort(2);  // rank 2 "crashes" without ever starting
  for (auto& h : {h0, h1}) {
    ASSERT_TRUE(h->Wait(30s));
    EXPECT_EQ(h->status().code(), Code::kIo);
    EXPECT_NE(h->status().message().find("rank 2"), std::string::npos) << h->status().message();
  }
  try {
    engines[0]->Enqueue(Make(OpType::kAllreduce, "y", {2}), a.data());
    FAIL() << "a broken engine accepted work";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kIo);
  }
}

TEST(EngineTest, ShutdownOnOneRankAbortsPendingWorkEverywhere) {
  auto engines = MakeEngines(2);
  std::vector<float> a(2);
  auto h = engines[1]->Enqueue(Make(OpType::kAllreduce, "never", {2}), a.data());
  engines[0]->Shutdown();
  ASSERT_TRUE(h->Wait(30s));
  EXPECT_EQ(h->status().code(), Code::kAborted);
  EXPECT_NE(h->status().message().find("rank 0"), std::string::npos);
}

TEST(EngineTest, AShutdownNamesWhatWasPendingAndWhoNeverSubmittedIt) {
  // Rank 0 submitted an extra allreduce the others never do, and rank 1 ended its engine (its
  // program finished): rank 0 learns at once which name was left and who never submitted it.
  auto engines = MakeEngines(2);
  std::vector<float> a(2);
  auto h = engines[0]->Enqueue(Make(OpType::kAllreduce, "extra", {2}), a.data());
  engines[1]->Shutdown();
  ASSERT_TRUE(h->Wait(30s));
  EXPECT_EQ(h->status().code(), Code::kAborted);
  EXPECT_NE(h->status().message().find("'extra' was pending, never submitted by rank(s) 1"),
            std::string::npos)
      << h->status().message();
}

TEST(EngineTest, RanksThatSubmittedDifferentNamesFailAtTheDeadlockTime) {
  // Rank 0 does an extra allreduce the other never does, and rank 1 goes on to its next one:
  // each waits for a name the other has not submitted. The stall shutdown is far away; the
  // deadlock time ends it, naming both tensors, who submitted each and who did not.
  EngineOptions o = FastOptions();
  o.stall_warning = 0ms;
  o.stall_shutdown = std::chrono::minutes(20);
  o.stall_deadlock = 1500ms;
  auto engines = MakeEngines(2, o);
  std::vector<float> a(1), b(1);
  auto h0 = engines[0]->Enqueue(Make(OpType::kAllreduce, "extra", {1}), a.data());
  auto h1 = engines[1]->Enqueue(Make(OpType::kAllreduce, "next", {1}), b.data());
  for (const auto& h : {h0, h1}) {
    ASSERT_TRUE(h->Wait(60s)) << "the deadlock was not ended by the deadlock time";
    const std::string m = h->status().message();
    EXPECT_EQ(h->status().code(), Code::kTimeout) << m;
    EXPECT_NE(m.find("stalled past the deadlock time"), std::string::npos) << m;
    EXPECT_NE(m.find("'extra' (waiting "), std::string::npos) << m;
    EXPECT_NE(m.find("submitted by rank(s) 0, missing from rank(s) 1"), std::string::npos) << m;
    EXPECT_NE(m.find("submitted by rank(s) 1, missing from rank(s) 0"), std::string::npos) << m;
  }
}

TEST(EngineTest, ASlowRankIsNotADeadlock) {
  // Rank 1 submits nothing (one rank evaluating alone): only the stall shutdown ends the wait,
  // however short the deadlock time.
  EngineOptions o = FastOptions();
  o.stall_warning = 0ms;
  o.stall_deadlock = 100ms;
  o.stall_shutdown = 2500ms;
  auto engines = MakeEngines(2, o);
  std::vector<float> a(1);
  auto h = engines[0]->Enqueue(Make(OpType::kAllreduce, "y", {1}), a.data());
  ASSERT_TRUE(h->Wait(60s));
  const std::string m = h->status().message();
  EXPECT_EQ(h->status().code(), Code::kTimeout) << m;
  EXPECT_NE(m.find("stalled past the stall shutdown time"), std::string::npos) << m;
  EXPECT_EQ(m.find("deadlock"), std::string::npos) << m;
}

TEST(EngineTest, StallReportNamesMissingRanksAndStallShutdownFails) {
  EngineOptions o = FastOptions();
  o.stall_warning = 0ms;
  o.stall_shutdown = 1500ms;
  auto engines = MakeEngines(3, o);
  std::vector<float> a(1), b(1);
  auto h0 = engines[0]->Enqueue(Make(OpType::kAllreduce, "lonely", {1}), a.data());
  auto h1 = engines[1]->Enqueue(Make(OpType::kAllreduce, "lonely", {1}), b.data());
  ASSERT_TRUE(h0->Wait(30s));
  EXPECT_EQ(h0->status().code(), Code::kTimeout);
  // Whichever rank reaches the stall shutdown time first tells the others in the next
  // exchange, so every rank reports the stall itself: the tensor and the rank missing it.
  for (const auto& h : {h0, h1}) {
    ASSERT_TRUE(h->Wait(30s));
    const std::string m = h->status().message();
    EXPECT_EQ(h->status().code(), Code::kTimeout) << m;
    EXPECT_NE(m.find("stalled past the stall shutdown time"), std::string::npos) << m;
    EXPECT_NE(m.find("'lonely'"), std::string::npos) << m;
    EXPECT_NE(m.find("missing from rank(s) 2"), std::string::npos) << m;
  }
  // Rank 2 never submitted 'lonely', yet its engine stopped with the same error: a submission
  // fails with it, at once when rank 2's thread has already handled the stop, or on its handle
  // when the thread handles it next (rank 2 processes that exchange concurrently with this).
  std::vector<float> c(1);
  try {
    auto h2 = engines[2]->Enqueue(Make(OpType::kAllreduce, "later", {1}), c.data());
    ASSERT_TRUE(h2->Wait(30s));
    EXPECT_EQ(h2->status().code(), Code::kTimeout) << h2->status().message();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kTimeout) << e.what();
  }
}

TEST(EngineTest, AStallFailsEveryRankByDefault) {
  // "A default that cannot hang": without any setting, a name some ranks never submit fails the
  // others after a finite time, long enough for one rank's evaluation alone.
  const EngineOptions defaults;
  EXPECT_EQ(defaults.stall_shutdown, kDefaultStallShutdown);
  EXPECT_GT(kDefaultStallShutdown, std::chrono::minutes(10));
  EXPECT_LE(kDefaultStallShutdown, std::chrono::hours(1));
  // A deadlock (ranks that submitted different names) ends well before.
  EXPECT_EQ(defaults.stall_deadlock, kDefaultStallDeadlock);
  EXPECT_LE(kDefaultStallDeadlock, std::chrono::minutes(10));
  // What the environment makes of it: config/from_env_test.cc.
}

TEST(EngineTest, AStallShutdownShorterThanTheWarningTimeStillApplies) {
  // The warning keeps its default (60 s); a 1.5 s shutdown must not wait for it.
  EngineOptions o = FastOptions();
  o.stall_shutdown = 1500ms;
  auto engines = MakeEngines(2, o);
  std::vector<float> a(1);
  auto h = engines[0]->Enqueue(Make(OpType::kAllreduce, "alone", {1}), a.data());
  ASSERT_TRUE(h->Wait(30s)) << "the stall was not ended by the stall shutdown time";
  EXPECT_EQ(h->status().code(), Code::kTimeout) << h->status().ToString();
  EXPECT_NE(h->status().message().find("'alone'"), std::string::npos);
  EXPECT_NE(h->status().message().find("missing from rank(s) 1"), std::string::npos);
}

TEST(EngineTest, StoreCommunicatorCarriesTheSameProtocol) {
  auto store = std::make_shared<store::HashStore>();
  std::vector<std::unique_ptr<Engine>> engines;
  for (int r = 0; r < 2; ++r) {
    engines.push_back(std::make_unique<Engine>(
        std::make_unique<comm::StoreCommunicator>(store, r, 2, 20s), FastOptions()));
  }
  OnEveryRank(2, [&](int rank) {
    // A name longer than a negotiation slot forces the second, sized exchange round.
    const std::string long_name(1500, 'n');
    std::vector<float> v(10, float(rank));
    WaitOk(engines[rank]->Enqueue(Make(OpType::kAllreduce, long_name, {10}), v.data()));
    EXPECT_EQ(v[9], 1.0f);
  });
}

}  // namespace
}  // namespace cadre::engine
