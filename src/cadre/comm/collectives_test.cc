// Every collective, over shared memory and over TCP, at world sizes 1, 2, 3, 4 and 7, with
// closed-form expected values.
#include "cadre/comm/collectives.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "cadre/base/test_ranks.h"
#include "cadre/comm/comm_test_util.h"
#include "cadre/comm/typed_values.h"

namespace cadre::comm {
namespace {

using testing::Get;
using testing::Make;
using testing::RunRanks;

// Inputs small enough that every dtype holds every result exactly.
double Value(DataType dt, ReduceOp op, int rank, size_t i) {
  if (dt == DataType::kBool) return double((rank + i) % 3 != 0);
  if (op == ReduceOp::kProduct) return 1.0 + double((rank + i) % 2);
  double v = double((rank * 7 + i) % 11);
  return testing::IsSigned(dt) ? v - 3 : v;
}

double Expected(DataType dt, ReduceOp op, int size, size_t i) {
  double acc = Value(dt, op, 0, i);
  for (int r = 1; r < size; ++r) {
    acc = testing::Combine(dt, op, acc, Value(dt, op, r, i));
  }
  return acc;
}

class CollectivesTest : public ::testing::TestWithParam<std::tuple<bool, int>> {
 protected:
  bool shm() const { return std::get<0>(GetParam()); }
  int size() const { return std::get<1>(GetParam()); }
  CommunicatorOptions Base() const {
    CommunicatorOptions o;
    o.use_shm = shm();
    o.timeout = std::chrono::seconds(30);
    return o;
  }
};

void CheckAllreduce(Communicator& comm, DataType dt, ReduceOp op, size_t count, bool in_place,
                    const AllreduceOptions& extra = {}) {
  auto in = Make(dt, count, [&](size_t i) { return Value(dt, op, comm.rank(), i); });
  std::vector<uint8_t> out(in.size());
  AllreduceOptions o = extra;
  o.input = in.data();
  o.output = in_place ? in.data() : out.data();
  o.count = count;
  o.dtype = dt;
  o.op = op;
  Allreduce(comm, o);
  const uint8_t* result = in_place ? in.data() : out.data();
  for (size_t i = 0; i < count; ++i) {
    double want = Expected(dt, op, comm.size(), i);
    ASSERT_EQ(Get(dt, result, i), want)
        << DataTypeName(dt) << " " << ReduceOpName(op) << " count " << count << " element " << i
        << (in_place ? " in place" : "");
  }
  if (!in_place) {  // the input is left alone
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(Get(dt, in.data(), i), Value(dt, op, comm.rank(), i));
    }
  }
}

// Every algorithm the transport has (over shared memory, the one of shm_collectives.cc).
std::vector<AllreduceAlgorithm> Algorithms(bool shm) {
  if (shm) return {AllreduceAlgorithm::kAuto};
  return {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kHalvingDoubling,
          AllreduceAlgorithm::kRecursiveDoubling};
}

TEST_P(CollectivesTest, AllreduceEveryDtypeAndOp) {
  RunRanks(size(), Base(), [&](Communicator& comm) {
    for (auto algo : Algorithms(shm())) {
      AllreduceOptions extra;
      extra.algorithm = algo;
      for (int d = 0; d < kNumDataTypes; ++d) {
        for (int o = 0; o < kNumReduceOps; ++o) {
          for (size_t count : {size_t{0}, size_t{1}, size_t{37}}) {
            for (bool in_place : {false, true}) {
              CheckAllreduce(comm, DataType(d), ReduceOp(o), count, in_place, extra);
            }
          }
        }
      }
    }
  });
}

TEST_P(CollectivesTest, AllreduceSeveralMiB) {
  const size_t count = (3 << 20) / 4 + 3;  // 3 MiB of float32 and an odd tail
  RunRanks(size(), Base(), [&](Communicator& comm) {
    CheckAllreduce(comm, DataType::kFloat32, ReduceOp::kSum, count, true);
    CheckAllreduce(comm, DataType::kInt32, ReduceOp::kMax, count / 3, false);
  });
}

// Above 8 MiB the shared-memory path takes smaller chunks than its slot; a caller's segment
// limit still wins when it is smaller. Odd counts leave a tail in the last chunk.
TEST_P(CollectivesTest, AllreduceAboveEightMiB) {
  RunRanks(size(), Base(), [&](Communicator& comm) {
    CheckAllreduce(comm, DataType::kFloat32, ReduceOp::kSum, (9 << 20) / 4 + 5, true);
    CheckAllreduce(comm, DataType::kFloat64, ReduceOp::kMax, (9 << 20) / 8 + 3, false);
    AllreduceOptions segments;
    segments.segment_bytes = 96 << 10;
    CheckAllreduce(comm, DataType::kInt32, ReduceOp::kSum, (9 << 20) / 4 + 1, true, segments);
  });
}

// The chunked shared-memory path (above 32 KiB) with every dtype and op, in place and not; the
// count leaves an odd tail that no rank's slice divides.
TEST_P(CollectivesTest, AllreduceLargeEveryDtypeAndOp) {
  if (!shm()) GTEST_SKIP() << "the TCP algorithms are covered at other counts above";
  RunRanks(size(), Base(), [&](Communicator& comm) {
    for (int d = 0; d < kNumDataTypes; ++d) {
      for (int o = 0; o < kNumReduceOps; ++o) {
        for (bool in_place : {false, true}) {
          CheckAllreduce(comm, DataType(d), ReduceOp(o), 70001, in_place);
        }
      }
    }
  });
}

TEST_P(CollectivesTest, AllreduceTinySegmentsForceChunking) {
  RunRanks(size(), Base(), [&](Communicator& comm) {
    for (auto algo : Algorithms(shm())) {
      AllreduceOptions extra;
      extra.segment_bytes = 64;
      extra.algorithm = algo;
      CheckAllreduce(comm, DataType::kFloat64, ReduceOp::kSum, 1001, false, extra);
      CheckAllreduce(comm, DataType::kBFloat16, ReduceOp::kMin, 257, true, extra);
      extra.segment_bytes = 1;  // below one element: still one element per piece
      CheckAllreduce(comm, DataType::kInt8, ReduceOp::kMax, 33, true, extra);
    }
  });
}

// A producer thread hands the pieces over one by one, as a pipeline's reduce-scatters do.
class Producer {
 public:
  explicit Producer(size_t pieces, size_t give_up_at = SIZE_MAX)
      : pieces_(pieces), give_up_at_(give_up_at), thread_([this] { Run(); }) {}
  ~Producer() { thread_.join(); }
  bool Ready(size_t k, bool wait) {
    std::unique_lock lock(mu_);
    if (wait) cv_.wait(lock, [&] { return ready_ > k || stopped_; });
    return ready_ > k;
  }

 private:
  void Run() {
    for (size_t k = 0; k < pieces_; ++k) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      std::lock_guard lock(mu_);
      if (k == give_up_at_) {
        stopped_ = true;
        cv_.notify_all();
        return;
      }
      ready_ = k + 1;
      cv_.notify_all();
    }
  }
  const size_t pieces_, give_up_at_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t ready_ = 0;      // GUARDED_BY(mu_)
  bool stopped_ = false;  // GUARDED_BY(mu_)
  std::thread thread_;
};

TEST_P(CollectivesTest, StreamedAllreduceEveryPieceInOrder) {
  // Empty pieces, one element, odd sizes, one of 1 MiB; sums of int32 and products of float64.
  const std::vector<size_t> counts = {0, 1, 37, 1000, 0, (1 << 20) / 4, 5};
  RunRanks(size(), Base(), [&](Communicator& comm) {
    EXPECT_EQ(StreamsPieces(comm), !shm() && comm.size() == 2);
    for (DataType dt : {DataType::kInt32, DataType::kFloat64}) {
      const ReduceOp op = dt == DataType::kInt32 ? ReduceOp::kSum : ReduceOp::kProduct;
      std::vector<std::vector<uint8_t>> in, out;
      StreamedAllreduceOptions o;
      o.dtype = dt;
      o.op = op;
      for (size_t c : counts) {
        in.push_back(Make(dt, c, [&](size_t i) { return Value(dt, op, comm.rank(), i); }));
        out.emplace_back(c * ElementSize(dt), 0xA5);
      }
      for (size_t k = 0; k < counts.size(); ++k) {
        o.stream.inputs.push_back(in[k].data());
        o.stream.outputs.push_back(out[k].data());
        o.stream.counts.push_back(counts[k]);
      }
      std::vector<size_t> done;
      Producer producer(counts.size());
      o.stream.ready = [&](size_t k, bool wait) { return producer.Ready(k, wait); };
      o.stream.done = [&](size_t k) {
        EXPECT_TRUE(producer.Ready(k, false)) << "piece " << k << " done before it was ready";
        done.push_back(k);
      };
      StreamedAllreduce(comm, o);
      std::vector<size_t> order(counts.size());
      std::iota(order.begin(), order.end(), size_t{0});
      EXPECT_EQ(done, order);
      for (size_t k = 0; k < counts.size(); ++k) {
        for (size_t i = 0; i < counts[k]; ++i) {
          ASSERT_EQ(Get(dt, out[k].data(), i), Expected(dt, op, comm.size(), i))
              << DataTypeName(dt) << " piece " << k << " element " << i;
          ASSERT_EQ(Get(dt, in[k].data(), i), Value(dt, op, comm.rank(), i)) << "input changed";
        }
      }
    }
  });
}

TEST_P(CollectivesTest, StreamedAllreduceProducerGivingUpFailsEveryRankFast) {
  if (size() < 2) GTEST_SKIP() << "needs a peer";
  CommunicatorOptions base = Base();
  base.timeout = std::chrono::seconds(60);  // a rank that waited for it would fail the test
  RunRanks(size(), base, [&](Communicator& comm) {
    std::vector<std::vector<float>> in(4, std::vector<float>(1000, 1.0f)), out = in;
    StreamedAllreduceOptions o;
    for (size_t k = 0; k < in.size(); ++k) {
      o.stream.inputs.push_back(in[k].data());
      o.stream.outputs.push_back(out[k].data());
      o.stream.counts.push_back(in[k].size());
    }
    Producer producer(in.size(), comm.rank() == 0 ? 2 : SIZE_MAX);  // rank 0's stops at piece 2
    o.stream.ready = [&](size_t k, bool wait) { return producer.Ready(k, wait); };
    o.stream.done = [](size_t) {};
    const auto start = Clock::now();
    try {
      StreamedAllreduce(comm, o);
      ADD_FAILURE() << "rank " << comm.rank() << ": the stream completed without piece 2";
    } catch (const Error& e) {
      if (comm.rank() == 0) {
        EXPECT_EQ(e.code(), Code::kAborted) << e.what();
        EXPECT_NE(std::string(e.what()).find("piece 2 of 4"), std::string::npos) << e.what();
      } else {
        EXPECT_NE(e.code(), Code::kTimeout) << e.what();
      }
    }
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(30)) << "rank " << comm.rank();
  });
}

TEST_P(CollectivesTest, StreamedAllreduceRejectsBadPieces) {
  RunRanks(size(), Base(), [&](Communicator& comm) {
    std::vector<float> a(8, 1.0f);
    StreamedAllreduceOptions o;
    o.stream = {{a.data()},    {a.data() + 4}, {8}, [](size_t, bool) { return true; },
                [](size_t) {}, nullptr};
    try {
      StreamedAllreduce(comm, o);
      ADD_FAILURE() << "overlapping input and output accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("piece 0"), std::string::npos) << e.what();
    }
    o.stream.counts.push_back(1);  // two counts, one input and one output
    EXPECT_THROW(StreamedAllreduce(comm, o), Error);
    Barrier(comm);  // still usable
  });
}

TEST_P(CollectivesTest, BroadcastFromEveryRoot) {
  RunRanks(size(), Base(), [&](Communicator& comm) {
    for (int root = 0; root < comm.size(); ++root) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{100003}}) {
        std::vector<int32_t> buf(count + 1, -1);
        if (comm.rank() == root) std::iota(buf.begin(), buf.end(), root * 1000);
        Broadcast(comm, {buf.data(), count, DataType::kInt32, root, std::nullopt});
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(buf[i], int32_t(root * 1000 + i)) << "root " << root << " element " << i;
        }
      }
    }
  });
}

TEST_P(CollectivesTest, AllgathervUnequalCountsAndInPlace) {
  RunRanks(size(), Base(), [&](Communicator& comm) {
    const int n = comm.size();
    std::vector<size_t> counts(n);
    for (int r = 0; r < n; ++r) counts[r] = r == 1 ? 0 : size_t(r) * 5001 + 3;
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    std::vector<size_t> offset(n, 0);
    for (int r = 1; r < n; ++r) offset[r] = offset[r - 1] + counts[r - 1];
    auto value = [](int r, size_t i) { return double(r) * 100000 + double(i); };
    for (bool in_place : {false, true}) {
      std::vector<double> out(total + 1, -1);
      std::vector<double> in(counts[comm.rank()] + 1);
      double* src = in_place ? out.data() + offset[comm.rank()] : in.data();
      for (size_t i = 0; i < counts[comm.rank()]; ++i) src[i] = value(comm.rank(), i);
      Allgather(comm, {src, out.data(), counts, DataType::kFloat64, std::nullopt});
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < counts[r]; ++i) {
          ASSERT_EQ(out[offset[r] + i], value(r, i)) << "block " << r << " element " << i;
        }
      }
    }
  });
}

TEST_P(CollectivesTest, ReduceScatterUnequalCounts) {
  RunRanks(size(), Base(), [&](Communicator& comm) {
    const int n = comm.size();
    std::vector<size_t> counts(n);
    for (int r = 0; r < n; ++r) counts[r] = size_t(r % 3) * 40000 + 1;
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    for (auto op : {ReduceOp::kSum, ReduceOp::kMax}) {
      auto dt = DataType::kInt64;
      auto in = Make(dt, total, [&](size_t i) { return Value(dt, op, comm.rank(), i); });
      std::vector<int64_t> out(counts[comm.rank()] + 1);
      ReduceScatter(comm, {in.data(), out.data(), counts, dt, op, std::nullopt});
      size_t offset = 0;
      for (int r = 0; r < comm.rank(); ++r) offset += counts[r];
      for (size_t i = 0; i < counts[comm.rank()]; ++i) {
        ASSERT_EQ(double(out[i]), Expected(dt, op, n, offset + i)) << "element " << i;
      }
    }
  });
}

TEST_P(CollectivesTest, AlltoallVariableCounts) {
  RunRanks(size(), Base(), [&](Communicator& comm) {
    const int n = comm.size(), me = comm.rank();
    // Rank s sends (s + d) % 3 * 30001 elements to rank d; element i is s*1e6 + d*1e3 + i.
    auto blk = [](int s, int d) { return size_t((s + d) % 3) * 30001; };
    std::vector<size_t> send(n), recv(n);
    for (int j = 0; j < n; ++j) {
      send[j] = blk(me, j);
      recv[j] = blk(j, me);
    }
    std::vector<float> in, out(std::accumulate(recv.begin(), recv.end(), size_t{0}) + 1);
    for (int d = 0; d < n; ++d) {
      for (size_t i = 0; i < send[d]; ++i) in.push_back(float(me * 100 + d * 10) + float(i % 7));
    }
    in.push_back(0);
    Alltoall(comm, {in.data(), out.data(), send, recv, DataType::kFloat32, std::nullopt});
    size_t pos = 0;
    for (int s = 0; s < n; ++s) {
      for (size_t i = 0; i < recv[s]; ++i, ++pos) {
        ASSERT_EQ(out[pos], float(s * 100 + me * 10) + float(i % 7)) << "from " << s;
      }
    }
  });
}

TEST_P(CollectivesTest, BarrierWaitsForEveryone) {
  std::atomic<int> arrived{0};
  std::atomic<int> early{0};
  RunRanks(size(), Base(), [&](Communicator& comm) {
    for (int round = 1; round <= 3; ++round) {
      if (comm.rank() == comm.size() - 1)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      arrived.fetch_add(1);
      Barrier(comm);
      if (arrived.load() < round * comm.size()) early.fetch_add(1);
      Barrier(comm);  // nobody starts the next round before everyone checked
    }
  });
  EXPECT_EQ(early.load(), 0);
}

TEST_P(CollectivesTest, StalledRankFailsTheOthersWithinTheTimeout) {
  if (size() < 2) GTEST_SKIP() << "needs a peer";
  CommunicatorOptions o = Base();
  o.timeout = std::chrono::milliseconds(1000);
  std::atomic<int> failed{0};
  RunRanks(size(), o, [&](Communicator& comm) {
    const int stalled = comm.size() - 1;
    if (comm.rank() == stalled) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1600));
      return;
    }
    std::vector<float> buf(1000, 1.0f);
    auto start = Clock::now();
    try {
      AllreduceOptions ar;
      ar.input = ar.output = buf.data();
      ar.count = buf.size();
      Allreduce(comm, ar);
      ADD_FAILURE() << "allreduce without rank " << stalled << " succeeded";
    } catch (const Error& e) {
      EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
      EXPECT_TRUE(e.code() == Code::kTimeout || e.code() == Code::kAborted || e.code() == Code::kIo)
          << e.what();
      if (shm()) {
        EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(stalled)), std::string::npos)
            << e.what();
      }
      failed.fetch_add(1);
    }
    // Broken from now on.
    try {
      Barrier(comm);
      ADD_FAILURE() << "a broken communicator ran a barrier";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kAborted) << e.what();
    }
  });
  EXPECT_EQ(failed.load(), size() - 1);
}

TEST_P(CollectivesTest, MismatchedCallsFailInsteadOfMixingData) {
  if (size() < 2) GTEST_SKIP() << "a single rank has nobody to disagree with";
  std::atomic<int> mismatches{0};
  RunRanks(size(), Base(), [&](Communicator& comm) {
    std::vector<float> buf(8, 1.0f);
    AllreduceOptions o;
    o.input = o.output = buf.data();
    o.count = comm.rank() == 0 ? 5 : 6;  // rank 0 disagrees on the count
    try {
      Allreduce(comm, o);
      ADD_FAILURE() << "mismatched allreduce succeeded";
    } catch (const Error& e) {
      EXPECT_TRUE(e.code() == Code::kMismatch || e.code() == Code::kAborted) << e.what();
      if (e.code() == Code::kMismatch) {
        mismatches.fetch_add(1);
        EXPECT_NE(std::string(e.what()).find("count 5"), std::string::npos) << e.what();
      }
    }
  });
  EXPECT_GE(mismatches.load(), 1);
}

TEST_P(CollectivesTest, DisagreeingOnTypeOrOpFailsEvenWhenTheSizesAgree) {
  // Same number of bytes on every rank, so no message length gives it away: rank 0 reduces
  // int32 where the others reduce float32, then max where the others sum.
  if (size() < 2) GTEST_SKIP() << "a single rank has nobody to disagree with";
  for (bool by_type : {true, false}) {
    SCOPED_TRACE(by_type ? "dtype" : "op");
    std::atomic<int> mismatches{0};
    RunRanks(size(), Base(), [&](Communicator& comm) {
      std::vector<float> buf(4, 1.0f);
      AllreduceOptions o;
      o.input = o.output = buf.data();
      o.count = buf.size();
      if (comm.rank() == 0 && by_type) o.dtype = DataType::kInt32;
      if (comm.rank() == 0 && !by_type) o.op = ReduceOp::kMax;
      try {
        Allreduce(comm, o);
        ADD_FAILURE() << "rank " << comm.rank() << ": a mismatched allreduce mixed the data";
      } catch (const Error& e) {
        EXPECT_TRUE(e.code() == Code::kMismatch || e.code() == Code::kAborted) << e.what();
        if (e.code() == Code::kMismatch) mismatches.fetch_add(1);
      }
    });
    EXPECT_GE(mismatches.load(), 1);
  }
}

TEST_P(CollectivesTest, BadArgumentsAreRejectedBeforeAnyExchange) {
  RunRanks(size(), Base(), [&](Communicator& comm) {
    float x = 0;
    AllgatherOptions ag{&x, &x, std::vector<size_t>(comm.size() + 1, 1), DataType::kFloat32,
                        std::nullopt};
    EXPECT_THROW(Allgather(comm, ag), Error);
    BroadcastOptions bc{&x, 1, DataType::kFloat32, comm.size(), std::nullopt};
    EXPECT_THROW(Broadcast(comm, bc), Error);
    AllreduceOptions ar;
    ar.input = ar.output = &x;
    ar.count = 1;
    ar.dtype = static_cast<DataType>(42);
    try {
      Allreduce(comm, ar);
      ADD_FAILURE() << "bad dtype accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kInvalidArgument);
    }
    Barrier(comm);  // still usable: argument errors do not break the communicator
  });
}

TEST(ChooseAllreduceAlgorithmTest, ByTopologyAndSize) {
  using A = AllreduceAlgorithm;
  auto choose = [](A requested, int size, size_t bytes, bool hierarchical, bool spread) {
    return ChooseAllreduceAlgorithm(requested, {size, bytes, hierarchical, spread});
  };
  // Hosts holding several slots: hierarchical at every size.
  EXPECT_EQ(choose(A::kAuto, 4, 4, true, false), A::kHierarchical);
  EXPECT_EQ(choose(A::kAuto, 4, 64 << 20, true, false), A::kHierarchical);
  // Two hosts of one rank: one exchange at every size.
  EXPECT_EQ(choose(A::kAuto, 2, 4, false, true), A::kRecursiveDoubling);
  EXPECT_EQ(choose(A::kAuto, 2, 64 << 20, false, true), A::kRecursiveDoubling);
  // Otherwise by size.
  for (int size : {4, 7}) {
    EXPECT_EQ(choose(A::kAuto, size, kRecursiveDoublingMaxBytes, false, false),
              A::kRecursiveDoubling);
    EXPECT_EQ(choose(A::kAuto, size, kRecursiveDoublingMaxBytes + 1, false, false),
              A::kHalvingDoubling);
    EXPECT_EQ(choose(A::kAuto, size, kHalvingDoublingMaxBytes + 1, false, false), A::kRing);
  }
  // Three ranks: halving-doubling's fold costs as many steps as the ring, and more bytes.
  for (bool spread : {false, true}) {
    EXPECT_EQ(choose(A::kAuto, 3, kRecursiveDoublingMaxBytes, false, spread),
              A::kRecursiveDoubling);
    EXPECT_EQ(choose(A::kAuto, 3, kRecursiveDoublingMaxBytes + 1, false, spread), A::kRing);
  }
  EXPECT_EQ(choose(A::kAuto, 2, 1 << 20, false, false), A::kRing);  // two ranks on one host
  // Across hosts too (one rank per host): the ring above 64 KiB.
  EXPECT_EQ(choose(A::kAuto, 4, kHalvingDoublingMaxBytes + 1, false, true), A::kRing);
  // Asked for: kept, except hierarchical where it cannot run.
  EXPECT_EQ(choose(A::kHalvingDoubling, 4, 64 << 20, true, false), A::kHalvingDoubling);
  EXPECT_EQ(choose(A::kHierarchical, 4, 4, false, true), A::kRing);
  EXPECT_EQ(choose(A::kHierarchical, 4, 4, true, false), A::kHierarchical);
}

INSTANTIATE_TEST_SUITE_P(Transports, CollectivesTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(1, 2, 3, 4, 7)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "shm" : "tcp") + "_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks";
                         });

// Shared-memory waits spin only when the ranks' CPUs together hold one per rank (ShmGroup): ranks
// pinned to one CPU each spin, ranks pinned to one shared CPU must not (the rank spinning would
// hold the CPU its peer needs). Either way every allreduce completes with the right sum.
void PinnedAllreduces(const std::function<int(int rank)>& cpu_of) {
  auto store = std::make_shared<store::HashStore>();
  cadre::testing::RunThreadsAsRanks(2, [&](int rank) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu_of(rank), &set);
    ASSERT_EQ(sched_setaffinity(0, sizeof set, &set), 0) << "rank " << rank;
    CommunicatorOptions o = testing::RankOptions({}, rank, 2);
    o.store = store;
    auto comm = Communicator::Create(o);
    for (int i = 0; i < 300; ++i) {
      float v[4] = {float(rank + i), 1, 2, 3};
      AllreduceOptions a;
      a.input = a.output = v;
      a.count = 4;
      Allreduce(*comm, a);
      ASSERT_EQ(v[0], float(2 * i + 1)) << "rank " << rank << " call " << i;
      ASSERT_EQ(v[3], 6.0f) << "rank " << rank << " call " << i;
    }
  });
}

std::vector<int> UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

TEST(ShmWaits, RanksPinnedToACpuEach) {
  const std::vector<int> cpus = UsableCpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  PinnedAllreduces([&](int rank) { return cpus[static_cast<size_t>(rank)]; });
}

TEST(ShmWaits, RanksPinnedToOneSharedCpu) {
  const std::vector<int> cpus = UsableCpus();
  ASSERT_FALSE(cpus.empty());
  PinnedAllreduces([&](int) { return cpus[0]; });
}

}  // namespace
}  // namespace cadre::comm
