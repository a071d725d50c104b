#include "cadre/ps/shard_map.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace cadre::ps {
namespace {

// Every element of every variable is covered by exactly one partition, in order.
void ExpectCovers(const ShardMap& map, const std::vector<VariableShape>& vars) {
  for (const VariableShape& v : vars) {
    const auto& parts = map.partitions(v.name);
    ASSERT_FALSE(parts.empty()) << v.name;
    int64_t next = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      EXPECT_EQ(parts[i].index, static_cast<int32_t>(i));
      EXPECT_EQ(parts[i].offset, next);
      EXPECT_GE(parts[i].server, 0);
      EXPECT_LT(parts[i].server, map.num_servers());
      next += parts[i].count;
    }
    EXPECT_EQ(next, v.count) << v.name;
  }
}

TEST(ShardMapTest, SmallVariablesStayWholeAndBalance) {
  std::vector<VariableShape> vars{{"a", 100}, {"b", 100}, {"c", 50}, {"d", 50}, {"e", 0}};
  ShardMap map;
  ASSERT_TRUE(ShardMap::Build(vars, 2, 1024, &map).ok());
  ExpectCovers(map, vars);
  for (const auto& v : vars) EXPECT_EQ(map.partitions(v.name).size(), 1u);
  EXPECT_EQ(map.server_bytes()[0], 600);
  EXPECT_EQ(map.server_bytes()[1], 600);
}

TEST(ShardMapTest, LargeVariableIsSplitAcrossServers) {
  std::vector<VariableShape> vars{{"big", 10001}, {"bias", 3}};
  ShardMap map;
  ASSERT_TRUE(ShardMap::Build(vars, 3, 4096, &map).ok());
  ExpectCovers(map, vars);
  const auto& parts = map.partitions("big");
  EXPECT_EQ(parts.size(), 10u);  // ceil(10001 / 1024)
  for (const auto& p : parts) EXPECT_LE(p.count, 1024);
  std::vector<int> per_server(3, 0);
  for (const auto& p : parts) per_server[static_cast<size_t>(p.server)]++;
  EXPECT_GE(*std::min_element(per_server.begin(), per_server.end()), 3);
}

TEST(ShardMapTest, IndependentOfDeclarationOrder) {
  std::vector<VariableShape> a{{"w1", 5000}, {"b1", 10}, {"w2", 700}, {"b2", 10}};
  std::vector<VariableShape> b{a[3], a[1], a[0], a[2]};
  ShardMap ma, mb;
  ASSERT_TRUE(ShardMap::Build(a, 2, 2048, &ma).ok());
  ASSERT_TRUE(ShardMap::Build(b, 2, 2048, &mb).ok());
  for (const auto& v : a) {
    const auto& pa = ma.partitions(v.name);
    const auto& pb = mb.partitions(v.name);
    ASSERT_EQ(pa.size(), pb.size());
    for (size_t i = 0; i < pa.size(); ++i) {
      EXPECT_EQ(pa[i].server, pb[i].server);
      EXPECT_EQ(pa[i].offset, pb[i].offset);
    }
  }
}

TEST(ShardMapTest, RejectsBadInput) {
  ShardMap map;
  EXPECT_EQ(ShardMap::Build({{"a", 1}}, 0, 1024, &map).code(), Code::kInvalidArgument);
  EXPECT_EQ(ShardMap::Build({{"a", 1}}, 1, 2, &map).code(), Code::kInvalidArgument);
  EXPECT_EQ(ShardMap::Build({{"a", 1}, {"a", 2}}, 1, 1024, &map).code(), Code::kInvalidArgument);
  EXPECT_EQ(ShardMap::Build({{"", 1}}, 1, 1024, &map).code(), Code::kInvalidArgument);
  EXPECT_EQ(ShardMap::Build({{"a", -1}}, 1, 1024, &map).code(), Code::kInvalidArgument);
  EXPECT_TRUE(map.partitions("a").empty());
}

}  // namespace
}  // namespace cadre::ps
