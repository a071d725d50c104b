// The fixture shared by the tests that build real emulated networks: skips (with the reason)
// where namespaces cannot be created, and gives each test its own job id and state directory so
// that test cases may run in parallel.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "cadre/launch/netem/network_emulator.h"

namespace cadre::netem {

class EmulatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static const Status support = CheckNetnsSupport();
    if (!support.ok()) GTEST_SKIP() << "needs network namespaces: " << support.message();
    char tmpl[] = "/tmp/cadre-netem-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    state_dir_ = tmpl;
  }
  void TearDown() override {
    if (!state_dir_.empty()) std::filesystem::remove_all(state_dir_);
  }

  EmulatorOptions Options(int hosts, const std::string& link) {
    EmulatorOptions o;
    o.hosts = hosts;
    o.link = ParseLinkSpecOrThrow(link);
    // Unique per process and test (ids are at most 40 characters).
    std::string test = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    o.job_id = "t" + std::to_string(getpid()) + "-" + test.substr(0, 24);
    o.state_dir = state_dir_;
    return o;
  }

  std::unique_ptr<NetworkEmulator> Create(const EmulatorOptions& o) {
    std::unique_ptr<NetworkEmulator> emu;
    Status s = NetworkEmulator::Create(o, &emu);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return emu;
  }

  std::string state_dir_;
};

}  // namespace cadre::netem
