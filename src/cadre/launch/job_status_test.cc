// RecordRefusal: a refused runner's reason reaches its job directory, and nobody else's record
// is touched.
#include "cadre/launch/job_status.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace cadre::launch {
namespace {

namespace fs = std::filesystem;

class RecordRefusalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/job_status_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }

  static std::string Read(const fs::path& file) {
    std::ifstream in(file);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  fs::path root_;
};

TEST_F(RecordRefusalTest, AMissingJobDirectoryGetsAFailedStatusWithTheReason) {
  fs::path dir = root_ / "work" / "job";
  ASSERT_TRUE(RecordRefusal(dir, "training-1", "--partition: no such partition", 2).ok());
  nlohmann::json status = nlohmann::json::parse(Read(dir / "status.json"));
  EXPECT_EQ(status["state"], "failed");
  EXPECT_EQ(status["failure"], "--partition: no such partition");
  EXPECT_EQ(status["exit_code"], 2);
  EXPECT_EQ(status["training_id"], "training-1");
}

TEST_F(RecordRefusalTest, TheJobsOwnRecordIsKept) {
  std::ofstream(root_ / "status.json") << "{\"state\": \"completed\"}";
  ASSERT_TRUE(RecordRefusal(root_, "training-1", "late", 1).ok());
  EXPECT_EQ(Read(root_ / "status.json"), "{\"state\": \"completed\"}");
}

TEST_F(RecordRefusalTest, ASetUpBegunByTheRunnerIsCompleted) {
  std::ofstream(root_ / "manifest.yaml") << "name: x\n";
  ASSERT_TRUE(RecordRefusal(root_, "training-1", "the store could not start", 1).ok());
  nlohmann::json status = nlohmann::json::parse(Read(root_ / "status.json"));
  EXPECT_EQ(status["failure"], "the store could not start");
}

TEST_F(RecordRefusalTest, SomeoneElsesFolderIsLeftAlone) {
  std::ofstream(root_ / "notes.txt") << "mine\n";
  Status st = RecordRefusal(root_, "training-1", "refused", 2);
  EXPECT_EQ(st.code(), Code::kAlreadyExists) << st.message();
  EXPECT_FALSE(fs::exists(root_ / "status.json"));
}

}  // namespace
}  // namespace cadre::launch
