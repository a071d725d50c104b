// The edge's readers: each variable lands in its field, bad values are refused naming the
// variable, and what the runner's contract leaves unset keeps the options' defaults.
#include "cadre/config/from_env.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cadre/store/tcp_store.h"

namespace cadre::config {
namespace {

using namespace std::chrono_literals;
using engine::EngineOptions;

constexpr char kToken[] = "job-token-123";

// Sets an environment variable for the life of the object.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

std::string WhatOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Moved from engine_test.cc (EngineOptionsTest) when the reader left engine/.
TEST(EngineOptionsFromEnvTest, ReadsCadreOnlyVariablesAndRefusesBadValues) {
  {
    ScopedEnv wait("CADRE_BATCH_WAIT_MS", "0");
    ScopedEnv spin("CADRE_SPIN_US", "7");
    const EngineOptions o = EngineOptionsFromEnv();
    EXPECT_EQ(o.batch_wait, std::chrono::microseconds::zero());
    EXPECT_EQ(o.spin, std::chrono::microseconds(7));
  }
  {
    // Horovod's HOROVOD_CYCLE_TIME is in milliseconds and may be fractional.
    ScopedEnv cycle("HOROVOD_CYCLE_TIME", "0.5");
    EXPECT_EQ(EngineOptionsFromEnv().cycle_time, std::chrono::microseconds(500));
  }
  for (const char* name :
       {"CADRE_BATCH_WAIT_MS", "CADRE_SPIN_US", "CADRE_INLINE_BYTES", "HOROVOD_CYCLE_TIME"}) {
    ScopedEnv bad(name, "-1");
    try {
      EngineOptionsFromEnv();
      ADD_FAILURE() << name << "=-1 accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

TEST(EngineOptionsFromEnvTest, BatchWaitIsMeasuredUnlessANumberFixesIt) {
  EXPECT_FALSE(EngineOptionsFromEnv().batch_wait.has_value()) << "unset must mean measured";
  EXPECT_TRUE(EngineOptionsFromEnv().batch_window_log.empty());
  for (const char* automatic : {"auto", ""}) {
    ScopedEnv wait("CADRE_BATCH_WAIT_MS", automatic);
    EXPECT_FALSE(EngineOptionsFromEnv().batch_wait.has_value()) << "'" << automatic << "'";
  }
  for (const auto& [text, us] : std::vector<std::pair<const char*, int64_t>>{
           {"1", 1000}, {"0.125", 125}, {"0", 0}, {"1000", 1'000'000}, {"2.5", 2500}}) {
    ScopedEnv wait("CADRE_BATCH_WAIT_MS", text);
    EXPECT_EQ(EngineOptionsFromEnv().batch_wait, std::chrono::microseconds(us)) << text;
  }
  for (const char* bad : {"-1", "1001", "1ms", "Auto", "nan", "inf"}) {
    ScopedEnv wait("CADRE_BATCH_WAIT_MS", bad);
    const std::string what = WhatOf([] { EngineOptionsFromEnv(); });
    EXPECT_NE(what.find(std::string("CADRE_BATCH_WAIT_MS=") + bad), std::string::npos)
        << bad << " gave: " << what;
    EXPECT_NE(what.find("auto"), std::string::npos) << what;
  }
  {
    ScopedEnv horovod("HOROVOD_AUTOTUNE_LOG", "/tmp/h.csv");
    EXPECT_EQ(EngineOptionsFromEnv().batch_window_log, "/tmp/h.csv");
    ScopedEnv cadre("CADRE_AUTOTUNE_LOG", "/tmp/c.csv");
    EXPECT_EQ(EngineOptionsFromEnv().batch_window_log, "/tmp/c.csv");
  }
}

// Moved from engine_test.cc (EngineTest.AStallFailsEveryRankByDefault, its environment half).
TEST(EngineOptionsFromEnvTest, StallShutdownHasAFiniteDefaultAndHorovodsZeroMeansNever) {
  EXPECT_EQ(EngineOptionsFromEnv().stall_shutdown, engine::kDefaultStallShutdown);
  {
    ScopedEnv env("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "90");
    EXPECT_EQ(EngineOptionsFromEnv().stall_shutdown, std::chrono::seconds(90));
  }
  ScopedEnv off("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0");  // Horovod's "never", explicitly
  EXPECT_EQ(EngineOptionsFromEnv().stall_shutdown, Duration::zero());
}

TEST(EngineOptionsFromEnvTest, TheDeadlockTimeIsFiveMinutesUnlessSet) {
  EXPECT_EQ(EngineOptionsFromEnv().stall_deadlock, engine::kDefaultStallDeadlock);
  {
    ScopedEnv env("CADRE_STALL_DEADLOCK_TIME_SECONDS", "45");
    EXPECT_EQ(EngineOptionsFromEnv().stall_deadlock, std::chrono::seconds(45));
  }
  ScopedEnv off("CADRE_STALL_DEADLOCK_TIME_SECONDS", "0");
  EXPECT_EQ(EngineOptionsFromEnv().stall_deadlock, Duration::zero());
  ScopedEnv bad("CADRE_STALL_DEADLOCK_TIME_SECONDS", "-1");
  try {
    EngineOptionsFromEnv();
    ADD_FAILURE() << "a negative deadlock time was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CADRE_STALL_DEADLOCK_TIME_SECONDS"), std::string::npos)
        << e.what();
  }
}

TEST(EngineOptionsFromEnvTest, CadreWinsAndTheAlgorithmHasTwoNames) {
  EXPECT_EQ(EngineOptionsFromEnv().allreduce_algorithm, comm::AllreduceAlgorithm::kAuto);
  {
    ScopedEnv cadre("CADRE_FUSION_THRESHOLD", "1000");
    ScopedEnv horovod("HOROVOD_FUSION_THRESHOLD", "2000");
    EXPECT_EQ(EngineOptionsFromEnv().fusion_threshold_bytes, 1000u);
  }
  {
    ScopedEnv horovod("HOROVOD_HIERARCHICAL_ALLREDUCE", "1");
    EXPECT_EQ(EngineOptionsFromEnv().allreduce_algorithm, comm::AllreduceAlgorithm::kHierarchical);
    ScopedEnv cadre("CADRE_ALLREDUCE_ALGORITHM", "ring");
    EXPECT_EQ(EngineOptionsFromEnv().allreduce_algorithm, comm::AllreduceAlgorithm::kRing);
  }
  ScopedEnv bad("CADRE_ALLREDUCE_ALGORITHM", "fastest");
  EXPECT_NE(WhatOf([] { EngineOptionsFromEnv(); }).find("CADRE_ALLREDUCE_ALGORITHM"),
            std::string::npos);
}

// Every refusal names the variable that was read (the Horovod one when only it is set) and what
// it accepts; a Horovod name is not even read when the cadre one is set.
TEST(EngineOptionsFromEnvTest, EveryRefusalNamesTheVariableAndWhatItTakes) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"CADRE_FUSION_THRESHOLD", "-1"},
      {"HOROVOD_FUSION_THRESHOLD", "-5"},
      {"CADRE_FUSION_TENSOR_LIMIT", "-1"},
      {"CADRE_CACHE_CAPACITY", "-1"},
      {"HOROVOD_CACHE_CAPACITY", "many"},
      {"CADRE_INLINE_BYTES", "4097"},
      {"CADRE_SPIN_US", "1000001"},
      {"CADRE_STALL_CHECK_TIME_SECONDS", "inf"},
      {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "1e300"},
      {"CADRE_STALL_SHUTDOWN_TIME_SECONDS", "-3"},
      {"CADRE_TIMELINE_MARK_CYCLES", "2"},
      {"HOROVOD_TIMELINE_MARK_CYCLES", "maybe"},
      {"HOROVOD_HIERARCHICAL_ALLREDUCE", "sometimes"},
  };
  for (const auto& [name, value] : cases) {
    ScopedEnv bad(name, value);
    const std::string what = WhatOf([] { EngineOptionsFromEnv(); });
    EXPECT_NE(what.find(std::string(name) + "=" + value), std::string::npos)
        << name << "=" << value << " gave: '" << what << "'";
    const bool says_what_it_takes =
        what.find(" to ") != std::string::npos || what.find("(1, true") != std::string::npos;
    EXPECT_TRUE(says_what_it_takes) << what;
  }
  {
    ScopedEnv horovod("HOROVOD_CACHE_CAPACITY", "garbage");
    ScopedEnv cadre("CADRE_CACHE_CAPACITY", "16");
    ScopedEnv h_stall("HOROVOD_STALL_CHECK_TIME_SECONDS", "garbage");
    ScopedEnv c_stall("CADRE_STALL_CHECK_TIME_SECONDS", "2.5");
    const EngineOptions o = EngineOptionsFromEnv();
    EXPECT_EQ(o.cache_capacity, 16u);
    EXPECT_EQ(o.stall_warning, 2500ms);
  }
  {
    ScopedEnv marks("HOROVOD_TIMELINE_MARK_CYCLES", "1");
    EXPECT_TRUE(EngineOptionsFromEnv().timeline_mark_cycles);
    ScopedEnv off("CADRE_TIMELINE_MARK_CYCLES", "0");
    EXPECT_FALSE(EngineOptionsFromEnv().timeline_mark_cycles);
  }
}

TEST(CommunicatorTunablesTest, ReadsTheSharedMemoryAndHostsVariables) {
  comm::CommunicatorOptions defaults;
  comm::CommunicatorOptions o;
  ReadCommunicatorTunables(&o);
  EXPECT_EQ(o.shm_slot_bytes, comm::kDefaultShmSlotBytes);
  EXPECT_EQ(o.shm_spin_max, defaults.shm_spin_max);
  EXPECT_EQ(o.hosts_file, "");
  {
    ScopedEnv slot("CADRE_SHM_SLOT_BYTES", "65536");
    ScopedEnv spin("CADRE_SHM_SPIN_US", "0");
    ScopedEnv hosts("CADRE_HOSTS", "/job/hosts");
    ReadCommunicatorTunables(&o);
    EXPECT_EQ(o.shm_slot_bytes, 65536u);
    EXPECT_EQ(o.shm_spin_max, std::chrono::microseconds(0));
    EXPECT_EQ(o.hosts_file, "/job/hosts");
  }
  for (const char* name : {"CADRE_SHM_SLOT_BYTES", "CADRE_SHM_SPIN_US"}) {
    ScopedEnv bad(name, "lots");
    EXPECT_NE(WhatOf([&] { ReadCommunicatorTunables(&o); }).find(name), std::string::npos);
  }
  // A slot so large that the segment's size would overflow is refused, not mapped.
  for (const char* huge : {"1099511627776", "9223372036854775807"}) {
    ScopedEnv bad("CADRE_SHM_SLOT_BYTES", huge);
    const std::string what = WhatOf([&] { ReadCommunicatorTunables(&o); });
    EXPECT_NE(what.find(std::string("CADRE_SHM_SLOT_BYTES=") + huge), std::string::npos) << what;
    EXPECT_NE(what.find("0 to 1073741824"), std::string::npos) << what;
  }
}

TEST(EngineGroupOptionsFromEnvTest, LocalNeedsNoStoreAndBadValuesAreNamed) {
  unsetenv("CADRE_STORE");
  engine::EngineGroupOptions g = EngineGroupOptionsFromEnv("local", 0, 1, 5s, "p/");
  EXPECT_EQ(g.backend, engine::EngineBackend::kLocal);
  EXPECT_EQ(g.comm.size, 1);
  EXPECT_EQ(g.comm.timeout, Duration(5s));
  EXPECT_EQ(g.comm.store, nullptr);
  const std::string backend = WhatOf([] { EngineGroupOptionsFromEnv("fastest", 0, 1, 5s, "p/"); });
  EXPECT_NE(backend.find("CADRE_ENGINE_BACKEND"), std::string::npos) << backend;
  EXPECT_NE(backend.find("fastest"), std::string::npos) << backend;
  EXPECT_NE(backend.find("auto, comm, store, local"), std::string::npos) << backend;
  // Without a launcher's store the other backends say which variable is missing.
  EXPECT_NE(WhatOf([] { EngineGroupOptionsFromEnv("auto", 0, 2, 5s, "p/"); }).find("CADRE_STORE"),
            std::string::npos);
}

TEST(EngineGroupOptionsFromEnvTest, FillsTheCommunicatorFromTheLearnerContract) {
  store::TcpStoreServerOptions so;
  so.token = kToken;
  store::TcpStoreServer server(so);
  ScopedEnv address("CADRE_STORE", server.address().c_str());
  ScopedEnv token("CADRE_JOB_TOKEN", kToken);
  ScopedEnv host("CADRE_HOST", "learner-2");
  ScopedEnv learner("CADRE_LEARNER_ADDRESS", "127.0.1.2");
  ScopedEnv grid("CADRE_HOST_GRID", "2x2");
  engine::EngineGroupOptions g = EngineGroupOptionsFromEnv("comm", 1, 8, 10s, "engine/0/");
  EXPECT_EQ(g.backend, engine::EngineBackend::kComm);
  EXPECT_EQ(g.comm.rank, 1);
  EXPECT_EQ(g.comm.size, 8);
  EXPECT_EQ(g.comm.token, kToken);
  EXPECT_EQ(g.comm.host, "learner-2");
  EXPECT_EQ(g.comm.bind_address, "127.0.1.2");  // the learner's own address
  EXPECT_EQ(g.comm.hierarchy.host_grid, (std::vector<int>{2, 2}));
  ASSERT_NE(g.comm.store, nullptr);
  g.comm.store->set_string("k", "v");  // under the prefix, on the job's store
  {
    ScopedEnv bind("CADRE_BIND_ADDRESS", "0.0.0.0");
    EXPECT_EQ(EngineGroupOptionsFromEnv("comm", 1, 8, 10s, "engine/0/").comm.bind_address,
              "0.0.0.0");
  }
  ScopedEnv bad("CADRE_HOST_GRID", "2xz");
  EXPECT_NE(WhatOf([] {
              EngineGroupOptionsFromEnv("comm", 1, 8, 10s, "engine/0/");
            }).find("CADRE_HOST_GRID"),
            std::string::npos);
}

// Moved from store/tcp_store_test.cc when the reader left store/.
TEST(ConnectStoreFromEnvTest, NamesMissingOrMalformedVariables) {
  unsetenv("CADRE_STORE");
  unsetenv("CADRE_JOB_TOKEN");
  EXPECT_NE(WhatOf([] { ConnectStoreFromEnv(); }).find("CADRE_STORE"), std::string::npos);
  setenv("CADRE_STORE", "127.0.0.1:notaport", 1);
  setenv("CADRE_JOB_TOKEN", kToken, 1);
  EXPECT_NE(WhatOf([] { ConnectStoreFromEnv(); }).find("CADRE_STORE='127.0.0.1:notaport'"),
            std::string::npos);
  setenv("CADRE_STORE", "127.0.0.1:1", 1);
  unsetenv("CADRE_JOB_TOKEN");
  EXPECT_NE(WhatOf([] { ConnectStoreFromEnv(); }).find("CADRE_JOB_TOKEN"), std::string::npos);
  unsetenv("CADRE_STORE");
}

TEST(ConnectStoreFromEnvTest, ConnectsWithTheJobsVariables) {
  store::TcpStoreServerOptions so;
  so.token = kToken;
  store::TcpStoreServer server(so);
  setenv("CADRE_STORE", server.address().c_str(), 1);
  setenv("CADRE_JOB_TOKEN", kToken, 1);
  auto store = ConnectStoreFromEnv("rank 0", 10s);
  store->set_string("k", "v");
  EXPECT_EQ(store->get_string("k"), "v");
  unsetenv("CADRE_STORE");
  unsetenv("CADRE_JOB_TOKEN");
}

}  // namespace
}  // namespace cadre::config
