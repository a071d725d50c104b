#include "cadre/launch/cpu_binding.h"

#include <gtest/gtest.h>

#include <thread>

namespace cadre::launch {
namespace {

using Plan = std::vector<std::vector<int>>;

TEST(CpuBindingTest, SlotsShareTheCpusInContiguousEqualParts) {
  EXPECT_EQ(PlanCpuBinding(2, {0, 1}, CpuBind::kAuto), (Plan{{0}, {1}}));
  EXPECT_EQ(PlanCpuBinding(2, {0, 1, 2, 3, 4, 5, 6, 7}, CpuBind::kAuto),
            (Plan{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  // Uneven: shares differ by one and cover every CPU; the usable list need not be 0..C-1.
  EXPECT_EQ(PlanCpuBinding(3, {2, 3, 5, 7, 11}, CpuBind::kAuto), (Plan{{2}, {3, 5}, {7, 11}}));
  EXPECT_EQ(PlanCpuBinding(1, {0, 1}, CpuBind::kAuto), (Plan{{0, 1}}));
}

TEST(CpuBindingTest, NoBindingWithMoreSlotsThanCpusOrWhenTurnedOff) {
  EXPECT_TRUE(PlanCpuBinding(4, {0, 1}, CpuBind::kAuto).empty());
  EXPECT_TRUE(PlanCpuBinding(2, {0, 1}, CpuBind::kNone).empty());
  EXPECT_TRUE(PlanCpuBinding(0, {0, 1}, CpuBind::kAuto).empty());
  EXPECT_TRUE(PlanCpuBinding(1, {}, CpuBind::kAuto).empty());
}

TEST(CpuBindingTest, ParsesTheVariable) {
  CpuBind b = CpuBind::kNone;
  EXPECT_TRUE(ParseCpuBind("", &b).ok());
  EXPECT_EQ(b, CpuBind::kAuto);
  EXPECT_TRUE(ParseCpuBind("none", &b).ok());
  EXPECT_EQ(b, CpuBind::kNone);
  EXPECT_TRUE(ParseCpuBind("auto", &b).ok());
  EXPECT_EQ(b, CpuBind::kAuto);
  Status s = ParseCpuBind("core", &b);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("CADRE_CPU_BIND=\"core\""), std::string::npos) << s.message();
}

TEST(CpuBindingTest, BindsThisThread) {
  const std::vector<int> usable = UsableCpus();
  ASSERT_FALSE(usable.empty());
  std::vector<int> after;
  std::thread([&] {
    ASSERT_EQ(BindToCpus({usable.back()}), 0);
    after = UsableCpus();
  }).join();
  EXPECT_EQ(after, std::vector<int>{usable.back()});
  EXPECT_EQ(UsableCpus(), usable);  // the other threads keep theirs
}

}  // namespace
}  // namespace cadre::launch
