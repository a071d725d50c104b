#include "cadre/serving/batcher.h"

#include <gtest/gtest.h>

#include <thread>

#include "cadre/serving/fake_model.h"

namespace cadre::serving {
namespace {

using testing::FakeModel;
using testing::Rows;

// Waits (bounded) until `batcher` holds `rows` queued rows.
bool WaitQueued(const Batcher& batcher, int64_t rows) {
  for (int i = 0; i < 30000 && batcher.queued_rows() != rows; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return batcher.queued_rows() == rows;
}

TEST(BatcherTest, ConcurrentCallersGetTheirOwnRowsInOneBatch) {
  FakeModel model;
  Batcher batcher(model, {.max_batch_size = 64}, nullptr);
  model.Close();
  // The first request occupies the only inference thread; the next 8 queue up behind it.
  std::vector<Status> status(9);
  std::vector<std::vector<HostTensor>> out(9);
  std::vector<std::thread> callers;
  callers.emplace_back([&] { status[0] = batcher.Infer({Rows({{0, 0}})}, &out[0]); });
  ASSERT_TRUE(model.WaitEntered(1));
  for (int c = 1; c < 9; ++c) {
    callers.emplace_back([&, c] {
      // Caller c sends c rows holding c*100 + row.
      std::vector<std::vector<float>> rows;
      for (int r = 0; r < c; ++r) rows.push_back({float(c * 100 + r), float(-c)});
      status[c] = batcher.Infer({Rows(rows)}, &out[c]);
    });
  }
  ASSERT_TRUE(WaitQueued(batcher, 36));  // 1 + 2 + ... + 8 rows
  model.Open();
  for (auto& t : callers) t.join();
  EXPECT_EQ(model.batches(), (std::vector<int64_t>{1, 36}));
  for (int c = 1; c < 9; ++c) {
    ASSERT_TRUE(status[c].ok()) << status[c].ToString();
    ASSERT_EQ(out[c][0].shape, (std::vector<int64_t>{c, 2}));
    for (int r = 0; r < c; ++r) {
      EXPECT_EQ(ElementAsDouble(out[c][0], 2 * r), 2.0 * (c * 100 + r) + 1);
      EXPECT_EQ(ElementAsDouble(out[c][0], 2 * r + 1), -2.0 * c + 1);
    }
  }
}

TEST(BatcherTest, BatchesStopAtTheMaximumAndALargeRequestRunsAlone) {
  FakeModel model;
  Batcher batcher(model, {.max_batch_size = 4}, nullptr);
  model.Close();
  std::vector<std::thread> callers;
  Status first;
  std::vector<HostTensor> ignored;
  callers.emplace_back([&] { first = batcher.Infer({Rows({{0}})}, &ignored); });
  ASSERT_TRUE(model.WaitEntered(1));
  // Queued in this order: 3 rows, 2 rows, 6 rows, 1 row -> batches [3], [2], [6], [1].
  for (int rows : {3, 2, 6, 1}) {
    int64_t before = batcher.queued_rows();
    callers.emplace_back([&, rows] {
      std::vector<HostTensor> o;
      EXPECT_TRUE(batcher.Infer({Rows(std::vector<std::vector<float>>(rows, {1.0f}))}, &o).ok());
      EXPECT_EQ(o[0].rows(), rows);
    });
    ASSERT_TRUE(WaitQueued(batcher, before + rows));
  }
  model.Open();
  for (auto& t : callers) t.join();
  EXPECT_EQ(model.batches(), (std::vector<int64_t>{1, 3, 2, 6, 1}));
}

TEST(BatcherTest, TheRequestTheModelFailsOnGetsTheErrorAndTheOthersTheirAnswers) {
  FakeModel model;
  Batcher batcher(model, {.max_batch_size = 16}, nullptr);
  model.Close();
  std::vector<HostTensor> o0, o1, o2, o3;
  Status s0, s1, s2;
  std::thread t0([&] { s0 = batcher.Infer({Rows({{1}})}, &o0); });
  ASSERT_TRUE(model.WaitEntered(1));
  std::thread t1([&] { s1 = batcher.Infer({Rows({{2}})}, &o1); });
  ASSERT_TRUE(WaitQueued(batcher, 1));
  std::thread t2([&] { s2 = batcher.Infer({Rows({{-999}})}, &o2); });
  ASSERT_TRUE(WaitQueued(batcher, 2));
  model.Open();
  t0.join();
  t1.join();
  t2.join();
  EXPECT_TRUE(s0.ok());
  ASSERT_TRUE(s1.ok()) << s1.ToString();
  EXPECT_EQ(ElementAsDouble(o1[0], 0), 5);
  EXPECT_EQ(s2.code(), Code::kInternal);
  EXPECT_NE(s2.message().find("the fake model refuses -999"), std::string::npos);
  // The next request is served.
  ASSERT_TRUE(batcher.Infer({Rows({{3}})}, &o3).ok());
  EXPECT_EQ(ElementAsDouble(o3[0], 0), 7);
}

TEST(BatcherTest, StopAnswersWhatIsQueuedAndRefusesNewRequests) {
  FakeModel model;
  Batcher batcher(model, {.max_batch_size = 1}, nullptr);
  model.Close();
  Status s0, s1;
  std::vector<HostTensor> o0, o1, o2;
  std::thread t0([&] { s0 = batcher.Infer({Rows({{1}})}, &o0); });
  ASSERT_TRUE(model.WaitEntered(1));
  std::thread t1([&] { s1 = batcher.Infer({Rows({{2}})}, &o1); });
  ASSERT_TRUE(WaitQueued(batcher, 1));
  std::thread stopper([&] { batcher.Stop(); });
  model.Open();
  stopper.join();
  t0.join();
  t1.join();
  EXPECT_TRUE(s0.ok());
  EXPECT_TRUE(s1.ok());
  EXPECT_EQ(batcher.Infer({Rows({{3}})}, &o2).code(), Code::kUnavailable);
}

TEST(BatcherTest, ADelayWaitsForMoreRowsUpToTheMaximum) {
  FakeModel model;
  // A long delay: the batch must leave as soon as it is full, not when the delay ends.
  Batcher batcher(model, {.max_batch_size = 3, .max_batch_delay = std::chrono::minutes(5)},
                  nullptr);
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c) {
    callers.emplace_back([&] {
      std::vector<HostTensor> o;
      EXPECT_TRUE(batcher.Infer({Rows({{1}})}, &o).ok());
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(model.batches(), (std::vector<int64_t>{3}));
}

TEST(BatcherTest, EmptyRequestsAreRefused) {
  FakeModel model;
  Batcher batcher(model, {}, nullptr);
  std::vector<HostTensor> o;
  EXPECT_EQ(batcher.Infer({}, &o).code(), Code::kInvalidArgument);
  HostTensor none = Rows({});
  EXPECT_EQ(batcher.Infer({none}, &o).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace cadre::serving
