#include "cadre/ps/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
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
