// The engine over the real communication core: threads as ranks, each with its own
// Communicator over one HashStore (shared memory within an emulated host, TCP across).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "cadre/base/test_ranks.h"
#include "cadre/comm/collectives.h"
#include "cadre/engine/engine.h"
#include "cadre/engine/group.h"
#include "cadre/store/hash_store.h"

namespace cadre::engine {
namespace {

using namespace std::chrono_literals;

void WaitOk(const std::shared_ptr<Handle>& h) {
  ASSERT_TRUE(h->Wait(60s));
  ASSERT_TRUE(h->status().ok()) << h->status().ToString();
}

class EngineOnCommTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(EngineOnCommTest, EngineCollectivesMatchClosedForm) {
  const auto [size, use_shm] = GetParam();
  auto store = std::make_shared<store::HashStore>();
  cadre::testing::RunThreadsAsRanks(size, [&](int rank) {
    comm::CommunicatorOptions o;
    o.rank = rank;
    o.size = size;
    o.store = store;
    o.token = "engine-test";
    o.host = "host-" + std::to_string(rank % 2);
    o.bind_address = "127.0.0.1";  // the emulated host names do not resolve
    o.use_shm = use_shm;
    o.timeout = 30s;
    EngineOptions eo;
    eo.cycle_time = 1ms;
    eo.fusion_threshold_bytes = 256;
    eo.fusion_segment_bytes = 40;
    EngineGroupOptions g;
    g.comm = o;
    auto group = CreateEngineGroup(g);
    // auto means the hierarchical algorithm exactly when hosts hold several slots each
    // (size 4: two hosts of two ranks; size 3 has hosts of 2 and 1 rank) over shared memory.
    const bool hierarchical = use_shm && size == 4;
    EXPECT_EQ(comm::ChooseAllreduceAlgorithm(eo.allreduce_algorithm, comm::ShapeOf(*group, 0)) ==
                  comm::AllreduceAlgorithm::kHierarchical,
              hierarchical)
        << "size " << size << (use_shm ? " shm" : " tcp");
    Engine e(std::move(group), eo);
    // Twenty allreduces of odd lengths (fused into several buffers), twice (second time
    // through the response cache).
    for (int round = 0; round < 2; ++round) {
      std::vector<std::vector<double>> data;
      std::vector<std::shared_ptr<Handle>> hs;
      for (int t = 0; t < 20; ++t) data.emplace_back(2 * t + 1, rank + t);
      for (int t = 0; t < 20; ++t) {
        Request r;
        r.name = "grad." + std::to_string(t);
        r.dtype = comm::DataType::kFloat64;
        r.shape = {2 * t + 1};
        r.postscale = 1.0 / size;
        hs.push_back(e.Enqueue(r, data[t].data()));
      }
      for (int t = 0; t < 20; ++t) {
        WaitOk(hs[t]);
        const double expect = (size - 1) / 2.0 + t;
        for (double v : data[t]) EXPECT_DOUBLE_EQ(v, expect) << "t=" << t;
      }
    }
    // Ragged allgather.
    std::vector<float> rows(rank + 1, float(rank));
    Request ag;
    ag.op = OpType::kAllgather;
    ag.name = "ag";
    ag.shape = {rank + 1};
    auto h = e.Enqueue(ag, rows.data());
    WaitOk(h);
    const float* out = reinterpret_cast<const float*>(h->output().data());
    for (int r = 0, i = 0; r < size; ++r) {
      for (int k = 0; k <= r; ++k) EXPECT_EQ(out[i++], float(r));
    }
    // Reducescatter and alltoall.
    std::vector<int64_t> rs(size * 2, rank);
    Request rq;
    rq.op = OpType::kReducescatter;
    rq.name = "rs";
    rq.dtype = comm::DataType::kInt64;
    rq.shape = {size, 2};
    auto rh = e.Enqueue(rq, rs.data());
    WaitOk(rh);
    const int64_t* ro = reinterpret_cast<const int64_t*>(rh->output().data());
    EXPECT_EQ(ro[1], int64_t(size) * (size - 1) / 2);
    std::vector<int32_t> send(size);
    for (int j = 0; j < size; ++j) send[j] = 10 * rank + j;
    Request aq;
    aq.op = OpType::kAlltoall;
    aq.name = "a2a";
    aq.dtype = comm::DataType::kInt32;
    aq.shape = {size};
    auto ah = e.Enqueue(aq, send.data());
    WaitOk(ah);
    const int32_t* ao = reinterpret_cast<const int32_t*>(ah->output().data());
    for (int j = 0; j < size; ++j) EXPECT_EQ(ao[j], 10 * j + rank);
  });
}

// Averaged tensors larger than a fusion segment are reduced in place segment by segment, the
// small ones around them packed: every element must land where it came from, scaled once.
TEST(EngineOnComm, AveragedTensorsSpanningSegmentsKeepEveryElementInPlace) {
  constexpr int kSize = 2;
  auto store = std::make_shared<store::HashStore>();
  cadre::testing::RunThreadsAsRanks(kSize, [&](int rank) {
    comm::CommunicatorOptions o;
    o.rank = rank;
    o.size = kSize;
    o.store = store;
    o.token = "engine-segments";
    o.host = "host-0";
    o.bind_address = "127.0.0.1";
    o.timeout = 30s;
    EngineOptions eo;
    eo.cycle_time = 1ms;
    eo.fusion_threshold_bytes = 1 << 20;
    eo.fusion_segment_bytes = 64;  // 16 floats: the large tensor spans many segments
    EngineGroupOptions g;
    g.comm = o;
    Engine e(CreateEngineGroup(g), eo);
    const std::vector<int64_t> lengths = {5, 1001, 7, 300};
    std::vector<std::vector<float>> data;
    std::vector<std::shared_ptr<Handle>> hs;
    for (size_t t = 0; t < lengths.size(); ++t) {
      data.emplace_back(lengths[t]);
      for (int64_t i = 0; i < lengths[t]; ++i) data[t][i] = float(10000 * t + i + 4 * rank);
    }
    for (size_t t = 0; t < lengths.size(); ++t) {
      Request r;
      r.name = "avg." + std::to_string(t);
      r.dtype = comm::DataType::kFloat32;
      r.shape = {lengths[t]};
      r.postscale = 1.0 / kSize;
      hs.push_back(e.Enqueue(r, data[t].data()));
    }
    for (size_t t = 0; t < lengths.size(); ++t) {
      WaitOk(hs[t]);
      for (int64_t i = 0; i < lengths[t]; ++i) {
        ASSERT_EQ(data[t][i], float(10000 * t + i + 2)) << "tensor " << t << " element " << i;
      }
    }
  });
}

// Rank 0 decides the batching window, measured or fixed, and every rank uses its window, even
// ranks configured otherwise. `windows` gets each rank's window after training steps.
void TrainAndCollectWindows(int size, const std::function<EngineOptions(int)>& options_of,
                            std::vector<std::chrono::microseconds>* windows) {
  auto store = std::make_shared<store::HashStore>();
  windows->assign(size, std::chrono::microseconds(-1));
  cadre::testing::RunThreadsAsRanks(size, [&](int rank) {
    comm::CommunicatorOptions o;
    o.rank = rank;
    o.size = size;
    o.store = store;
    o.token = "engine-batch-window";
    o.host = "host-" + std::to_string(rank);  // one host per rank: TCP over loopback
    o.bind_address = "127.0.0.1";
    o.timeout = 30s;
    EngineGroupOptions g;
    g.comm = o;
    Engine e(CreateEngineGroup(g), options_of(rank));
    // Training steps as DistributedOptimizer makes them: gradients from backward hooks
    // (batchable), then Flush() once every gradient is submitted, then the wait.
    std::vector<float> grads[2] = {std::vector<float>(100, 1.0f), std::vector<float>(3, 1.0f)};
    for (int step = 0; step < 10; ++step) {
      std::vector<std::shared_ptr<Handle>> hs;
      for (int t = 0; t < 2; ++t) {
        Request r;
        r.name = "grad." + std::to_string(t);
        r.shape = {static_cast<int64_t>(grads[t].size())};
        hs.push_back(e.Enqueue(r, grads[t].data(), /*batchable=*/true));
      }
      e.Flush();
      for (auto& h : hs) WaitOk(h);
    }
    // Rank 0 announces a decision in the cycle that takes its last Flush(), no later than the one
    // that takes this allreduce (submitted after it), and every rank adopts the window before it
    // runs that cycle's operations: once this completes, every rank holds rank 0's last window.
    std::vector<float> sync(1, 1.0f);
    Request r;
    r.name = "sync";
    r.shape = {1};
    WaitOk(e.Enqueue(r, sync.data()));
    EXPECT_EQ(sync[0], float(size));
    (*windows)[rank] = e.batch_window();
  });
}

TEST(EngineOnComm, EveryRankUsesRankZerosMeasuredBatchWindow) {
  constexpr int kSize = 3;
  // Candidates that are none of the ranks' starting windows, so a window that reached rank 1 or
  // 2 can only have come from rank 0's tuner. 10 steps are 9 measured intervals, more than the
  // 1 warm-up + 2 x (1 settle + 1 scored) the tuner needs.
  EngineOptions measured;
  measured.cycle_time = 1ms;
  measured.batch_window_tuning.candidates = {std::chrono::microseconds(0),
                                             std::chrono::microseconds(300)};
  measured.batch_window_tuning.initial = 1ms;
  measured.batch_window_tuning.warmup_steps = 1;
  measured.batch_window_tuning.settle_steps = 1;
  measured.batch_window_tuning.steps_per_candidate = 1;
  char log_path[] = "/tmp/cadre-batch-window-XXXXXX";
  const int fd = mkstemp(log_path);
  ASSERT_GE(fd, 0);
  close(fd);
  measured.batch_window_log = log_path;  // HOROVOD_AUTOTUNE_LOG
  std::vector<std::chrono::microseconds> windows;
  TrainAndCollectWindows(
      kSize,
      [&](int rank) {
        if (rank == 0) return measured;
        EngineOptions fixed = measured;
        fixed.batch_wait = 2ms;  // rank 0's choice must win over this
        return fixed;
      },
      &windows);
  EXPECT_TRUE(windows[0] == std::chrono::microseconds(0) ||
              windows[0] == std::chrono::microseconds(300))
      << "rank 0 did not settle on a candidate: " << windows[0].count() << " us";
  for (int r = 1; r < kSize; ++r) EXPECT_EQ(windows[r], windows[0]) << "rank " << r;
  // Rank 0 alone wrote the log: a header and one row per scored step (one per candidate).
  std::ifstream in(log_path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  unlink(log_path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "batch_wait_ms,step_ms");
  EXPECT_EQ(lines[1].rfind("0,", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("0.3,", 0), 0u) << lines[2];
}

TEST(EngineOnComm, EveryRankUsesRankZerosFixedBatchWindow) {
  constexpr int kSize = 2;
  std::vector<std::chrono::microseconds> windows;
  TrainAndCollectWindows(
      kSize,
      [](int rank) {
        EngineOptions o;
        o.cycle_time = 1ms;
        o.batch_wait = rank == 0 ? std::chrono::microseconds(0) : std::chrono::microseconds(2000);
        return o;
      },
      &windows);
  EXPECT_EQ(windows[0], std::chrono::microseconds(0));
  EXPECT_EQ(windows[1], std::chrono::microseconds(0));
}

INSTANTIATE_TEST_SUITE_P(SizesAndTransports, EngineOnCommTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Bool()));

}  // namespace
}  // namespace cadre::engine
