// The engine over the real communication core: threads as ranks, each with its own
// Communicator over one HashStore (shared memory within an emulated host, TCP across).
#include <gtest/gtest.h>

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

INSTANTIATE_TEST_SUITE_P(SizesAndTransports, EngineOnCommTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Bool()));

}  // namespace
}  // namespace cadre::engine
