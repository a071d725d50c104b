#include "cadre/netem/job_state.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace cadre::netem {
namespace {

namespace fs = std::filesystem;

class JobStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cadre-netem-state-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A pid that existed and has exited (and been reaped).
  static pid_t DeadPid() {
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    int status = 0;
    waitpid(pid, &status, 0);
    return pid;
  }

  std::string dir_;
};

TEST_F(JobStateTest, WriteReadRoundTrip) {
  JobState state = StateForThisProcess({"cadre-j-sw", "cadre-j-h0"});
  std::string path = dir_ + "/nested/cadre-j.state";
  ASSERT_TRUE(WriteJobState(path, state).ok());
  JobState read;
  ASSERT_TRUE(ReadJobState(path, &read).ok());
  EXPECT_EQ(read.owner_pid, getpid());
  EXPECT_EQ(read.owner_start, state.owner_start);
  EXPECT_EQ(read.namespaces, state.namespaces);
  EXPECT_EQ(ReadJobState(dir_ + "/missing.state", &read).code(), Code::kNotFound);
}

TEST_F(JobStateTest, MalformedRecordNamesFileAndLine) {
  std::string path = dir_ + "/cadre-bad.state";
  std::ofstream(path) << "owner_pid 12\nowner_start 5\nnetns ../etc\n";
  JobState state;
  Status s = ReadJobState(path, &state);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find(path + ":3"), std::string::npos) << s.message();
  std::ofstream(path) << "owner_pid 12\n";
  EXPECT_EQ(ReadJobState(path, &state).code(), Code::kInvalidArgument);
  std::ofstream(path) << "owner_pid 12\nowner_start 5\ncolour blue\n";
  EXPECT_NE(ReadJobState(path, &state).message().find("unknown key 'colour'"), std::string::npos);
}

TEST_F(JobStateTest, OwnerLivenessUsesStartTime) {
  unsigned long long start = ProcessStartTime(getpid());
  ASSERT_NE(start, 0u);
  EXPECT_TRUE(OwnerAlive(getpid(), start));
  // Same pid, different start time: a recycled pid is not the owner.
  EXPECT_FALSE(OwnerAlive(getpid(), start + 1));
  EXPECT_FALSE(OwnerAlive(DeadPid(), start));
  EXPECT_FALSE(OwnerAlive(0, 0));
}

TEST_F(JobStateTest, SweepRemovesOnlyDeadOwnersRecordsWithThePrefix) {
  // The namespaces named here do not exist, so this needs no privileges: it checks which records
  // the sweep judges stale. Real namespaces are swept in network_emulator_test.cc.
  const std::string ghost = "cadre-ghost-" + std::to_string(getpid());
  JobState dead;
  dead.owner_pid = DeadPid();
  dead.owner_start = 1;
  dead.namespaces = {ghost + "-sw"};
  ASSERT_TRUE(WriteJobState(dir_ + "/cadre-dead.state", dead).ok());
  ASSERT_TRUE(WriteJobState(dir_ + "/other-dead.state", dead).ok());
  ASSERT_TRUE(WriteJobState(dir_ + "/cadre-live.state", StateForThisProcess({ghost + "-h0"})).ok());
  std::ofstream(dir_ + "/cadre-garbage.state") << "not a record\n";

  std::vector<std::string> removed;
  ASSERT_TRUE(SweepStaleJobs(dir_, "cadre-", Deadline(std::chrono::seconds(30)), &removed).ok());
  EXPECT_TRUE(removed.empty());  // nothing existed to remove
  EXPECT_FALSE(fs::exists(dir_ + "/cadre-dead.state"));
  EXPECT_TRUE(fs::exists(dir_ + "/other-dead.state"));     // another prefix
  EXPECT_TRUE(fs::exists(dir_ + "/cadre-live.state"));     // owner alive
  EXPECT_TRUE(fs::exists(dir_ + "/cadre-garbage.state"));  // unknown content is left alone
}

TEST_F(JobStateTest, SweepOfMissingDirectoryIsANoOp) {
  EXPECT_TRUE(SweepStaleJobs(dir_ + "/none", "cadre-", Deadline(std::chrono::seconds(5))).ok());
}

}  // namespace
}  // namespace cadre::netem
