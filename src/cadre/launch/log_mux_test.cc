// The log multiplexer: whole, prefixed lines on the console, raw lines in the log files.
#include "cadre/launch/log_mux.h"

#include <gtest/gtest.h>
#include <unistd.h>

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

}  // namespace
}  // namespace cadre::launch
