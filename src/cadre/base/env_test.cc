#include "cadre/base/env.h"
#include "cadre/base/logging.h"

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

TEST(LogLevelTest, EveryDocumentedValueParsesAndOthersAreNamed) {
  std::string complaint;
  EXPECT_EQ(ParseLogLevel(nullptr, &complaint), LogLevel::kWarning);
  EXPECT_EQ(ParseLogLevel("", &complaint), LogLevel::kWarning);
  EXPECT_EQ(complaint, "");
  for (const char* v : {"debug", "DEBUG", "0"})
    EXPECT_EQ(ParseLogLevel(v, &complaint), LogLevel::kDebug);
  for (const char* v : {"info", "INFO", "1"})
    EXPECT_EQ(ParseLogLevel(v, &complaint), LogLevel::kInfo);
  for (const char* v : {"warning", "WARNING", "2"}) {
    EXPECT_EQ(ParseLogLevel(v, &complaint), LogLevel::kWarning);
    EXPECT_EQ(complaint, "") << v;
  }
  for (const char* v : {"error", "ERROR", "3"})
    EXPECT_EQ(ParseLogLevel(v, &complaint), LogLevel::kError);
  EXPECT_EQ(ParseLogLevel("verbose", &complaint), LogLevel::kWarning);
  EXPECT_NE(complaint.find("CADRE_LOG_LEVEL='verbose'"), std::string::npos) << complaint;
  EXPECT_NE(complaint.find("debug, info, warning, error"), std::string::npos) << complaint;
}

}  // namespace
}  // namespace cadre
