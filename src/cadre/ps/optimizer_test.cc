#include "cadre/ps/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace cadre::ps {
namespace {

TEST(OptimizerTest, SgdWithWeightDecay) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kSgd;
  c.lr = 0.5f;
  c.weight_decay = 0.1f;
  Optimizer opt(c, 2);
  std::vector<float> p{1.0f, -2.0f}, g{0.2f, 0.4f};
  opt.Apply(p, g);
  EXPECT_FLOAT_EQ(p[0], 1.0f - 0.5f * (0.2f + 0.1f * 1.0f));
  EXPECT_FLOAT_EQ(p[1], -2.0f - 0.5f * (0.4f + 0.1f * -2.0f));
}

TEST(OptimizerTest, MomentumMatchesTorchRecurrence) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kMomentum;
  c.lr = 0.1f;
  c.momentum = 0.9f;
  c.dampening = 0.5f;
  Optimizer opt(c, 1);
  std::vector<float> p{1.0f};
  std::vector<float> g1{1.0f}, g2{2.0f};
  opt.Apply(p, g1);  // buf = g1 (no dampening on the first step)
  EXPECT_FLOAT_EQ(p[0], 1.0f - 0.1f * 1.0f);
  opt.Apply(p, g2);  // buf = 0.9 * 1 + 0.5 * 2 = 1.9
  EXPECT_FLOAT_EQ(p[0], 0.9f - 0.1f * 1.9f);
}

TEST(OptimizerTest, Nesterov) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kMomentum;
  c.lr = 0.1f;
  c.momentum = 0.5f;
  c.nesterov = true;
  Optimizer opt(c, 1);
  std::vector<float> p{0.0f}, g{1.0f};
  opt.Apply(p, g);  // buf = 1, d = 1 + 0.5 * 1
  EXPECT_FLOAT_EQ(p[0], -0.15f);
  opt.Apply(p, g);  // buf = 1.5, d = 1 + 0.75
  EXPECT_FLOAT_EQ(p[0], -0.15f - 0.175f);
}

TEST(OptimizerTest, AdamClosedFormForConstantGradient) {
  // With a constant gradient g the bias-corrected moments are exactly g and g^2, so every step
  // moves by lr * g / (|g| + eps).
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdam;
  c.lr = 0.01f;
  c.beta1 = 0.9f;
  c.beta2 = 0.99f;
  c.eps = 1e-3f;
  Optimizer opt(c, 2);
  std::vector<float> p{0.0f, 1.0f}, g{0.5f, -2.0f};
  for (int t = 1; t <= 3; ++t) {
    opt.Apply(p, g);
    EXPECT_NEAR(p[0], -t * 0.01 * 0.5 / (0.5 + 1e-3), 1e-6);
    EXPECT_NEAR(p[1], 1.0 + t * 0.01 * 2.0 / (2.0 + 1e-3), 1e-6);
  }
  EXPECT_EQ(opt.steps(), 3);
}

TEST(OptimizerTest, SumAccumulates) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kSum;
  Optimizer opt(c, 3);
  std::vector<float> p{1, 2, 3}, g{10, 20, 30};
  opt.Apply(p, g);
  EXPECT_EQ(p, (std::vector<float>{11, 22, 33}));
}

TEST(OptimizerTest, AssignTakesTheValue) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kAssign;
  Optimizer opt(c, 2);
  std::vector<float> p{1, 2}, g{-3, 0.5f};
  opt.Apply(p, g);
  EXPECT_EQ(p, g);
}

TEST(OptimizerTest, LearningRateChangesBetweenUpdates) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kSgd;
  c.lr = 1.0f;
  Optimizer opt(c, 1);
  std::vector<float> p{0.0f}, g{1.0f};
  opt.Apply(p, g);
  opt.SetLr(0.25f);
  opt.Apply(p, g);
  EXPECT_FLOAT_EQ(p[0], -1.25f);
  EXPECT_FLOAT_EQ(opt.lr(), 0.25f);
}

// A restored optimizer continues exactly as the one whose state it took.
TEST(OptimizerTest, RestoredStateContinuesTheSameTrajectory) {
  for (OptimizerKind kind : {OptimizerKind::kMomentum, OptimizerKind::kAdam}) {
    OptimizerConfig c;
    c.kind = kind;
    c.lr = 0.1f;
    c.momentum = 0.9f;
    Optimizer a(c, 3), b(c, 3);
    std::vector<float> pa{1, 2, 3}, g{0.5f, -1, 2};
    EXPECT_TRUE(a.State().buf.empty());  // torch has no buffer before the first step
    for (int i = 0; i < 3; ++i) a.Apply(pa, g);
    OptimizerState st = a.State();
    EXPECT_EQ(st.steps, 3);
    ASSERT_EQ(st.buf.size(), 3u);
    EXPECT_EQ(st.sq.size(), kind == OptimizerKind::kAdam ? 3u : 0u);
    ASSERT_TRUE(b.Restore(st).ok());
    std::vector<float> pb = pa;
    a.Apply(pa, g);
    b.Apply(pb, g);
    EXPECT_EQ(pa, pb) << OptimizerKindName(kind);
  }
}

TEST(OptimizerTest, RestoreRefusesStateOfAnotherShapeOrKind) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdam;
  Optimizer adam(c, 2);
  std::vector<float> p{1, 2}, g{1, 1};
  adam.Apply(p, g);
  const OptimizerState good = adam.State();
  OptimizerState st = good;
  st.sq.clear();  // Adam after a step needs both moments
  EXPECT_EQ(adam.Restore(st).code(), Code::kInvalidArgument);
  st = good;
  st.buf.push_back(0);
  Status s = adam.Restore(st);
  EXPECT_NE(s.message().find("state.buf: 3 values for a partition of 2"), std::string::npos)
      << s.message();
  st = good;
  st.steps = -1;
  EXPECT_NE(adam.Restore(st).message().find("state.steps"), std::string::npos);
  st = good;
  st.sq[0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(adam.Restore(st).code(), Code::kInvalidArgument);
  EXPECT_EQ(adam.State().buf, good.buf);  // a refused state changed nothing
  c.kind = OptimizerKind::kSgd;
  Optimizer sgd(c, 2);
  s = sgd.Restore(good);
  EXPECT_NE(s.message().find("sgd keeps none"), std::string::npos) << s.message();
  EXPECT_TRUE(sgd.Restore({5, {}, {}}).ok());
}

TEST(OptimizerTest, ValidateNamesTheField) {
  OptimizerConfig c;
  c.lr = -1;
  EXPECT_NE(c.Validate().message().find("optimizer.lr"), std::string::npos);
  c = {};
  c.kind = OptimizerKind::kAdam;
  c.beta2 = 1.0f;
  EXPECT_NE(c.Validate().message().find("optimizer.beta2"), std::string::npos);
  c = {};
  c.kind = OptimizerKind::kMomentum;
  c.nesterov = true;
  EXPECT_EQ(c.Validate().code(), Code::kInvalidArgument);
  OptimizerKind k;
  EXPECT_EQ(ParseOptimizerKind("rmsprop", &k).code(), Code::kInvalidArgument);
  EXPECT_TRUE(ParseOptimizerKind("adam", &k).ok());
  EXPECT_EQ(k, OptimizerKind::kAdam);
}

}  // namespace
}  // namespace cadre::ps
