#include "cadre/netem/host_exec.h"

#include <gtest/gtest.h>

#include "cadre/netem/emulator_test_fixture.h"

namespace cadre::netem {
namespace {

using HostExecTest = EmulatorTest;

TEST_F(HostExecTest, EachProcessRunsInItsHostWithItsEnvironment) {
  EmulatorOptions o = Options(2, "1gbit");
  o.host_names = {"h-0", "h-1"};
  auto emu = Create(o);
  ASSERT_TRUE(emu);
  auto env = HostEnvironment(*emu, 1);
  ASSERT_EQ(env.size(), 6u);
  EXPECT_EQ(env[2].second, "198.18.0.3");
  EXPECT_EQ(env[3].second, "198.18.0.2,198.18.0.3");
  // Each process sees its own address on eth0 and its own host name; exit codes say which failed.
  const std::string script =
      "ip -o -4 addr show dev eth0 | grep -q \" $CADRE_NETEM_ADDRESS/15 \" || exit 3; "
      "[ \"$(hostname)\" = \"h-$CADRE_NETEM_HOST\" ] || exit 4; "
      "[ \"$CADRE_NETEM_HOSTS\" = 2 ] && [ \"$CADRE_NETEM_SWITCH\" = 198.18.0.1 ] || exit 5";
  int code = -1;
  Status s = RunOnEveryHost(*emu, {"sh", "-c", script}, {}, &code);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(code, 0) << "3: wrong address, 4: wrong host name, 5: wrong environment";
}

TEST_F(HostExecTest, ReportsTheFirstFailureInHostOrder) {
  auto emu = Create(Options(3, "1gbit"));
  ASSERT_TRUE(emu);
  int code = -1;
  ASSERT_TRUE(RunOnEveryHost(*emu, {"sh", "-c", "exit $((CADRE_NETEM_HOST * 7))"}, {}, &code).ok());
  EXPECT_EQ(code, 7);
  ASSERT_TRUE(RunOnEveryHost(*emu, {"cadre-no-such-program"}, {}, &code).ok());
  EXPECT_EQ(code, 127);
  EXPECT_EQ(RunOnEveryHost(*emu, {}, {}, &code).code(), Code::kInvalidArgument);
}

TEST_F(HostExecTest, DeadlineKillsEveryProcess) {
  auto emu = Create(Options(2, "1gbit"));
  ASSERT_TRUE(emu);
  HostExecOptions options;
  options.deadline = Deadline(std::chrono::milliseconds(300));
  int code = -1;
  auto start = Clock::now();
  Status s = RunOnEveryHost(*emu, {"sleep", "60"}, options, &code);
  EXPECT_EQ(s.code(), Code::kTimeout) << s.ToString();
  EXPECT_EQ(code, 128 + SIGKILL);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));  // generous: it did not wait 60 s
}

}  // namespace
}  // namespace cadre::netem
