// The hierarchical algorithm over fake groups (threads as ranks, no transport): every layout of
// hosts x slots the issue names, host grids of 2 and 3 dimensions, uneven counts, every dtype and
// op, with closed-form expected values; and how much data each level moves.
#include "cadre/comm/hierarchical.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>

#include "cadre/comm/hierarchical_fake_group.h"
#include "cadre/comm/reduce.h"
#include "cadre/comm/typed_values.h"

namespace cadre::comm {
namespace {

using testing::FakeGroup;
using testing::FakeGroupState;

constexpr DataType kAllTypes[] = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                                  DataType::kBFloat16, DataType::kInt32,   DataType::kInt64,
                                  DataType::kUInt8,    DataType::kInt8,    DataType::kInt16};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};

// Small integers, exact in every dtype; products stay below 2^6 for up to 6 ranks.
double Value(int rank, size_t i, ReduceOp op) {
  if (op == ReduceOp::kProduct) return static_cast<double>((static_cast<size_t>(rank) + i) % 2 + 1);
  return static_cast<double>((static_cast<size_t>(rank) * 7 + i) % 3 + 1);
}

double Expected(int ranks, size_t i, ReduceOp op) {
  double acc = Value(0, i, op);
  for (int r = 1; r < ranks; ++r) {
    const double v = Value(r, i, op);
    switch (op) {
      case ReduceOp::kSum:
        acc += v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
    }
  }
  return acc;
}

void Store(void* p, size_t i, DataType t, double v) { testing::Put(t, p, i, v); }

double Load(const void* p, size_t i, DataType t) { return testing::Get(t, p, i); }

// hosts x slots ranks; rank = host * slots + slot (the learner contract). Level 0 is the host's
// slots; the levels above are the dimensions of `grid` (innermost first, product == hosts) among
// the ranks with the same slot, host h at coordinates h % d0, (h / d0) % d1, ...
struct Layout {
  int hosts;
  int slots;
  std::vector<int> grid;  // empty: one ring of all hosts
};

class World {
 public:
  explicit World(Layout layout) : layout_(std::move(layout)) {
    if (layout_.grid.empty()) layout_.grid = {layout_.hosts};
    const int size = layout_.hosts * layout_.slots;
    groups_.resize(static_cast<size_t>(size));
    std::map<std::string, std::shared_ptr<FakeGroupState>> states;
    auto state = [&](const std::string& key, int members) {
      auto& s = states[key];
      if (!s) s = std::make_shared<FakeGroupState>(members, std::chrono::seconds(20));
      return s;
    };
    for (int rank = 0; rank < size; ++rank) {
      const int host = rank / layout_.slots, slot = rank % layout_.slots;
      auto& mine = groups_[static_cast<size_t>(rank)];
      mine.push_back(
          std::make_unique<FakeGroup>(state("local/" + std::to_string(host), layout_.slots), slot));
      std::vector<int> coord;
      for (int h = host, d = 0; d < static_cast<int>(layout_.grid.size()); ++d) {
        coord.push_back(h % layout_.grid[static_cast<size_t>(d)]);
        h /= layout_.grid[static_cast<size_t>(d)];
      }
      for (size_t d = 0; d < layout_.grid.size(); ++d) {
        std::string key = "dim" + std::to_string(d) + "/slot" + std::to_string(slot);
        for (size_t e = 0; e < coord.size(); ++e) {
          key += "/" + (e == d ? std::string("*") : std::to_string(coord[e]));
        }
        mine.push_back(std::make_unique<FakeGroup>(state(key, layout_.grid[d]), coord[d]));
      }
    }
  }

  int size() const { return static_cast<int>(groups_.size()); }
  const std::vector<std::unique_ptr<FakeGroup>>& groups(int rank) const {
    return groups_[static_cast<size_t>(rank)];
  }

  // Runs fn(rank, levels) on one thread per rank; returns the errors, one per failed rank.
  template <class Fn>
  std::vector<std::string> Run(Fn fn) {
    std::vector<std::string> errors(groups_.size());
    std::vector<std::thread> threads;
    for (int r = 0; r < size(); ++r) {
      threads.emplace_back([&, r] {
        std::vector<HierarchyGroup*> levels;
        for (auto& g : groups_[static_cast<size_t>(r)]) levels.push_back(g.get());
        try {
          fn(r, levels);
        } catch (const std::exception& e) {
          errors[static_cast<size_t>(r)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    std::vector<std::string> failed;
    for (size_t r = 0; r < errors.size(); ++r) {
      if (!errors[r].empty()) failed.push_back("rank " + std::to_string(r) + ": " + errors[r]);
    }
    return failed;
  }

 private:
  Layout layout_;
  std::vector<std::vector<std::unique_ptr<FakeGroup>>> groups_;
};

std::string Name(const Layout& l) {
  return std::to_string(l.hosts) + "x" + std::to_string(l.slots) +
         (l.grid.empty() ? "" : " grid " + GridToString(l.grid));
}

// Checks every rank's output against the closed form; returns the first mismatch per rank.
void CheckAllreduce(const Layout& layout, size_t count, DataType t, ReduceOp op, bool in_place,
                    size_t pipeline_bytes = 0) {
  World world(layout);
  const size_t es = ElementSize(t);
  std::vector<std::vector<unsigned char>> in(static_cast<size_t>(world.size())),
      out(static_cast<size_t>(world.size()));
  for (int r = 0; r < world.size(); ++r) {
    auto& buf = in[static_cast<size_t>(r)];
    buf.resize(count * es);
    for (size_t i = 0; i < count; ++i) Store(buf.data(), i, t, Value(r, i, op));
    out[static_cast<size_t>(r)].assign(count * es, 0xA5);  // garbage the algorithm must overwrite
  }
  auto errors = world.Run([&](int r, std::vector<HierarchyGroup*>& levels) {
    auto& src = in[static_cast<size_t>(r)];
    void* dst = in_place ? src.data() : out[static_cast<size_t>(r)].data();
    LeveledAllreduce(levels, src.data(), dst, count, t, op, {.pipeline_bytes = pipeline_bytes});
  });
  ASSERT_TRUE(errors.empty()) << errors[0];
  const std::string what = Name(layout) + " count " + std::to_string(count) + " " +
                           std::string(DataTypeName(t)) + " " + std::string(ReduceOpName(op)) +
                           " pipeline " + std::to_string(pipeline_bytes);
  for (int r = 0; r < world.size(); ++r) {
    const auto& got = in_place ? in[static_cast<size_t>(r)] : out[static_cast<size_t>(r)];
    for (size_t i = 0; i < count; ++i) {
      const double want = Expected(world.size(), i, op);
      ASSERT_EQ(Load(got.data(), i, t), want) << what << ": rank " << r << " element " << i;
    }
  }
}

const Layout kLayouts[] = {{1, 1, {}},        {1, 4, {}},    {2, 1, {}},     {2, 2, {}},
                           {3, 2, {}},        {2, 3, {}},    {4, 2, {2, 2}}, {6, 1, {2, 3}},
                           {8, 1, {2, 2, 2}}, {6, 2, {3, 2}}};

TEST(HierarchicalAllreduce, EveryLayoutDtypeAndOp) {
  for (const Layout& layout : kLayouts) {
    for (DataType t : kAllTypes) {
      for (ReduceOp op : kAllOps) CheckAllreduce(layout, 13, t, op, /*in_place=*/false);
    }
  }
}

TEST(HierarchicalAllreduce, UnevenAndEdgeCounts) {
  // 0; fewer elements than slots; not divisible by slots nor hosts; large and odd.
  for (const Layout& layout : kLayouts) {
    for (size_t count :
         {size_t{0}, size_t{1}, size_t{2}, size_t{5}, size_t{7}, size_t{1001}, size_t{65537}}) {
      CheckAllreduce(layout, count, DataType::kFloat32, ReduceOp::kSum, /*in_place=*/false);
      CheckAllreduce(layout, count, DataType::kInt64, ReduceOp::kMax, /*in_place=*/true);
    }
  }
}

TEST(HierarchicalAllreduce, InPlaceEveryDtype) {
  for (DataType t : kAllTypes) CheckAllreduce({3, 2, {}}, 31, t, ReduceOp::kSum, true);
}

// The point of the algorithm: the host level reduce-scatters everything, and only each slot's
// shard travels between hosts, so every slot's ring carries 1/slots of the data.
TEST(HierarchicalAllreduce, EachLevelMovesItsShare) {
  World world({2, 3, {}});
  std::vector<float> data(10, 1.0f);
  std::vector<std::vector<float>> bufs(6, data);
  auto errors = world.Run([&](int r, std::vector<HierarchyGroup*>& levels) {
    LeveledAllreduce(levels, bufs[static_cast<size_t>(r)].data(),
                     bufs[static_cast<size_t>(r)].data(), 10, DataType::kFloat32, ReduceOp::kSum);
  });
  ASSERT_TRUE(errors.empty()) << errors[0];
  const size_t shard[] = {4, 3, 3};  // 10 split over 3 slots
  for (int r = 0; r < 6; ++r) {
    const auto& local = world.groups(r)[0]->calls();
    const auto& cross = world.groups(r)[1]->calls();
    ASSERT_EQ(local.size(), 2u);
    EXPECT_EQ(local[0].kind, "reduce_scatter");
    EXPECT_EQ(local[0].count, 10u);
    EXPECT_EQ(local[1].kind, "allgather");
    EXPECT_EQ(local[1].count, shard[r % 3]);
    ASSERT_EQ(cross.size(), 1u);
    EXPECT_EQ(cross[0].kind, "allreduce");
    EXPECT_EQ(cross[0].count, shard[r % 3]) << "rank " << r;
    for (float v : bufs[static_cast<size_t>(r)]) ASSERT_EQ(v, 6.0f);
  }
}

TEST(HierarchicalAllreduce, GridReduceScattersEveryDimensionButTheLast) {
  World world({4, 2, {2, 2}});  // 12 elements: 6 per slot, 3 per slot and grid row
  std::vector<std::vector<double>> bufs(8, std::vector<double>(12, 0.5));
  auto errors = world.Run([&](int r, std::vector<HierarchyGroup*>& levels) {
    LeveledAllreduce(levels, bufs[static_cast<size_t>(r)].data(),
                     bufs[static_cast<size_t>(r)].data(), 12, DataType::kFloat64, ReduceOp::kSum);
  });
  ASSERT_TRUE(errors.empty()) << errors[0];
  for (int r = 0; r < 8; ++r) {
    const auto& top = world.groups(r)[2]->calls();
    ASSERT_EQ(top.size(), 1u);
    EXPECT_EQ(top[0].kind, "allreduce");
    EXPECT_EQ(top[0].count, 3u);
    for (double v : bufs[static_cast<size_t>(r)]) ASSERT_EQ(v, 4.0);
  }
}

// Pipelined: chunks of 1 to 3 elements (more chunks than some shards have elements, chunks that
// leave some slots nothing), every layout, dtype and op, in and out of place.
TEST(PipelinedHierarchicalAllreduce, EveryLayoutDtypeAndOp) {
  for (const Layout& layout : kLayouts) {
    for (DataType t : kAllTypes) {
      for (ReduceOp op : kAllOps) {
        CheckAllreduce(layout, 13, t, op, /*in_place=*/false, 3 * ElementSize(t));
      }
    }
  }
}

// Chunk sizes from below one element to one byte short of the message (two chunks, the second
// tiny); at most 64 chunks per message, to keep the test fast.
TEST(PipelinedHierarchicalAllreduce, UnevenCountsAndChunkSizes) {
  for (const Layout& layout : kLayouts) {
    for (size_t count : {size_t{1}, size_t{2}, size_t{7}, size_t{1001}, size_t{65537}}) {
      for (size_t chunk : {size_t{1}, size_t{12}, size_t{4096}, size_t{0}}) {
        for (DataType t : {DataType::kFloat32, DataType::kInt64}) {
          const size_t bytes = count * ElementSize(t);
          const size_t chunk_bytes = chunk == 0 ? bytes - 1 : std::max(chunk, bytes / 64);
          if (chunk_bytes == 0) continue;
          const ReduceOp op = t == DataType::kFloat32 ? ReduceOp::kSum : ReduceOp::kMax;
          CheckAllreduce(layout, count, t, op, /*in_place=*/t == DataType::kInt64, chunk_bytes);
        }
      }
    }
  }
}

// The calls each group sees: the host level reduce-scatters every chunk before its first
// allgather (RS 0, RS 1, RS 2, AG 0, AG 1, AG 2 for three chunks), and the level above
// allreduces each chunk's shard in turn, so each level still carries exactly its share. From
// three chunks on the first and last are smaller: 1/(2 x chunks) of the message.
TEST(PipelinedHierarchicalAllreduce, HostLevelReduceScattersEveryChunkFirst) {
  World world({2, 2, {}});
  std::vector<std::vector<float>> bufs(4, std::vector<float>(48, 1.0f));
  auto errors = world.Run([&](int r, std::vector<HierarchyGroup*>& levels) {
    float* b = bufs[static_cast<size_t>(r)].data();
    // 192 bytes, one chunk per started 64: three chunks, of 8, 32 and 8 elements.
    LeveledAllreduce(levels, b, b, 48, DataType::kFloat32, ReduceOp::kSum, {.pipeline_bytes = 64});
  });
  ASSERT_TRUE(errors.empty()) << errors[0];
  for (int r = 0; r < 4; ++r) {
    std::vector<std::string> local, cross;
    for (const auto& c : world.groups(r)[0]->calls()) {
      local.push_back(c.kind + " " + std::to_string(c.count));
    }
    EXPECT_EQ(local,
              (std::vector<std::string>{"reduce_scatter 8", "reduce_scatter 32", "reduce_scatter 8",
                                        "allgather 4", "allgather 16", "allgather 4"}))
        << "rank " << r;
    for (const auto& c : world.groups(r)[1]->calls()) {
      cross.push_back(c.kind + " " + std::to_string(c.count));
    }
    EXPECT_EQ(cross, (std::vector<std::string>{"allreduce 4", "allreduce 16", "allreduce 4"}))
        << "rank " << r;
    for (float v : bufs[static_cast<size_t>(r)]) ASSERT_EQ(v, 4.0f);
  }
}

// A level above the host that streams and takes every piece before it reduces any: the
// pipeline must hand all the chunks over without waiting for a result first (the host level
// reduce-scatters every chunk before its first allgather), or this would wait forever.
class GreedyStreamingGroup final : public HierarchyGroup {
 public:
  explicit GreedyStreamingGroup(HierarchyGroup* group) : group_(group) {}
  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }
  void ReduceScatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                     ReduceOp op) override {
    group_->ReduceScatter(in, out, counts, dtype, op);
  }
  void Allgather(const void* in, void* out, const std::vector<size_t>& counts,
                 DataType dtype) override {
    group_->Allgather(in, out, counts, dtype);
  }
  void Allreduce(void* buffer, size_t count, DataType dtype, ReduceOp op) override {
    group_->Allreduce(buffer, count, dtype, op);
  }
  void StreamedAllreduce(const PieceStream& s, DataType dtype, ReduceOp op) override {
    // Asks rather than waits, so that a pipeline that never hands a chunk over fails the test.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (size_t k = 0; k < s.size(); ++k) {
      while (!s.ready(k, /*wait=*/false)) {
        if (std::chrono::steady_clock::now() > give_up) {
          throw Error(TimeoutError("chunk " + std::to_string(k) + " was never handed over"));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    pieces_ = s.size();
    for (size_t k = 0; k < s.size(); ++k) {
      std::memcpy(s.outputs[k], s.inputs[k], s.counts[k] * ElementSize(dtype));
      group_->Allreduce(s.outputs[k], s.counts[k], dtype, op);
      s.done(k);
    }
  }
  bool streams() const override { return true; }
  size_t pieces() const { return pieces_; }

 private:
  HierarchyGroup* group_;
  size_t pieces_ = 0;
};

TEST(PipelinedHierarchicalAllreduce, AStreamingLevelMayTakeEveryChunkFirst) {
  World world({2, 2, {}});
  std::vector<std::vector<double>> bufs(4);
  for (int r = 0; r < 4; ++r) {
    for (size_t i = 0; i < 1001; ++i) bufs[static_cast<size_t>(r)].push_back(double(r + i));
  }
  std::vector<size_t> pieces(4);
  auto errors = world.Run([&](int r, std::vector<HierarchyGroup*>& levels) {
    GreedyStreamingGroup cross(levels[1]);
    std::vector<HierarchyGroup*> both = {levels[0], &cross};
    double* b = bufs[static_cast<size_t>(r)].data();
    LeveledAllreduce(both, b, b, 1001, DataType::kFloat64, ReduceOp::kSum,
                     {.pipeline_bytes = 800});  // 8008 bytes: 11 chunks
    pieces[static_cast<size_t>(r)] = cross.pieces();
  });
  ASSERT_TRUE(errors.empty()) << errors[0];
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(pieces[static_cast<size_t>(r)], 11u) << "rank " << r;
    for (size_t i = 0; i < 1001; ++i) {
      ASSERT_EQ(bufs[static_cast<size_t>(r)][i], double(6 + 4 * i)) << "rank " << r << " " << i;
    }
  }
}

// A level above the host that fails on the helper thread: its error reaches the caller (after
// the helper stopped), and the caller does not wait for chunks that will never come.
class ThrowingGroup final : public HierarchyGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void ReduceScatter(const void*, void*, const std::vector<size_t>&, DataType, ReduceOp) override {
    throw Error(InternalError("unexpected reduce-scatter"));
  }
  void Allgather(const void*, void*, const std::vector<size_t>&, DataType) override {
    throw Error(InternalError("unexpected allgather"));
  }
  void Allreduce(void*, size_t, DataType, ReduceOp) override {
    if (++calls_ == 2) throw Error(IoError("rank 7 (host far-away) closed the connection"));
  }

 private:
  int calls_ = 0;
};

TEST(PipelinedHierarchicalAllreduce, HelperErrorReachesTheCaller) {
  World world({1, 2, {}});  // the host level: two fake slots
  std::vector<std::vector<float>> bufs(2, std::vector<float>(64, 1.0f));
  auto errors = world.Run([&](int r, std::vector<HierarchyGroup*>& levels) {
    ThrowingGroup outer;
    std::vector<HierarchyGroup*> both = {levels[0], &outer};
    float* b = bufs[static_cast<size_t>(r)].data();
    LeveledAllreduce(both, b, b, 64, DataType::kFloat32, ReduceOp::kSum, {.pipeline_bytes = 32});
  });
  ASSERT_EQ(errors.size(), 2u);
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("rank 7 (host far-away) closed the connection"), std::string::npos) << e;
  }
}

TEST(HierarchicalAllreduce, NullGroupIsAnError) {
  std::vector<HierarchyGroup*> levels{nullptr};
  float x = 1;
  EXPECT_THROW(LeveledAllreduce(levels, &x, &x, 1, DataType::kFloat32, ReduceOp::kSum), Error);
}

TEST(SplitCounts, FirstBlocksTakeTheRemainder) {
  EXPECT_EQ(SplitCounts(10, 3), (std::vector<size_t>{4, 3, 3}));
  EXPECT_EQ(SplitCounts(2, 4), (std::vector<size_t>{1, 1, 0, 0}));
  EXPECT_EQ(SplitCounts(0, 2), (std::vector<size_t>{0, 0}));
  EXPECT_EQ(SplitCounts(7, 1), (std::vector<size_t>{7}));
  EXPECT_THROW(SplitCounts(7, 0), Error);
}

TEST(ChooseHostGrid, RingForFewOrPrimeHostsGridOtherwise) {
  EXPECT_EQ(ChooseHostGrid(1), (std::vector<int>{1}));
  EXPECT_EQ(ChooseHostGrid(3), (std::vector<int>{3}));
  EXPECT_EQ(ChooseHostGrid(4), (std::vector<int>{4}));
  EXPECT_EQ(ChooseHostGrid(6), (std::vector<int>{6}));
  EXPECT_EQ(ChooseHostGrid(7), (std::vector<int>{7}));
  EXPECT_EQ(ChooseHostGrid(8), (std::vector<int>{2, 4}));
  EXPECT_EQ(ChooseHostGrid(11), (std::vector<int>{11}));
  EXPECT_EQ(ChooseHostGrid(12), (std::vector<int>{3, 4}));
  EXPECT_EQ(ChooseHostGrid(16), (std::vector<int>{4, 4}));
  EXPECT_EQ(ChooseHostGrid(18), (std::vector<int>{3, 6}));
}

TEST(ParseGrid, AcceptsDimsAndNamesTheBadPart) {
  std::vector<int> dims;
  ASSERT_TRUE(ParseGrid("4x2", &dims).ok());
  EXPECT_EQ(dims, (std::vector<int>{4, 2}));
  ASSERT_TRUE(ParseGrid("3", &dims).ok());
  EXPECT_EQ(dims, (std::vector<int>{3}));
  for (const char* bad : {"", "x2", "2x", "2xx2", "0x2", "2x-1", "2xa", "2.5"}) {
    Status s = ParseGrid(bad, &dims);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << bad;
    EXPECT_TRUE(dims.empty()) << bad;
  }
  EXPECT_NE(ParseGrid("4xz", &dims).message().find("\"z\""), std::string::npos);
  EXPECT_EQ(GridToString({2, 3, 4}), "2x3x4");
}

}  // namespace
}  // namespace cadre::comm
