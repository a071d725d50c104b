// Slurm's host list rules, as SLURM_JOB_NODELIST writes them.
#include "cadre/backends/hostlist.h"

#include <gtest/gtest.h>

namespace cadre::backends {
namespace {

std::vector<std::string> Expand(std::string_view list) {
  std::vector<std::string> hosts;
  Status st = ExpandHostlist(list, &hosts);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return hosts;
}

using V = std::vector<std::string>;

TEST(Hostlist, PlainNamesAndRanges) {
  EXPECT_EQ(Expand("node1"), V({"node1"}));
  EXPECT_EQ(Expand("node[1-3]"), V({"node1", "node2", "node3"}));
  EXPECT_EQ(Expand("a,b[2,4],c"), V({"a", "b2", "b4", "c"}));
}

TEST(Hostlist, ZeroPaddingIsKept) {
  EXPECT_EQ(Expand("gpu[08-11]"), V({"gpu08", "gpu09", "gpu10", "gpu11"}));
  EXPECT_EQ(Expand("n[001-002,010]"), V({"n001", "n002", "n010"}));
}

TEST(Hostlist, SeveralGroupsAndSuffixes) {
  EXPECT_EQ(Expand("r[1-2]n[1-2]"), V({"r1n1", "r1n2", "r2n1", "r2n2"}));
  EXPECT_EQ(Expand("node[1-2]-ib"), V({"node1-ib", "node2-ib"}));
}

TEST(Hostlist, BadListsAreRefusedNamingTheEntry) {
  std::vector<std::string> hosts;
  Status st = ExpandHostlist("ok,node[1-3", &hosts);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("unbalanced"), std::string::npos) << st.message();
  st = ExpandHostlist("node[3-1]", &hosts);
  EXPECT_NE(st.message().find("runs backwards"), std::string::npos) << st.message();
  st = ExpandHostlist("node[a-b]", &hosts);
  EXPECT_NE(st.message().find("'a-b' is not a number"), std::string::npos) << st.message();
  st = ExpandHostlist("node[1-99999999]", &hosts, 1000);
  EXPECT_NE(st.message().find("more than 1000"), std::string::npos) << st.message();
  st = ExpandHostlist("node]1", &hosts);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace cadre::backends
