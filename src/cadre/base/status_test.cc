#include "cadre/base/status.h"

#include <gtest/gtest.h>

namespace cadre {
namespace {

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, CarriesCodeAndContext) {
  Status s = TimeoutError("rank 3 did not answer").WithContext("allreduce");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kTimeout);
  EXPECT_EQ(s.ToString(), "Timeout: allreduce: rank 3 did not answer");
}

TEST(StatusTest, ErrorKeepsStatus) {
  try {
    ThrowIfError(IoError("peer rank 1 closed the connection"));
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kIo);
    EXPECT_STREQ(e.what(), "IoError: peer rank 1 closed the connection");
  }
}

Status Propagates() {
  CADRE_RETURN_IF_ERROR(ProtocolError("bad magic"));
  return Status::Ok();
}

TEST(StatusTest, ReturnIfError) { EXPECT_EQ(Propagates().code(), Code::kProtocol); }

}  // namespace
}  // namespace cadre
