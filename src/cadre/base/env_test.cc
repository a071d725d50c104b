#include "cadre/base/env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"

namespace cadre {
namespace {

TEST(EnvTest, IntDefaultsAndParses) {
  unsetenv("CADRE_TEST_INT");
  EXPECT_EQ(EnvInt("CADRE_TEST_INT", 7), 7);
  setenv("CADRE_TEST_INT", "42", 1);
  EXPECT_EQ(EnvInt("CADRE_TEST_INT", 7), 42);
  setenv("CADRE_TEST_INT", "4x", 1);
  EXPECT_THROW(EnvInt("CADRE_TEST_INT", 7), Error);
}

TEST(EnvTest, Seconds) {
  setenv("CADRE_TEST_SECS", "0.25", 1);
  EXPECT_EQ(EnvSeconds("CADRE_TEST_SECS", Duration(5)).count(), 250);
  setenv("CADRE_TEST_SECS", "-1", 1);
  EXPECT_THROW(EnvSeconds("CADRE_TEST_SECS", Duration(5)), Error);
}

TEST(EnvTest, Bool) {
  setenv("CADRE_TEST_BOOL", "yes", 1);
  EXPECT_TRUE(EnvBool("CADRE_TEST_BOOL", false));
  setenv("CADRE_TEST_BOOL", "maybe", 1);
  EXPECT_THROW(EnvBool("CADRE_TEST_BOOL", false), Error);
}

TEST(DeadlineTest, ExpiresAndClamps) {
  Deadline d(Duration(0));
  EXPECT_TRUE(d.expired());
  EXPECT_EQ(d.remaining().count(), 0);
  EXPECT_EQ(Deadline::Never().poll_timeout_ms(), -1);
}

}  // namespace
}  // namespace cadre
