// ServerState without gRPC: validation, all-or-nothing requests, sync bookkeeping and timeouts.
#include "cadre/ps/server_state.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <thread>

namespace cadre::ps {
namespace {

std::string_view Bytes(const std::vector<float>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)};
}

DeclareArgs Decl(const std::string& name, const std::vector<float>& init, bool sync = true,
                 OptimizerKind kind = OptimizerKind::kSum) {
  DeclareArgs a;
  a.id = {name, 0, 0, static_cast<int64_t>(init.size())};
  a.shape = {static_cast<int64_t>(init.size())};
  a.dtype = "float32";
  a.initial = Bytes(init);
  a.optimizer.kind = kind;
  a.sync = sync;
  return a;
}

ChunkArgs Chunk(const std::string& name, const std::vector<float>& g) {
  return {{name, 0, 0, static_cast<int64_t>(g.size())}, "float32", Bytes(g)};
}

std::vector<float> Value(ServerState& s, const std::string& name, int64_t step = 0) {
  std::vector<float> out;
  Status st = s.Pull(
      0, step, {{name, 0, 0, 0}},
      [&](const PartitionRef&, std::span<const float> v) { out.assign(v.begin(), v.end()); });
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

TEST(ServerStateTest, FirstDeclareWinsAndRedeclareMustMatch) {
  ServerState s(2, std::chrono::seconds(5));
  std::vector<float> a{1, 2}, b{5, 6};
  std::vector<bool> created;
  ASSERT_TRUE(s.Declare(0, {Decl("w", a)}, &created).ok());
  EXPECT_TRUE(created[0]);
  ASSERT_TRUE(s.Declare(1, {Decl("w", b)}, &created).ok());
  EXPECT_FALSE(created[0]);
  EXPECT_EQ(Value(s, "w"), a);
  // A different shape, mode or optimizer is refused, and a request with one bad entry creates
  // none of its other entries.
  std::vector<float> three{1, 2, 3};
  Status st = s.Declare(0, {Decl("new", a), Decl("w", three)}, &created);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("variable 'w'"), std::string::npos) << st.message();
  EXPECT_EQ(s.PartitionStep("new", 0), -1);
  EXPECT_EQ(s.Declare(0, {Decl("w", a, false)}, &created).code(), Code::kInvalidArgument);
  EXPECT_EQ(s.Declare(0, {Decl("w", a, true, OptimizerKind::kAdam)}, &created).code(),
            Code::kInvalidArgument);
  DeclareArgs bad = Decl("x", a);
  bad.dtype = "float16";
  EXPECT_EQ(s.Declare(0, {bad}, &created).code(), Code::kInvalidArgument);
  bad = Decl("x", a);
  bad.initial = bad.initial.substr(0, 4);
  EXPECT_EQ(s.Declare(0, {bad}, &created).code(), Code::kInvalidArgument);
  EXPECT_EQ(s.Declare(7, {Decl("x", a)}, &created).code(), Code::kInvalidArgument);
  EXPECT_EQ(s.PartitionStep("x", 0), -1);
}

TEST(ServerStateTest, PartitionExtentsThatOverflowAreRefused) {
  // offset + count past INT64_MAX: a check that adds them overflows and lets it through.
  ServerState s(1, std::chrono::seconds(5));
  std::vector<float> ten(10, 1.0f);
  std::vector<bool> created;
  DeclareArgs a = Decl("w", ten);
  a.shape = {100};
  a.id.offset = std::numeric_limits<int64_t>::max() - 5;
  Status st = s.Declare(0, {a}, &created);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("outside shape [100]"), std::string::npos) << st.message();
  EXPECT_EQ(s.PartitionStep("w", 0), -1);
  a.id.offset = 95;  // in range, but offset + count is not
  EXPECT_EQ(s.Declare(0, {a}, &created).code(), Code::kInvalidArgument);
  a.id.offset = 90;
  EXPECT_TRUE(s.Declare(0, {a}, &created).ok());
}

TEST(ServerStateTest, APullCannotGrowItsReplyPastTheBound) {
  // One partition named many times would be copied into the reply as often; and many distinct
  // ones may not ask for more than max_reply_bytes together. Both are refused before any copy.
  ServerState s(1, std::chrono::seconds(5));
  std::vector<float> w(8, 1.0f), v(8, 2.0f);
  std::vector<bool> created;
  ASSERT_TRUE(s.Declare(0, {Decl("w", w), Decl("v", v)}, &created).ok());
  size_t emitted = 0;
  auto count = [&](const PartitionRef&, std::span<const float>) { ++emitted; };
  std::vector<PartitionRef> repeated(100000, PartitionRef{"w", 0, 0, 8});
  Status st = s.Pull(0, 0, repeated, count);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("appears twice"), std::string::npos) << st.message();
  EXPECT_EQ(emitted, 0u);
  st = s.Pull(0, 0, {{"w", 0, 0, 8}, {"w", 0, 0, 8}}, count);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("appears twice"), std::string::npos) << st.message();
  EXPECT_EQ(emitted, 0u);
  ServerState small(1, std::chrono::seconds(5), kDefaultWorkerTimeout, /*max_reply_bytes=*/40);
  ASSERT_TRUE(small.Declare(0, {Decl("w", w), Decl("v", v)}, &created).ok());
  st = small.Pull(0, 0, {{"w", 0, 0, 8}, {"v", 0, 0, 8}}, count);  // 64 bytes > 40
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_EQ(emitted, 0u);
  ASSERT_TRUE(s.Pull(0, 0, {{"w", 0, 0, 8}, {"v", 0, 0, 8}}, count).ok());
  EXPECT_EQ(emitted, 2u);
}

TEST(ServerStateTest, BadPushesChangeNothing) {
  ServerState s(2, std::chrono::seconds(5));
  std::vector<float> init{1, 2}, g{10, 10}, g3{1, 1, 1};
  std::vector<bool> created;
  ASSERT_TRUE(s.Declare(0, {Decl("w", init), Decl("v", init)}, &created).ok());
  // Each bad request also carries a good chunk for "v" first: it must not be applied either.
  EXPECT_EQ(s.Push(0, 0, {Chunk("v", g), Chunk("nope", g)}).code(), Code::kNotFound);
  EXPECT_EQ(s.Push(0, 0, {Chunk("v", g), Chunk("w", g3)}).code(), Code::kInvalidArgument);
  ChunkArgs wrong_dtype = Chunk("w", g);
  wrong_dtype.dtype = "float64";
  EXPECT_EQ(s.Push(0, 0, {Chunk("v", g), wrong_dtype}).code(), Code::kInvalidArgument);
  ChunkArgs wrong_extent = Chunk("w", g);
  wrong_extent.id.offset = 1;
  EXPECT_EQ(s.Push(0, 0, {Chunk("v", g), wrong_extent}).code(), Code::kInvalidArgument);
  EXPECT_EQ(s.Push(2, 0, {Chunk("v", g)}).code(), Code::kInvalidArgument);
  EXPECT_EQ(s.Push(-1, 0, {Chunk("v", g)}).code(), Code::kInvalidArgument);
  EXPECT_EQ(s.Push(0, -3, {Chunk("v", g)}).code(), Code::kInvalidArgument);
  EXPECT_EQ(s.Push(0, 0, {Chunk("v", g), Chunk("v", g)}).code(), Code::kInvalidArgument);
  // Nothing arrived: both workers' real pushes now make exactly one step.
  ASSERT_TRUE(s.Push(0, 0, {Chunk("v", g)}).ok());
  EXPECT_EQ(s.Push(0, 0, {Chunk("v", g)}).code(), Code::kAlreadyExists);
  ASSERT_TRUE(s.Push(1, 0, {Chunk("v", g)}).ok());
  EXPECT_EQ(s.PartitionStep("v", 0), 1);
  EXPECT_EQ(Value(s, "v", 1), (std::vector<float>{21, 22}));  // sum mode adds both pushes
  EXPECT_EQ(Value(s, "w"), init);
  EXPECT_EQ(s.Push(1, 0, {Chunk("v", g)}).code(), Code::kMismatch);  // step 0 already applied
}

TEST(ServerStateTest, PullTimeoutNamesMissingWorkers) {
  ServerState s(3, std::chrono::milliseconds(200));
  std::vector<float> init{0}, g{1};
  std::vector<bool> created;
  ASSERT_TRUE(s.Declare(0, {Decl("w", init)}, &created).ok());
  ASSERT_TRUE(s.Push(1, 0, {Chunk("w", g)}).ok());
  Status st = s.Pull(1, 1, {{"w", 0, 0, 1}}, [](const PartitionRef&, std::span<const float>) {});
  EXPECT_EQ(st.code(), Code::kTimeout);
  EXPECT_NE(st.message().find("workers missing: 0, 2"), std::string::npos) << st.message();
}

TEST(ServerStateTest, DoneWorkersAreNotWaitedFor) {
  ServerState s(2, std::chrono::seconds(10));
  std::vector<float> init{0}, g{4};
  std::vector<bool> created;
  ASSERT_TRUE(s.Declare(0, {Decl("w", init, true, OptimizerKind::kSgd)}, &created).ok());
  ASSERT_TRUE(s.Push(0, 0, {Chunk("w", g)}).ok());
  EXPECT_EQ(s.PartitionStep("w", 0), 0);
  int remaining = -1;
  ASSERT_TRUE(s.WorkerDone(1, &remaining).ok());
  EXPECT_EQ(remaining, 1);
  EXPECT_EQ(s.PartitionStep("w", 0), 1);  // the step waited only for worker 1
  EXPECT_NEAR(Value(s, "w", 1)[0], -0.01f * 4, 1e-6);
  EXPECT_EQ(s.Push(1, 1, {Chunk("w", g)}).code(), Code::kMismatch);
  ASSERT_TRUE(s.WorkerDone(1, &remaining).ok());  // idempotent
  EXPECT_EQ(s.WaitAllDone(Deadline(std::chrono::milliseconds(50))).code(), Code::kTimeout);
  std::thread t([&] {
    int r;
    EXPECT_TRUE(s.WorkerDone(0, &r).ok());
  });
  EXPECT_TRUE(s.WaitAllDone(Deadline(std::chrono::seconds(30))).ok());
  t.join();
}

TEST(ServerStateTest, AbortWakesWaiters) {
  ServerState s(2, std::chrono::seconds(60));
  std::vector<float> init{0};
  std::vector<bool> created;
  ASSERT_TRUE(s.Declare(0, {Decl("w", init)}, &created).ok());
  std::thread t([&] { s.Abort(); });
  Status st = s.Pull(0, 1, {{"w", 0, 0, 1}}, [](const PartitionRef&, std::span<const float>) {});
  t.join();
  EXPECT_EQ(st.code(), Code::kAborted);
  EXPECT_EQ(s.WaitAllDone(Deadline::Never()).code(), Code::kAborted);
}

TEST(ServerStateTest, SilentWorkerIsPresumedDead) {
  // Worker 0 declares and says done; worker 1 declares and then goes silent (it "died").
  ServerState s(2, std::chrono::seconds(10), std::chrono::milliseconds(200));
  std::vector<float> init{0};
  std::vector<bool> created;
  ASSERT_TRUE(s.Declare(0, {Decl("w", init)}, &created).ok());
  ASSERT_TRUE(s.Declare(1, {Decl("w", init)}, &created).ok());
  int remaining = -1;
  ASSERT_TRUE(s.WorkerDone(0, &remaining).ok());
  Status st = s.WaitAllDone(Deadline(std::chrono::seconds(60)));
  EXPECT_EQ(st.code(), Code::kIo) << st.ToString();  // not the deadline: a bounded, clear error
  EXPECT_NE(st.message().find("worker 1 sent no request"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("1 of 2 workers not done"), std::string::npos) << st.message();
}

TEST(ServerStateTest, WorkerWithACallInProgressIsAlive) {
  // Worker 0 waits in a pull (for a step nobody pushes) for longer than worker_timeout: it is
  // waiting, not dead, so WaitAllDone runs into its own deadline instead.
  ServerState s(1, std::chrono::seconds(30), std::chrono::milliseconds(1000));
  std::vector<float> init{0};
  std::vector<bool> created;
  ASSERT_TRUE(s.Declare(0, {Decl("w", init)}, &created).ok());
  std::thread t([&] {
    Status pull =
        s.Pull(0, 1, {{"w", 0, 0, 1}}, [](const PartitionRef&, std::span<const float>) {});
    EXPECT_EQ(pull.code(), Code::kAborted);
  });
  EXPECT_EQ(s.WaitAllDone(Deadline(std::chrono::milliseconds(2500))).code(), Code::kTimeout);
  s.Abort();
  t.join();
}

// A push may carry the step's learning rate; the workers of one sync step must agree on it.
TEST(ServerStateTest, PushedLearningRateAppliesToItsStep) {
  ServerState s(2, std::chrono::seconds(5));
  std::vector<float> init{1.0f};
  std::vector<bool> created;
  ASSERT_TRUE(s.Declare(0, {Decl("w", init, true, OptimizerKind::kSgd)}, &created).ok());
  std::vector<float> g0{1.0f}, g1{3.0f};
  auto push = [&](int worker, int64_t step, const std::vector<float>& g, std::optional<float> lr) {
    ChunkArgs c = Chunk("w", g);
    c.lr = lr;
    return s.Push(worker, step, {c});
  };
  // Declared lr 0.01; step 0 at 0.5: 1 - 0.5 * mean(1, 3) = 0.
  ASSERT_TRUE(push(0, 0, g0, 0.5f).ok());
  Status st = push(1, 0, g1, 0.25f);
  EXPECT_EQ(st.code(), Code::kMismatch);
  EXPECT_NE(st.message().find("learning rate 0.25"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("same hyper-parameter schedule"), std::string::npos) << st.message();
  EXPECT_EQ(s.PartitionStep("w", 0), 0);  // the refused push changed nothing
  ASSERT_TRUE(push(1, 0, g1, 0.5f).ok());
  EXPECT_EQ(Value(s, "w", 1), std::vector<float>{0.0f});
  // Without a rate the declared one applies: 0 - 0.01 * 2.
  ASSERT_TRUE(push(0, 1, g0, std::nullopt).ok());
  ASSERT_TRUE(push(1, 1, g1, std::nullopt).ok());
  EXPECT_FLOAT_EQ(Value(s, "w", 2)[0], -0.02f);
  st = push(0, 2, g0, -1.0f);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("learning rate"), std::string::npos) << st.message();
}

// A push may carry every hyper-parameter of its step (momentum switched on later, say); the
// workers of one sync step must agree on them; without them the declared ones apply.
TEST(ServerStateTest, PushedHyperparametersApplyToTheirStep) {
  ServerState s(2, std::chrono::seconds(5));
  std::vector<float> init{1.0f};
  std::vector<bool> created;
  ASSERT_TRUE(s.Declare(0, {Decl("w", init, true, OptimizerKind::kSgd)}, &created).ok());
  std::vector<float> g{2.0f};
  OptimizerConfig h;
  h.lr = 0.5f;
  h.momentum = 0.5f;
  auto push = [&](int worker, int64_t step, std::optional<OptimizerConfig> hyper) {
    ChunkArgs c = Chunk("w", g);
    c.hyper = std::move(hyper);
    return s.Push(worker, step, {c});
  };
  // Step 0 with momentum: the buffer starts as the gradient, 1 - 0.5 * 2 = 0.
  ASSERT_TRUE(push(0, 0, h).ok());
  OptimizerConfig other = h;
  other.momentum = 0.25f;
  Status st = push(1, 0, other);
  EXPECT_EQ(st.code(), Code::kMismatch);
  EXPECT_NE(st.message().find("momentum 0.25"), std::string::npos) << st.message();
  ASSERT_TRUE(push(1, 0, h).ok());
  EXPECT_EQ(Value(s, "w", 1), std::vector<float>{0.0f});
  // Step 1 with the declared ones (lr 0.01, no momentum): the buffer stays, 0 - 0.01 * 2.
  ASSERT_TRUE(push(0, 1, std::nullopt).ok());
  ASSERT_TRUE(push(1, 1, std::nullopt).ok());
  EXPECT_FLOAT_EQ(Value(s, "w", 2)[0], -0.02f);
  // Step 2 with momentum again: buffer 0.5 * 2 + 2 = 3, -0.02 - 0.5 * 3.
  ASSERT_TRUE(push(0, 2, h).ok());
  ASSERT_TRUE(push(1, 2, h).ok());
  EXPECT_FLOAT_EQ(Value(s, "w", 3)[0], -1.52f);
  other = h;
  other.beta2 = 1.0f;
  st = push(0, 3, other);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("optimizer.beta2"), std::string::npos) << st.message();
  EXPECT_EQ(s.PartitionStep("w", 0), 3);
}

TEST(ServerStateTest, OptimizerStateMovesOutAndBackAllOrNothing) {
  ServerState s(1, std::chrono::seconds(5));
  std::vector<float> init{1, 2}, other{0};
  std::vector<bool> created;
  ASSERT_TRUE(s.Declare(0,
                        {Decl("w", init, true, OptimizerKind::kAdam),
                         Decl("v", other, false, OptimizerKind::kMomentum)},
                        &created)
                  .ok());
  std::vector<float> g{0.5f, -1.0f};
  ASSERT_TRUE(s.Push(0, 0, {Chunk("w", g)}).ok());
  std::map<std::string, OptimizerState> got;
  auto get = [&](int64_t step) {
    got.clear();
    return s.GetState(
        0, step, {{"w", 0, 0, 2}, {"v", 0, 0, 1}},
        [&](const PartitionRef& id, const Optimizer& o) { got[id.variable] = o.State(); });
  };
  ASSERT_TRUE(get(1).ok());
  EXPECT_EQ(got["w"].steps, 1);
  EXPECT_EQ(got["w"].buf.size(), 2u);
  EXPECT_EQ(got["v"].steps, 0);
  EXPECT_TRUE(got["v"].buf.empty());
  // One bad entry (a momentum buffer of the wrong size): nothing is restored.
  OptimizerState zero{7, {0, 0}, {0, 0}};
  Status st = s.SetState(0, {{{"w", 0, 0, 2}, zero}, {{"v", 0, 0, 1}, {3, {1, 2}, {}}}});
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("variable 'v'"), std::string::npos) << st.message();
  ASSERT_TRUE(get(1).ok());
  EXPECT_EQ(got["w"].steps, 1);
  EXPECT_EQ(s.SetState(0, {{{"nope", 0, 0, 2}, zero}}).code(), Code::kNotFound);
  EXPECT_EQ(s.SetState(0, {{{"w", 0, 0, 2}, zero}, {{"w", 0, 0, 2}, zero}}).code(),
            Code::kInvalidArgument);
  ASSERT_TRUE(s.SetState(0, {{{"w", 0, 0, 2}, zero}, {{"v", 0, 0, 1}, {3, {1}, {}}}}).ok());
  ASSERT_TRUE(get(1).ok());
  EXPECT_EQ(got["w"].steps, 7);
  EXPECT_EQ(got["w"].sq, (std::vector<float>{0, 0}));
  EXPECT_EQ(got["v"].buf, std::vector<float>{1});
}

TEST(ServerStateTest, StagedStateIsAppliedOnlyByCommitAndDroppedByDiscard) {
  ServerState s(2, std::chrono::seconds(5));
  std::vector<float> init{1, 2};
  std::vector<bool> created;
  ASSERT_TRUE(s.Declare(0, {Decl("w", init, false, OptimizerKind::kMomentum)}, &created).ok());
  std::map<std::string, OptimizerState> got;
  auto get = [&] {
    got.clear();
    return s.GetState(0, 0, {{"w", 0, 0, 2}}, [&](const PartitionRef& id, const Optimizer& o) {
      got[id.variable] = o.State();
    });
  };
  // Staged: checked, but nothing changes until the commit.
  ASSERT_TRUE(s.StageState(0, {{{"w", 0, 0, 2}, {1, {3, 4}, {}}}}).ok());
  ASSERT_TRUE(get().ok());
  EXPECT_EQ(got["w"].steps, 0);
  EXPECT_TRUE(got["w"].buf.empty());
  // A refused piece is not staged, and leaves what was staged before as it was.
  Status st = s.StageState(0, {{{"w", 0, 0, 2}, {1, {3, NAN}, {}}}});
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("set state of variable 'w'"), std::string::npos) << st.message();
  // Another worker's commit does not apply this worker's pieces.
  ASSERT_TRUE(s.CommitState(1, true).ok());
  ASSERT_TRUE(get().ok());
  EXPECT_TRUE(got["w"].buf.empty());
  ASSERT_TRUE(s.CommitState(0, true).ok());
  ASSERT_TRUE(get().ok());
  EXPECT_EQ(got["w"].steps, 1);
  EXPECT_EQ(got["w"].buf, (std::vector<float>{3, 4}));
  // The commit consumed the staged pieces; a discard drops them unapplied.
  ASSERT_TRUE(s.StageState(0, {{{"w", 0, 0, 2}, {1, {5, 6}, {}}}}).ok());
  ASSERT_TRUE(s.CommitState(0, false).ok());
  ASSERT_TRUE(s.CommitState(0, true).ok());
  ASSERT_TRUE(get().ok());
  EXPECT_EQ(got["w"].buf, (std::vector<float>{3, 4}));
  EXPECT_EQ(s.StageState(0, {{{"nope", 0, 0, 2}, {}}}).code(), Code::kNotFound);
  EXPECT_EQ(s.StageState(5, {}).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace cadre::ps
