#include "cadre/service/resource_id.h"

#include <gtest/gtest.h>

namespace cadre::service {
namespace {

TEST(ResourceIdTest, TheServicesOwnIdsPass) {
  EXPECT_TRUE(CheckResourceId("training-20261202-052456-9f3e89", "training").ok());
  EXPECT_TRUE(CheckResourceId("model_1.v2", "model").ok());
}

TEST(ResourceIdTest, PathLikeAndMalformedIdsAreNamed) {
  for (const char* id : {"../../etc", "..", ".", ".hidden", "a/b", "a b", "", "x\n", "a\\b"}) {
    Status st = CheckResourceId(id, "training");
    ASSERT_FALSE(st.ok()) << id;
    EXPECT_NE(st.message().find("is not a training id"), std::string::npos) << st.message();
  }
  EXPECT_NE(CheckResourceId("../../etc", "training").message().find("'../../etc'"),
            std::string::npos);
  EXPECT_FALSE(CheckResourceId(std::string(129, 'a'), "training").ok());
  EXPECT_TRUE(CheckResourceId(std::string(128, 'a'), "training").ok());
}

TEST(ResourceIdTest, ThePathsIdIsChecked) {
  EXPECT_TRUE(CheckIdInPath("/ml/v4/trainings/training-1/logs").ok());
  EXPECT_TRUE(CheckIdInPath("/ml/v4/trainings/training-1").ok());
  EXPECT_TRUE(CheckIdInPath("/ml/v4/trainings").ok());
  EXPECT_TRUE(CheckIdInPath("/v2/models/x/infer").ok());
  // A well-formed id before a route the server may not have: the routes answer (404).
  EXPECT_TRUE(CheckIdInPath("/ml/v4/trainings/training-1/metrics").ok());
  Status st = CheckIdInPath("/ml/v4/trainings/../../etc/logs");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'../../etc' is not a training id"), std::string::npos)
      << st.message();
  st = CheckIdInPath("/ml/v4/trainings/training-1/../../y/logs");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'training-1/../../y'"), std::string::npos) << st.message();
  EXPECT_FALSE(CheckIdInPath("/ml/v4/trainings/").ok());
  EXPECT_FALSE(CheckIdInPath("/ml/v4/trainings//logs").ok());
  EXPECT_FALSE(CheckIdInPath("/ml/v4/models/../x/download").ok());
  st = CheckIdInPath("/ml/v4/deployments/a b/predictions");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'a b' is not a deployment id"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace cadre::service
