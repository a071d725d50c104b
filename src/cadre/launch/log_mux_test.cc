// The log multiplexer: whole, prefixed lines on the console, raw lines in the log files.
#include "cadre/launch/log_mux.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace cadre::launch {
namespace {

std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(LogMux, LinesArePrefixedWholeAndUnmixed) {
  auto dir = std::filesystem::temp_directory_path() / ("log_mux_test." + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  int console[2];
  ASSERT_EQ(pipe(console), 0);
  {
    LogMux mux(LogMuxOptions{console[1], console[1], false, false, 2});
    int a = -1, b = -1;
    size_t ia = 0, ib = 0;
    ASSERT_TRUE(mux.AddStream("learner-1/0", dir / "a.log", &a, &ia).ok());
    ASSERT_TRUE(mux.AddStream("learner-2/1", dir / "b.log", &b, &ib).ok());
    // Partial lines from both streams, interleaved, and a last line without a newline.
    ASSERT_EQ(write(a, "hel", 3), 3);
    ASSERT_EQ(write(b, "wor", 3), 3);
    bool extra = false;
    for (int i = 0; i < 4; ++i) mux.Poll(50, -1, &extra);
    ASSERT_EQ(write(a, "lo\nsecond\nthi", 13), 13);
    ASSERT_EQ(write(b, "ld\n", 3), 3);
    close(a);
    close(b);
    mux.Drain(2000);
    EXPECT_TRUE(mux.all_closed());
    ASSERT_EQ(mux.tail(ia).size(), 2u);  // tail_lines = 2
    EXPECT_EQ(mux.tail(ia).back(), "thi");
    EXPECT_EQ(mux.tail(ib).back(), "world");
  }
  close(console[1]);
  std::string out = ReadAll(console[0]);
  close(console[0]);
  std::istringstream lines(out);
  std::vector<std::string> got;
  for (std::string line; std::getline(lines, line);) got.push_back(line);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"[learner-1/0] hello", "[learner-1/0] second",
                                           "[learner-1/0] thi", "[learner-2/1] world"}));
  EXPECT_EQ(ReadFile(dir / "a.log"), "hello\nsecond\nthi\n");
  EXPECT_EQ(ReadFile(dir / "b.log"), "world\n");
  std::filesystem::remove_all(dir);
}

// Unlabelled streams (the slots of a Kubernetes pod, whose log the runner prefixes itself): lines
// go out as they are, and long lines written in pieces by two slots at once still come out whole.
TEST(LogMux, UnlabelledLongLinesComeOutWholeAndUnprefixed) {
  auto dir = std::filesystem::temp_directory_path() / ("log_mux_u." + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  int console[2];
  ASSERT_EQ(pipe(console), 0);
  const std::string long_a(10000, 'a'), long_b(10000, 'b');
  {
    LogMux mux(LogMuxOptions{console[1], console[1], false, false, 2});
    int a = -1, b = -1;
    size_t ia = 0, ib = 0;
    ASSERT_TRUE(mux.AddStream("", dir / "a.log", &a, &ia).ok());
    ASSERT_TRUE(mux.AddStream("", dir / "b.log", &b, &ib).ok());
    bool extra = false;
    for (size_t at = 0; at < long_a.size(); at += 2500) {
      ASSERT_EQ(write(a, long_a.data() + at, 2500), 2500);
      ASSERT_EQ(write(b, long_b.data() + at, 2500), 2500);
      mux.Poll(20, -1, &extra);
    }
    ASSERT_EQ(write(a, "\n", 1), 1);
    ASSERT_EQ(write(b, "\n", 1), 1);
    close(a);
    close(b);
    mux.Drain(2000);
  }
  close(console[1]);
  std::string out = ReadAll(console[0]);
  close(console[0]);
  std::istringstream lines(out);
  std::vector<std::string> got;
  for (std::string line; std::getline(lines, line);) got.push_back(line);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{long_a, long_b}));
  EXPECT_EQ(ReadFile(dir / "a.log"), long_a + "\n");
  std::filesystem::remove_all(dir);
}

TEST(LogMux, QuietKeepsLogsOnly) {
  auto dir = std::filesystem::temp_directory_path() / ("log_mux_q." + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  int console[2];
  ASSERT_EQ(pipe(console), 0);
  {
    LogMux mux(LogMuxOptions{console[1], console[1], true, false, 20});
    int a = -1;
    size_t ia = 0;
    ASSERT_TRUE(mux.AddStream("learner-1/0", dir / "a.log", &a, &ia).ok());
    ASSERT_EQ(write(a, "x\n", 2), 2);
    close(a);
    mux.Drain(2000);
  }
  close(console[1]);
  EXPECT_EQ(ReadAll(console[0]), "");
  close(console[0]);
  EXPECT_EQ(ReadFile(dir / "a.log"), "x\n");
  std::filesystem::remove_all(dir);
}

TEST(LogMux, AFullDiskIsReportedOnceAndCounted) {
  int console[2];
  ASSERT_EQ(pipe(console), 0);
  {
    LogMux mux(LogMuxOptions{console[1], console[1], true, false, 20});
    int a = -1;
    size_t ia = 0;
    // /dev/full fails every write with ENOSPC, as a full disk does.
    ASSERT_TRUE(mux.AddStream("learner-1/0", "/dev/full", &a, &ia).ok());
    ASSERT_EQ(write(a, "one\ntwo\nthree\n", 14), 14);
    close(a);
    mux.Drain(2000);
    EXPECT_EQ(mux.lost_log_lines(), 3u);
    EXPECT_EQ(mux.tail(ia).back(), "three");  // the failure summary still has the lines
  }
  close(console[1]);
  std::string out = ReadAll(console[0]);
  close(console[0]);
  EXPECT_NE(out.find("cannot write /dev/full: No space left on device"), std::string::npos) << out;
  // Once, not once per line.
  EXPECT_EQ(out.find("cannot write", out.find("cannot write") + 1), std::string::npos) << out;
}

TEST(LogMux, AConsoleThatTakesNothingDoesNotHoldUpTheLoop) {
  auto dir = std::filesystem::temp_directory_path() / ("log_mux_p." + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  int console[2];
  ASSERT_EQ(pipe(console), 0);
  // A paused pager: a pipe nobody reads, already full.
  ASSERT_EQ(fcntl(console[1], F_SETFL, O_NONBLOCK), 0);
  std::string block(4096, 'x');
  while (write(console[1], block.data(), block.size()) > 0) {
  }
  ASSERT_EQ(fcntl(console[1], F_SETFL, 0), 0);  // the caller's descriptor blocks again
  // The test's bound: were console writes blocking, Poll would never return; after two minutes
  // this watchdog unblocks it by reading the pipe (and the test fails).
  std::mutex mu;
  std::condition_variable cv;
  bool loop_done = false, watchdog_fired = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, std::chrono::minutes(2), [&] { return loop_done; })) {
      watchdog_fired = true;
      char buf[65536];
      for (bool eof = false; !eof && !loop_done;) {
        lock.unlock();
        pollfd p{console[0], POLLIN, 0};
        eof = poll(&p, 1, 100) > 0 && read(console[0], buf, sizeof(buf)) <= 0;
        lock.lock();
      }
    }
  });
  std::thread reader;
  {
    LogMux mux(LogMuxOptions{console[1], console[1], false, false, 20});
    int a = -1;
    size_t ia = 0;
    ASSERT_TRUE(mux.AddStream("learner-1/0", dir / "a.log", &a, &ia).ok());
    // Far more than the console backlog: the loop must keep reading and logging anyway.
    std::string line(1000, 'y');
    line += '\n';
    std::thread writer([a, line] {
      for (int i = 0; i < 3000; ++i) {
        if (write(a, line.data(), line.size()) != static_cast<ssize_t>(line.size())) break;
      }
      close(a);
    });
    bool extra = false;
    for (int i = 0; i < 100000 && !mux.all_closed(); ++i) mux.Poll(100, -1, &extra);
    bool closed = mux.all_closed();
    {
      std::lock_guard<std::mutex> lock(mu);
      loop_done = true;
    }
    cv.notify_all();
    watchdog.join();
    EXPECT_FALSE(watchdog_fired) << "a console that takes nothing held up the loop";
    if (!watchdog_fired) reader = std::thread([fd = console[0]] { ReadAll(fd); });
    writer.join();
    EXPECT_TRUE(closed);
    mux.Drain(2000);
    EXPECT_EQ(mux.tail(ia).size(), 20u);
  }
  close(console[1]);
  if (reader.joinable()) reader.join();
  close(console[0]);
  EXPECT_EQ(std::filesystem::file_size(dir / "a.log"), 3000u * 1001u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cadre::launch
