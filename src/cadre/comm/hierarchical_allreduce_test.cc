// Hierarchical allreduce on real communicators: threads as ranks, a host name per thread (ranks
// of one "host" share memory, hosts talk over loopback TCP), every layout the issue names, uneven
// counts, closed-form values; host grids; the flat fallback; bad grids.
#include "cadre/comm/hierarchical_allreduce.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cadre/comm/collectives.h"
#include "cadre/comm/comm_test_util.h"

namespace cadre::comm {
namespace {

using testing::CheckSumAndMax;
using testing::RunRanks;
using testing::Value;

struct Layout {
  int hosts;
  int slots;
};

std::string HostOf(int rank, int slots) { return "host-" + std::to_string(rank / slots); }

// Pretend hosts are names only: every rank listens on loopback, so the names need not resolve.
CommunicatorOptions Base() {
  CommunicatorOptions o;
  o.bind_address = "127.0.0.1";
  o.timeout = std::chrono::seconds(20);
  return o;
}

void RunLayout(Layout l, const std::function<void(Communicator&)>& fn) {
  RunRanks(l.hosts * l.slots, Base(), fn, [&](int r) { return HostOf(r, l.slots); });
}

class HierarchicalAllreduceTest : public ::testing::TestWithParam<Layout> {};

TEST_P(HierarchicalAllreduceTest, ThroughAllreduceDispatch) {
  RunLayout(GetParam(), [](Communicator& comm) {
    CheckSumAndMax(comm, [&](const AllreduceOptions& o) {
      AllreduceOptions h = o;
      h.algorithm = AllreduceAlgorithm::kHierarchical;
      Allreduce(comm, h);
    });
  });
}

TEST_P(HierarchicalAllreduceTest, HierarchyObjectWithTheChosenGrid) {
  const Layout l = GetParam();
  RunLayout(l, [&](Communicator& comm) {
    auto h = Hierarchy::Create(comm);
    EXPECT_FALSE(h->flat());
    EXPECT_EQ(h->levels().front(), l.slots);
    CheckSumAndMax(comm, [&](const AllreduceOptions& o) { h->Allreduce(o); });
  });
}

INSTANTIATE_TEST_SUITE_P(Layouts, HierarchicalAllreduceTest,
                         ::testing::Values(Layout{1, 1}, Layout{1, 4}, Layout{2, 1}, Layout{2, 2},
                                           Layout{3, 2}, Layout{2, 3}),
                         [](const ::testing::TestParamInfo<Layout>& info) {
                           return std::to_string(info.param.hosts) + "hosts_x" +
                                  std::to_string(info.param.slots) + "slots";
                         });

// DDL's multi-ring: 4 hosts as a 2x2 grid, 2 slots each (levels 2, 2, 2), against the plain ring.
TEST(HierarchicalAllreduce, HostGridOfTwoDimensions) {
  RunLayout({4, 2}, [](Communicator& comm) {
    auto grid = Hierarchy::Create(comm, {.host_grid = {2, 2}});
    EXPECT_EQ(grid->levels(), (std::vector<int>{2, 2, 2}));
    auto ring = Hierarchy::Create(comm);  // chosen: 4 hosts -> one ring
    EXPECT_EQ(ring->levels(), (std::vector<int>{2, 4}));
    for (Hierarchy* h : {grid.get(), ring.get()}) {
      CheckSumAndMax(comm, [&](const AllreduceOptions& o) { h->Allreduce(o); });
    }
  });
}

// The grid's inner dimensions reduce-scatter over TCP (one rank per host): blocks of very
// different sizes, several ring segments each (1 MiB), one empty, out of place; 2 and 4 ranks.
TEST(HierarchicalAllreduce, TcpReduceScatterOfLargeUnevenBlocks) {
  for (int n : {2, 4}) {
    RunRanks(
        n, Base(),
        [&](Communicator& comm) {
          ASSERT_EQ(comm.topology().cross_size, n);
          std::vector<size_t> counts;
          for (int r = 0; r < n; ++r) counts.push_back(r == 1 ? 0 : size_t(r + 1) * 150001);
          size_t total = 0, mine_at = 0;
          for (int r = 0; r < n; ++r) {
            if (r == comm.rank()) mine_at = total;
            total += counts[static_cast<size_t>(r)];
          }
          std::vector<double> in(total);
          for (size_t i = 0; i < total; ++i) in[i] = static_cast<double>(Value(comm.rank(), i));
          std::vector<double> out(counts[static_cast<size_t>(comm.rank())] + 1, -1.0);
          ReduceScatterOptions o;
          o.input = in.data();
          o.output = out.data();
          o.counts = counts;
          o.dtype = DataType::kFloat64;
          ReduceScatter(comm, o);
          for (size_t i = 0; i < counts[static_cast<size_t>(comm.rank())]; ++i) {
            double want = 0;
            for (int q = 0; q < n; ++q) want += static_cast<double>(Value(q, mine_at + i));
            ASSERT_EQ(out[i], want) << n << " ranks, element " << i;
          }
          EXPECT_EQ(out.back(), -1.0) << "wrote past its block";
        },
        [](int r) { return HostOf(r, 1); });
  }
}

// A rank that leaves instead of joining a pipelined allreduce: every other rank (its host peer in
// the shared-memory steps, its ring peer on the helper thread, the ranks of the other host behind
// them) throws within the timeout instead of hanging; none waits for chunks that never come.
TEST(HierarchicalAllreduce, PipelinedAllreduceFailsEverywhereWhenARankLeaves) {
  CommunicatorOptions base = Base();
  base.timeout = std::chrono::seconds(3);
  RunRanks(
      4, base,
      [](Communicator& comm) {
        auto h = Hierarchy::Create(comm);
        if (comm.rank() == 3) return;  // closes its connections and leaves its host group
        std::vector<float> buf(40000, 1.0f);
        AllreduceOptions o;
        o.input = o.output = buf.data();
        o.count = buf.size();
        o.segment_bytes = 4096;  // 40 pipeline chunks
        const auto start = std::chrono::steady_clock::now();
        EXPECT_THROW(h->Allreduce(o), Error) << "rank " << comm.rank();
        EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30))
            << "rank " << comm.rank();
      },
      [](int r) { return HostOf(r, 2); });
}

// Hosts holding different numbers of ranks cannot be cut into equal levels: the flat ring.
TEST(HierarchicalAllreduce, UnevenHostsFallBackToTheFlatRing) {
  RunRanks(
      3, Base(),
      [](Communicator& comm) {
        ASSERT_FALSE(comm.topology().homogeneous);
        auto h = Hierarchy::Create(comm);
        EXPECT_TRUE(h->flat());
        EXPECT_EQ(h->levels(), (std::vector<int>{3}));
        CheckSumAndMax(comm, [&](const AllreduceOptions& o) { h->Allreduce(o); });
        CheckSumAndMax(comm, [&](const AllreduceOptions& o) {
          AllreduceOptions x = o;
          x.algorithm = AllreduceAlgorithm::kHierarchical;  // becomes the flat ring here
          Allreduce(comm, x);
        });
      },
      [](int r) { return r < 2 ? std::string("big") : std::string("small"); });
}

TEST(HierarchicalAllreduce, GridThatDoesNotFitIsRefusedNamingBoth) {
  RunLayout({2, 2}, [](Communicator& comm) {
    try {
      Hierarchy::Create(comm, {.host_grid = {2, 2}});
      ADD_FAILURE() << "a 2x2 grid of hosts was accepted for 2 hosts";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("host grid 2x2 holds 4 hosts, the communicator has 2"),
                std::string::npos)
          << e.what();
    }
  });
}

}  // namespace
}  // namespace cadre::comm
