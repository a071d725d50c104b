#include "cadre/ps/learner.h"

#include <gtest/gtest.h>

namespace cadre::ps {
namespace {

std::map<std::string, std::string> Env(const std::string& id) {
  return {{"LEARNER_ID", id},      {"NUM_LEARNERS", "4"},    {"LEARNER_NAME_PREFIX", "localhost"},
          {"PS_HOSTS_COUNT", "2"}, {"CADRE_JOB_TOKEN", "t"}, {"CADRE_PS_PORT", "2300"}};
}

TEST(LearnerRoleTest, ServersComeFirst) {
  LearnerRole r;
  ASSERT_TRUE(RoleFromMap(Env("2"), &r).ok());
  EXPECT_TRUE(r.is_server);
  EXPECT_EQ(r.num_workers, 2);
  ASSERT_EQ(r.server_addresses.size(), 2u);
  EXPECT_NE(r.server_addresses[1].find(":2300"), std::string::npos);
  EXPECT_EQ(r.listen_address, r.server_addresses[1]);
  auto env = Env("3");
  env["CADRE_LEARNER_ADDRESS"] = "127.0.3.1";
  ASSERT_TRUE(RoleFromMap(env, &r).ok());
  EXPECT_FALSE(r.is_server);
  EXPECT_EQ(r.worker_id, 0);
  EXPECT_EQ(r.token, "t");
}

TEST(LearnerRoleTest, NamesTheBadVariable) {
  LearnerRole r;
  auto env = Env("5");
  Status s = RoleFromMap(env, &r);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("LEARNER_ID='5'"), std::string::npos) << s.message();
  env = Env("1");
  env["PS_HOSTS_COUNT"] = "4";
  s = RoleFromMap(env, &r);
  EXPECT_NE(s.message().find("leaves no workers"), std::string::npos) << s.message();
  env = Env("1");
  env.erase("LEARNER_NAME_PREFIX");
  EXPECT_NE(RoleFromMap(env, &r).message().find("LEARNER_NAME_PREFIX"), std::string::npos);
  env = Env("1");
  env.erase("PS_HOSTS_COUNT");  // an allreduce-mode job: no servers
  EXPECT_NE(RoleFromMap(env, &r).message().find("only in a parameter-server job"),
            std::string::npos);
  env = Env("1");
  env["PS_HOSTS_COUNT"] = "0";  // a `pytorch` job run with parameter_servers: 0
  EXPECT_NE(RoleFromMap(env, &r).message().find("this job has no parameter servers"),
            std::string::npos);
  env = Env("1");
  env["NUM_LEARNERS"] = "four";
  EXPECT_NE(RoleFromMap(env, &r).message().find("NUM_LEARNERS='four'"), std::string::npos);
}

}  // namespace
}  // namespace cadre::ps
