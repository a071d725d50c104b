// Heartbeats between cadre run and its tasks: the runner's judgement on its own clock, and a
// task's beats through a real store (a thread as the task, loopback TCP).
#include "cadre/backends/heartbeat.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "cadre/store/tcp_store.h"

namespace cadre::backends {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(HeartbeatWatch, OnlyASlotThatStoppedBeatingIsSilent) {
  HeartbeatWatch watch(seconds(10));
  const auto t0 = HeartbeatWatch::Clock::time_point{} + seconds(1000);
  // Slot 0 beats on; slot 1 beat once and stopped; slot 2 never started (count 0).
  for (int s = 0; s <= 30; ++s) {
    const auto now = t0 + seconds(s);
    watch.Observe(0, s + 1, now);
    watch.Observe(1, 1, now);
    watch.Observe(2, 0, now);
    EXPECT_EQ(watch.Silent(now), s > 10 ? std::vector<int>{1} : std::vector<int>{}) << s;
  }
}

TEST(HeartbeatWatch, ARunnerThatPausedJudgesByTheCountsNotTheGap) {
  // The runner itself did not look for a minute (busy, stopped): counts that moved meanwhile are
  // alive; only one that did not move is silent.
  HeartbeatWatch watch(seconds(10));
  const auto t0 = HeartbeatWatch::Clock::time_point{} + seconds(1000);
  watch.Observe(0, 5, t0);
  watch.Observe(1, 5, t0);
  watch.Observe(0, 11, t0 + seconds(60));
  watch.Observe(1, 5, t0 + seconds(60));
  EXPECT_EQ(watch.Silent(t0 + seconds(60)), std::vector<int>{1});
}

TEST(HeartbeatWatch, TheSlotsOfALostNodeAreNamedTogether) {
  // Slots 2 and 3 (one node) stop at one moment, but slot 3's last beat came after the read at
  // t0 + 1 s and slot 2's before it: slot 2 is silent a read before slot 3. The verdict waits
  // until no slot joins, and names both; slots 0 and 1 beat on throughout.
  HeartbeatWatch watch(seconds(3));
  const auto t0 = HeartbeatWatch::Clock::time_point{} + seconds(1000);
  std::vector<std::vector<int>> verdicts;
  for (int s = 0; s <= 7; ++s) {
    const auto now = t0 + seconds(s);
    watch.Observe(0, s + 1, now);
    watch.Observe(1, s + 1, now);
    watch.Observe(2, 1, now);
    watch.Observe(3, s == 0 ? 1 : 2, now);
    verdicts.push_back(watch.Settled(watch.Silent(now)));
  }
  // Silent: slot 2 from t0 + 4 s, slot 3 from t0 + 5 s; settled a read later.
  const std::vector<std::vector<int>> expected = {{}, {}, {}, {}, {}, {}, {2, 3}, {2, 3}};
  EXPECT_EQ(verdicts, expected);
}

TEST(HeartbeatWatch, ASlotThatBeatsAgainLeavesTheVerdict) {
  HeartbeatWatch watch(seconds(3));
  EXPECT_EQ(watch.Settled({1, 2}), std::vector<int>{});  // new: wait a read
  EXPECT_EQ(watch.Settled({1}), std::vector<int>{1});    // 2 beat again; none joined
  EXPECT_EQ(watch.Settled({}), std::vector<int>{});      // nothing silent
  EXPECT_EQ(watch.Settled({0, 1}), std::vector<int>{});  // both new since the last read
  EXPECT_EQ(watch.Settled({0, 1}), (std::vector<int>{0, 1}));
}

TEST(HeartbeatPeriod, ASixthOfTheTimeoutWithinBounds) {
  EXPECT_EQ(HeartbeatPeriod(seconds(60)), seconds(10));
  EXPECT_EQ(HeartbeatPeriod(seconds(3)), milliseconds(500));
  EXPECT_EQ(HeartbeatPeriod(seconds(1)), milliseconds(200));
  EXPECT_EQ(HeartbeatPeriod(seconds(3600)), seconds(10));
}

TEST(TaskHeartbeat, BeatsAndNamesItsNodeThenSaysTheRunnerIsGone) {
  store::TcpStoreServerOptions so;
  so.token = "job-token";
  auto server = std::make_unique<store::TcpStoreServer>(so);
  const std::string address = server->address();
  store::TcpStoreOptions co;
  co.port = server->port();
  co.token = so.token;
  store::TcpStore reader(co);

  TaskHeartbeat::Options o;
  o.store_address = address;
  o.token = so.token;
  o.rank = 3;
  o.identity = "test task";
  o.node = "node7";
  o.timeout = seconds(1);
  TaskHeartbeat beat(o);
  // Two beats counted (each waits on the last: no timing assumed).
  reader.wait({HeartbeatNodeKey(3)}, seconds(30));
  const auto node = reader.get(HeartbeatNodeKey(3));
  EXPECT_EQ(std::string(node.begin(), node.end()), "node7");
  while (reader.add(HeartbeatKey(3), 0) < 2) std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(beat.runner_lost().has_value());

  server.reset();  // cadre run is gone
  std::optional<std::string> lost;
  while (!(lost = beat.runner_lost())) std::this_thread::sleep_for(milliseconds(20));
  EXPECT_NE(lost->find("cadre run's rendezvous store at " + address), std::string::npos) << *lost;
  EXPECT_NE(lost->find("--heartbeat-timeout"), std::string::npos) << *lost;
}

}  // namespace
}  // namespace cadre::backends
