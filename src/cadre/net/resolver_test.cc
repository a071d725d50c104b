#include "cadre/net/resolver.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "cadre/net/socket.h"

namespace cadre::net {
namespace {

using namespace std::chrono_literals;

class ResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "cadre_hosts_" + std::to_string(::getpid());
    std::ofstream out(path_);
    out << "# the job's hosts\n127.0.0.1 localhost\n\n127.0.0.1\tLearner-1 learner-1.job  # one\n"
           "::1 learner-6\n";
  }
  void TearDown() override {
    unsetenv("CADRE_HOSTS");
    ::unlink(path_.c_str());
  }
  std::string path_;
};

TEST_F(ResolverTest, LooksNamesUpLikeTheCLibrary) {
  std::string addr;
  ASSERT_TRUE(LookupHostsFile(path_, "learner-1", &addr).ok());
  EXPECT_EQ(addr, "127.0.0.1");
  ASSERT_TRUE(LookupHostsFile(path_, "LEARNER-1.JOB", &addr).ok());
  ASSERT_TRUE(LookupHostsFile(path_, "learner-6", &addr).ok());
  EXPECT_EQ(addr, "::1");
  EXPECT_EQ(LookupHostsFile(path_, "one", &addr).code(), Code::kNotFound);  // a comment
  EXPECT_EQ(LookupHostsFile(path_ + ".missing", "x", &addr).code(), Code::kIo);
}

TEST_F(ResolverTest, ConnectUsesTheHostsFile) {
  Socket listener;
  ASSERT_TRUE(Socket::Listen("127.0.0.1", 0, 4, &listener).ok());
  EXPECT_EQ(ResolveWithHostsFile(path_, "learner-1"), "127.0.0.1");
  Socket c;
  Status s = Socket::Connect("learner-1", listener.local_port(), Deadline(5s), &c, path_);
  ASSERT_TRUE(s.ok()) << s.ToString();
  // A name the file does not list goes to getaddrinfo unchanged, with a note for its error.
  std::string note;
  EXPECT_EQ(ResolveWithHostsFile(path_, "learner-9", &note), "learner-9");
  EXPECT_NE(note.find("CADRE_HOSTS file " + path_), std::string::npos) << note;
}

TEST_F(ResolverTest, TheEnvironmentIsNotReadBelowTheEdges) {
  // CADRE_HOSTS reaches the sockets only as a value (config/from_env.h reads it).
  setenv("CADRE_HOSTS", path_.c_str(), 1);
  EXPECT_EQ(ResolveWithHostsFile("", "learner-1"), "learner-1");
  Socket listener;
  Status s = Socket::Listen("learner-1", 0, 4, &listener, path_);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

}  // namespace
}  // namespace cadre::net
