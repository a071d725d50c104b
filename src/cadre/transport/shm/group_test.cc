// ShmGroup with threads as ranks over an in-memory store: the CPU answer every rank must share.
#include "cadre/transport/shm/group.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <bit>
#include <cstring>
#include <thread>

#include "cadre/store/hash_store.h"

namespace cadre::transport::shm {
namespace {

int UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return CPU_COUNT(&set);
}

// Every rank gets the same answer, and it is "a CPU per rank" exactly when the ranks (threads of
// this process, so sharing its affinity) are no more than its CPUs. Rank 0 asks before the others
// have attached: the question waits for them rather than answering early.
TEST(ShmGroupTest, EveryRankAgreesWhetherRanksHaveTheirOwnCpus) {
  for (int size : {1, 2, 3, 8}) {
    store::HashStore store;
    std::vector<int> answers(size, -1);
    std::vector<std::thread> ranks;
    for (int r = 0; r < size; ++r) {
      ranks.emplace_back([&, r] {
        if (r > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20 * r));
        std::vector<std::string> names;
        for (int i = 0; i < size; ++i) names.push_back("rank " + std::to_string(i));
        std::unique_ptr<ShmGroup> g;
        Deadline deadline(std::chrono::seconds(10));
        ASSERT_TRUE(ShmGroup::Create(store, r, size, names, ShmOptions{}, deadline, &g).ok());
        bool own = false;
        ASSERT_TRUE(g->RanksHaveOwnCpus(deadline, &own).ok());
        answers[r] = own ? 1 : 0;
      });
    }
    for (auto& t : ranks) t.join();
    const int want = size <= UsableCpus() ? 1 : 0;
    for (int r = 0; r < size; ++r) EXPECT_EQ(answers[r], want) << "size " << size << " rank " << r;
  }
}

TEST(ShmGroupTest, WaitingForARankThatNeverAttachesNamesIt) {
  // Ranks 0 and 1 of 3; rank 2 never comes. Rank 1 is past Create (it only waits for the
  // segment's name) and asks: it must time out naming rank 2, not answer for two ranks.
  store::HashStore store;
  const std::vector<std::string> names = {"rank 0", "rank 1", "rank 2"};
  Status creator, asker;
  std::thread rank0([&] {
    std::unique_ptr<ShmGroup> g;
    creator = ShmGroup::Create(store, 0, 3, names, ShmOptions{}, Deadline(Duration(500)), &g);
  });
  std::thread rank1([&] {
    std::unique_ptr<ShmGroup> g;
    Deadline deadline(Duration(500));
    asker = ShmGroup::Create(store, 1, 3, names, ShmOptions{}, deadline, &g);
    if (!asker.ok()) return;
    bool own = false;
    asker = g->RanksHaveOwnCpus(deadline, &own);
  });
  rank0.join();
  rank1.join();
  EXPECT_NE(creator.message().find("rank 2 did not attach"), std::string::npos)
      << creator.message();
  EXPECT_EQ(asker.code(), Code::kTimeout) << asker.ToString();
  EXPECT_NE(asker.message().find("rank 2 did not attach"), std::string::npos) << asker.message();
}

// A waiter whose peer arrives at once, after tens of microseconds, and after milliseconds sees
// every step's data: each wait ends in whichever phase (spin, yield, futex) the delay leads to,
// and none returns before the peer arrived.
TEST(ShmGroupTest, WaitsSeeEveryStepWhateverTheirPeersDelay) {
  store::HashStore store;
  const std::vector<std::string> names = {"rank 0", "rank 1"};
  // Delays of rank 1 before each step, in microseconds: runs of long ones (the yields run out and
  // the wait sleeps) and of short ones (spinning or yielding catches the peer).
  std::vector<int> delays;
  for (int i = 0; i < 8; ++i) delays.push_back(3000);
  for (int i = 0; i < 40; ++i) delays.push_back(i % 4 == 0 ? 0 : 30);
  for (int i = 0; i < 4; ++i) delays.push_back(2000);
  for (int i = 0; i < 20; ++i) delays.push_back(i % 2 == 0 ? 0 : 100);
  std::vector<Status> status(2);
  std::vector<uint32_t> seen;
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      std::unique_ptr<ShmGroup> g;
      Deadline deadline(std::chrono::seconds(30));
      status[r] = ShmGroup::Create(store, r, 2, names, ShmOptions{}, deadline, &g);
      if (!status[r].ok()) return;
      for (int delay : delays) {
        const uint32_t step = g->NextStep();
        if (r == 1) {
          if (delay > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay));
          std::memcpy(g->slot(1, step), &step, sizeof step);
          g->Publish(ShmGroup::kArrived, step);
        } else {
          status[r] = g->WaitOne(1, ShmGroup::kArrived, step, deadline);
          if (!status[r].ok()) return;
          uint32_t v = 0;
          std::memcpy(&v, g->slot(1, step), sizeof v);
          seen.push_back(v);
        }
        // Rank 1 writes half (step & 1) again two steps later: wait for rank 0 to read it.
        if (r == 0) {
          g->Publish(ShmGroup::kReduced, step);
        } else {
          status[r] = g->WaitOne(0, ShmGroup::kReduced, step, deadline);
          if (!status[r].ok()) return;
        }
      }
    });
  }
  for (auto& t : ranks) t.join();
  ASSERT_TRUE(status[0].ok()) << status[0].ToString();
  ASSERT_TRUE(status[1].ok()) << status[1].ToString();
  ASSERT_EQ(seen.size(), delays.size());
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], i + 1) << "step " << i + 1;
}

}  // namespace
}  // namespace cadre::transport::shm
