// CommunicatorOptions::shm_pairs on real communicators: threads as ranks on pretend hosts (ranks
// of one host talk over shared-memory pairs, hosts over loopback TCP, one MixedDevice per rank).
// Every flat allreduce algorithm at counts that do and do not divide by the ranks, in and out of
// place, closed-form values; the other collectives once each; the hierarchical allreduce still
// there. A killed rank is failure_test.cc's (processes).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cadre/comm/collectives.h"
#include "cadre/comm/comm_test_util.h"
#include "cadre/comm/communicator_impl.h"
#include "cadre/transport/mixed/device.h"

namespace cadre::comm {
namespace {

using testing::CheckSumAndMax;
using testing::RunRanks;
using testing::Value;

// Hosts holding the given numbers of ranks, in rank order.
std::function<std::string(int)> Hosts(std::vector<int> per_host) {
  return [per_host](int rank) {
    for (size_t h = 0; h < per_host.size(); rank -= per_host[h++]) {
      if (rank < per_host[h]) return "host-" + std::to_string(h);
    }
    return std::string("host-none");
  };
}

CommunicatorOptions Base() {
  CommunicatorOptions o;
  o.bind_address = "127.0.0.1";  // pretend hosts: names only
  o.shm_pairs = true;
  o.timeout = std::chrono::seconds(30);
  return o;
}

// The communicator's point-to-point device routes same-host peers over shared memory.
void ExpectRoutes(Communicator& comm) {
  auto* impl = dynamic_cast<CommunicatorImpl*>(&comm);
  ASSERT_NE(impl, nullptr);
  auto* dev = dynamic_cast<transport::mixed::MixedDevice*>(impl->tcp());
  ASSERT_NE(dev, nullptr) << "rank " << comm.rank() << " has no mixed device";
  const Topology& t = comm.topology();
  for (int p = 0; p < t.size; ++p) {
    if (p == t.rank) continue;
    EXPECT_EQ(dev->on_host(p), t.hosts[p] == t.hosts[t.rank]) << "rank " << t.rank << " peer " << p;
  }
}

struct Case {
  std::vector<int> per_host;
  AllreduceAlgorithm algorithm;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string name;
  for (int n : info.param.per_host) name += std::to_string(n);
  switch (info.param.algorithm) {
    case AllreduceAlgorithm::kRing:
      return name + "_ring";
    case AllreduceAlgorithm::kHalvingDoubling:
      return name + "_halving_doubling";
    case AllreduceAlgorithm::kRecursiveDoubling:
      return name + "_recursive_doubling";
    default:
      return name + "_auto";
  }
}

class ShmPairsAllreduceTest : public ::testing::TestWithParam<Case> {};

TEST_P(ShmPairsAllreduceTest, EveryElementAtEveryCount) {
  const Case c = GetParam();
  int size = 0;
  for (int n : c.per_host) size += n;
  RunRanks(
      size, Base(),
      [&](Communicator& comm) {
        ExpectRoutes(comm);
        CheckSumAndMax(comm, [&](const AllreduceOptions& o) {
          AllreduceOptions x = o;
          x.algorithm = c.algorithm;
          Allreduce(comm, x);
        });
      },
      Hosts(c.per_host));
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (std::vector<int> hosts : {std::vector<int>{2, 2}, {3, 3}, {2, 2, 2}, {2, 3}, {4, 4}}) {
    for (AllreduceAlgorithm a :
         {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kHalvingDoubling,
          AllreduceAlgorithm::kRecursiveDoubling, AllreduceAlgorithm::kAuto}) {
      cases.push_back({hosts, a});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Layouts, ShmPairsAllreduceTest, ::testing::ValuesIn(Cases()), CaseName);

TEST(ShmPairsTest, OtherCollectivesAndTheHierarchicalAllreduce) {
  // 2 + 3 ranks: broadcast from a rank of each host, allgather of uneven counts, reducescatter,
  // alltoall, barrier; then the hierarchical allreduce on 2 x 2, whose levels are unchanged.
  RunRanks(
      5, Base(),
      [&](Communicator& comm) {
        ExpectRoutes(comm);
        const int n = comm.size(), r = comm.rank();
        for (int root : {0, 3}) {
          std::vector<int32_t> b(3001, r == root ? root + 10 : -1);
          BroadcastOptions bo;
          bo.buffer = b.data();
          bo.count = b.size();
          bo.dtype = DataType::kInt32;
          bo.root = root;
          Broadcast(comm, bo);
          EXPECT_EQ(b, std::vector<int32_t>(3001, root + 10)) << "rank " << r;
        }
        std::vector<size_t> counts;
        size_t total = 0;
        for (int q = 0; q < n; ++q) total += counts.emplace_back(size_t(q) * 1000 + 1);
        std::vector<int64_t> mine(counts[r], r), all(total, -1);
        AllgatherOptions ao;
        ao.input = mine.data();
        ao.output = all.data();
        ao.counts = counts;
        ao.dtype = DataType::kInt64;
        Allgather(comm, ao);
        for (size_t i = 0, q = 0, left = counts[0]; i < total; ++i, --left) {
          while (left == 0) left = counts[++q];
          ASSERT_EQ(all[i], static_cast<int64_t>(q)) << "allgather element " << i;
        }
        std::vector<double> in(total), out(counts[r]);
        for (size_t i = 0; i < total; ++i) in[i] = static_cast<double>(Value(r, i));
        ReduceScatterOptions ro;
        ro.input = in.data();
        ro.output = out.data();
        ro.counts = counts;
        ro.dtype = DataType::kFloat64;
        ReduceScatter(comm, ro);
        size_t at = 0;
        for (int q = 0; q < r; ++q) at += counts[q];
        for (size_t i = 0; i < counts[r]; ++i) {
          double want = 0;
          for (int q = 0; q < n; ++q) want += static_cast<double>(Value(q, at + i));
          ASSERT_EQ(out[i], want) << "reducescatter element " << i;
        }
        std::vector<size_t> ones(n, 2);
        std::vector<int32_t> send(2 * n), recv(2 * n, -1);
        for (int q = 0; q < n; ++q) send[2 * q] = send[2 * q + 1] = r * 100 + q;
        AlltoallOptions to;
        to.input = send.data();
        to.output = recv.data();
        to.send_counts = to.recv_counts = ones;
        to.dtype = DataType::kInt32;
        Alltoall(comm, to);
        for (int q = 0; q < n; ++q) EXPECT_EQ(recv[2 * q], q * 100 + r) << "alltoall from " << q;
        Barrier(comm);
      },
      Hosts({2, 3}));
  RunRanks(
      4, Base(),
      [&](Communicator& comm) {
        ASSERT_TRUE(comm.HierarchicalPossible());
        ExpectRoutes(comm);
        EXPECT_EQ(dynamic_cast<transport::mixed::MixedDevice*>(
                      dynamic_cast<CommunicatorImpl&>(comm.Cross()).tcp()),
                  nullptr)
            << "the level across the hosts has one rank per host: plain TCP";
        std::vector<float> v(10007);
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(Value(comm.rank(), i));
        AllreduceOptions o;
        o.input = o.output = v.data();
        o.count = v.size();
        o.algorithm = AllreduceAlgorithm::kHierarchical;
        Allreduce(comm, o);
        for (size_t i = 0; i < v.size(); ++i) {
          float want = 0;
          for (int q = 0; q < 4; ++q) want += static_cast<float>(Value(q, i));
          ASSERT_EQ(v[i], want) << "element " << i;
        }
      },
      Hosts({2, 2}));
}

TEST(ShmPairsTest, ARankThatLeavesIsNamedByItsSameHostPeer) {
  // Rank 1 leaves after a few allreduces (its communicator is destroyed, as when its thread
  // dies), while the others wait for its broadcast: rank 0, on its host, fails naming it rather
  // than waiting for the timeout, and so do the ranks of the other host (over TCP).
  CommunicatorOptions base = Base();
  base.timeout = std::chrono::seconds(60);
  RunRanks(
      4, base,
      [&](Communicator& comm) {
        std::vector<float> v(1 << 14, 1.0f);
        AllreduceOptions o;
        o.input = o.output = v.data();
        o.count = v.size();
        for (AllreduceAlgorithm a :
             {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kHalvingDoubling,
              AllreduceAlgorithm::kRecursiveDoubling}) {
          o.algorithm = a;
          Allreduce(comm, o);
        }
        if (comm.rank() == 1) return;
        BroadcastOptions b;
        b.buffer = v.data();
        b.count = v.size();
        b.root = 1;
        try {
          Broadcast(comm, b);
          ADD_FAILURE() << "rank " << comm.rank() << " received a broadcast from a rank gone";
        } catch (const Error& e) {
          const std::string what = e.what();
          EXPECT_EQ(e.code(), Code::kIo) << what;
          const std::string named =
              comm.rank() == 0
                  ? "rank 1 (host host-0) closed its end"
                  : "rank 1 (host host-0) closed its connection without a failure notice";
          EXPECT_NE(what.find(named), std::string::npos) << what;
        }
      },
      Hosts({2, 2}));
}

}  // namespace
}  // namespace cadre::comm
