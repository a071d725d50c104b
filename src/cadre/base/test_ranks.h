// Threads as ranks: the one harness behind every test that runs a group of ranks in one process
// (Gloo's base_test idea). Each layer's tests build their own group members on top of it
// (comm/comm_test_util.h: a Communicator per thread; transport's device tests: a TcpDevice).
// Included by tests only: it needs GoogleTest.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cadre::testing {

// Runs body(rank) for rank 0..size-1, each on its own thread, and joins them all. An exception
// escaping body is reported as a test failure naming its rank (the other ranks carry on, so a
// body must bound its own waits: every collective in cadre has a timeout).
inline void RunThreadsAsRanks(int size, const std::function<void(int rank)>& body) {
  std::vector<std::thread> threads;
  std::mutex mu;
  std::vector<std::string> failures;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        failures.push_back("rank " + std::to_string(r) + ": " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& f : failures) ADD_FAILURE() << f;
}

}  // namespace cadre::testing
