#include "cadre/netem/command.h"

#include <gtest/gtest.h>

namespace cadre::netem {
namespace {

using std::chrono::seconds;

TEST(CommandTest, CapturesOutputAndExitCode) {
  CommandResult r;
  ASSERT_TRUE(
      RunCommand({"sh", "-c", "echo out; echo err >&2; exit 3"}, Deadline(seconds(30)), &r).ok());
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.stdout_text, "out\n");
  EXPECT_EQ(r.stderr_text, "err\n");
}

TEST(CommandTest, ArgumentsAreNotInterpretedByAShell) {
  std::string out;
  ASSERT_TRUE(RunChecked({"echo", "a b", "$HOME", ";", "*"}, Deadline(seconds(30)), &out).ok());
  EXPECT_EQ(out, "a b $HOME ; *\n");
}

TEST(CommandTest, CheckedFailureQuotesCommandAndStderr) {
  Status s = RunChecked({"sh", "-c", "echo 'no such device' >&2; exit 2"}, Deadline(seconds(30)));
  EXPECT_EQ(s.code(), Code::kIo);
  EXPECT_EQ(s.message(),
            "`sh -c echo 'no such device' >&2; exit 2` failed (exit 2): no such device");
}

TEST(CommandTest, MissingProgramIsNotFound) {
  CommandResult r;
  Status s = RunCommand({"cadre-no-such-program"}, Deadline(seconds(30)), &r);
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_NE(s.message().find("cadre-no-such-program"), std::string::npos);
  EXPECT_EQ(RunCommand({}, Deadline(seconds(1)), &r).code(), Code::kInvalidArgument);
}

TEST(CommandTest, KilledAtTheDeadline) {
  CommandResult r;
  auto start = Clock::now();
  Status s = RunCommand({"sleep", "60"}, Deadline(std::chrono::milliseconds(200)), &r);
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_NE(s.message().find("sleep 60"), std::string::npos);
  EXPECT_LT(Clock::now() - start, seconds(30));  // generous: only "it did not wait for sleep"
}

TEST(CommandTest, DeadlineAppliesWhenTheChildClosesItsOutput) {
  CommandResult r;
  Status s = RunCommand({"sh", "-c", "exec >&- 2>&-; sleep 60"},
                        Deadline(std::chrono::milliseconds(200)), &r);
  EXPECT_EQ(s.code(), Code::kTimeout);
}

}  // namespace
}  // namespace cadre::netem
