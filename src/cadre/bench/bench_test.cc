// The pure parts of the benchmarks: size lists, the PS summary and link bound. The runs
// themselves are covered end to end (tests/test_bench_allreduce.py, python/tests/test_ps.py,
// tests/service/test_bench_server.py); no timing is asserted anywhere.
#include <gtest/gtest.h>

#include "cadre/base/status.h"
#include "cadre/bench/allreduce.h"
#include "cadre/bench/ps_table.h"
#include "cadre/bench/ps_workload.h"

namespace cadre::bench {
namespace {

template <typename F>
std::string InvalidArgumentMessage(F f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(AllreduceSizes, TheByteSizeUnitsAndMultiplesOfFour) {
  EXPECT_EQ(
      ParseAllreduceSizes("4096,16M,1K,256KiB,1G"),
      (std::vector<size_t>{4096, size_t{16} << 20, 1024, size_t{256} << 10, size_t{1} << 30}));
  std::vector<size_t> defaults = ParseAllreduceSizes("");
  EXPECT_EQ(defaults, DefaultAllreduceSizes());
  ASSERT_EQ(defaults.size(), 14u);
  EXPECT_EQ(defaults.front(), 4u);
  EXPECT_EQ(defaults.back(), size_t{256} << 20);
  for (const char* bad : {"6", "0", "4X", "4096,", "-4", "1.5", "99G", "4100M"}) {
    std::string message = InvalidArgumentMessage([&] { ParseAllreduceSizes(bad); });
    EXPECT_NE(message.find("--sizes item"), std::string::npos) << bad << ": " << message;
  }
  EXPECT_EQ(ParseAllreduceSizes("4G"), std::vector<size_t>{kMaxAllreduceBytes});
}

TEST(PsSizes, TheByteSizeUnitsFromFourBytesToOneGiB) {
  EXPECT_EQ(ParsePsSizes({"4K", "256K", "4M", "64M", "4", "1G"}),
            (std::vector<int64_t>{4096, 256 << 10, 4 << 20, 64 << 20, 4, int64_t{1} << 30}));
  for (const char* bad : {"2", "4X", "2G", ""}) {
    std::string message = InvalidArgumentMessage([&] { ParsePsSizes({bad}); });
    EXPECT_NE(message.find(std::string("--sizes '") + bad + "'"), std::string::npos) << message;
  }
}

TEST(PsWorkload, SummaryIsTheMedianOfTheSlowestWorkerPerStep) {
  PsBenchConfig config;
  config.workers = 2;
  config.iterations = 3;
  config.bytes = 1 << 20;
  PsBenchResult r;
  ASSERT_TRUE(SummarizePsBench(config, {{0.1, 0.5, 0.2}, {0.3, 0.1, 0.1}}, &r).ok());
  EXPECT_DOUBLE_EQ(r.step_seconds, 0.3);  // steps' maxima 0.3, 0.5, 0.2
  EXPECT_DOUBLE_EQ(r.aggregate_gbps, 2.0 * (1 << 20) * 8 / 0.3 / 1e9);
  EXPECT_EQ(SummarizePsBench(config, {{0.1, 0.5, 0.2}}, &r).code(), Code::kInvalidArgument);
  EXPECT_EQ(SummarizePsBench(config, {{0.1, 0.5}, {0.3, 0.1, 0.1}}, &r).code(),
            Code::kInvalidArgument);
}

TEST(PsWorkload, LinkBoundIsTheBusiestLink) {
  PsBenchConfig config;
  config.servers = 1;
  config.workers = 1;
  config.bytes = int64_t{64} << 20;
  EXPECT_DOUBLE_EQ(PsBenchLinkBoundSeconds(config, 1e9), double(int64_t{64} << 23) / 1e9);
  // Two servers hold 1 MiB partitions of 4 MiB, 2 MiB each; two workers put 4 MiB on each
  // server's link, as much as each worker's own link carries.
  config.servers = 2;
  config.workers = 2;
  config.bytes = int64_t{4} << 20;
  EXPECT_DOUBLE_EQ(PsBenchLinkBoundSeconds(config, 1e9), double(int64_t{4} << 23) / 1e9);
  config.workers = 4;  // now the servers' links decide: 4 x 2 MiB
  EXPECT_DOUBLE_EQ(PsBenchLinkBoundSeconds(config, 1e9), double(int64_t{8} << 23) / 1e9);
}

}  // namespace
}  // namespace cadre::bench
