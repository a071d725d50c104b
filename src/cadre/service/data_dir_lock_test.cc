// One server per data directory: a second lock on the same folder is refused at once, naming
// the holder; the lock ends with its holder, and a child that execs does not keep it.
#include "cadre/service/data_dir_lock.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace cadre::service {
namespace {
namespace fs = std::filesystem;

class DataDirLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cadre-lock-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(DataDirLockTest, ASecondHolderIsRefusedNamingTheFirst) {
  std::unique_ptr<DataDirLock> first, second;
  ASSERT_TRUE(DataDirLock::Acquire(dir_, &first).ok());
  Status st = DataDirLock::Acquire(dir_, &second);
  EXPECT_EQ(st.code(), Code::kAlreadyExists) << st.message();
  EXPECT_EQ(second, nullptr);
  EXPECT_NE(st.message().find("pid " + std::to_string(getpid())), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find(dir_.string()), std::string::npos) << st.message();
  first.reset();
  EXPECT_TRUE(DataDirLock::Acquire(dir_, &second).ok());  // released with its holder
}

TEST_F(DataDirLockTest, AProcessThatEndedLeavesNoLockBehind) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::unique_ptr<DataDirLock> lock;
    _exit(DataDirLock::Acquire(dir_, &lock).ok() ? 0 : 1);  // ends holding it
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(fs::exists(dir_ / "server.lock"));  // the file stays; the lock does not
  std::unique_ptr<DataDirLock> lock;
  EXPECT_TRUE(DataDirLock::Acquire(dir_, &lock).ok());
}

// The server's jobs and deployments are started with fork and exec and may outlive it: they
// must not keep the data directory locked against the next server.
TEST_F(DataDirLockTest, ProgramsStartedByTheHolderDoNotHoldIt) {
  std::unique_ptr<DataDirLock> lock;
  ASSERT_TRUE(DataDirLock::Acquire(dir_, &lock).ok());
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(ready[0]);
    // The pipe's write end survives exec: the new program writes to it once it runs.
    std::string fd = std::to_string(ready[1]);
    execl("/bin/sh", "sh", "-c", ("echo x >&" + fd + "; exec sleep 30").c_str(), nullptr);
    _exit(127);
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  lock.reset();  // the holder goes; its exec'ed child is still running
  std::unique_ptr<DataDirLock> next;
  Status st = DataDirLock::Acquire(dir_, &next);
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  EXPECT_TRUE(st.ok()) << st.message();
}

}  // namespace
}  // namespace cadre::service
