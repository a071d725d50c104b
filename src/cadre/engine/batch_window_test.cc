// BatchWindowTuner with synthetic step times: warm-up, the probe schedule, the choice (medians,
// ties to the shorter window), holding, and its option checks. No clock: every time is made up.
#include "cadre/engine/batch_window.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>

#include "cadre/base/status.h"

namespace cadre::engine {
namespace {

using namespace std::chrono_literals;
using Window = BatchWindowTuner::Window;

// Runs `steps` steps: each lasts step_time(window in use during it, index of the step since the
// window last changed), and the tuner hears of its end.
struct FakeTraining {
  explicit FakeTraining(BatchWindowTuner& tuner) : t(tuner) {
    t.StepEnded(now);
  }  // starts the clock

  void Steps(int steps, const std::function<Duration(Window, int)>& step_time) {
    for (int i = 0; i < steps; ++i) {
      now += step_time(t.window(), since_change);
      if (t.StepEnded(now)) {
        changes.push_back(t.window());
        since_change = 0;
      } else {
        ++since_change;
      }
    }
  }

  BatchWindowTuner& t;
  Clock::time_point now{};
  int since_change = 0;
  std::vector<Window> changes;
};

BatchWindowTuner::Options SmallOptions() {
  BatchWindowTuner::Options o;
  o.candidates = {0us, 250us, 1000us};
  o.initial = 2000us;
  o.warmup_steps = 2;
  o.settle_steps = 1;
  o.steps_per_candidate = 3;
  o.tie_margin = 0.03;
  return o;
}

// Steps take `by_window` for each window; the settle step after each change is very slow, so
// scoring it would change the choice.
std::function<Duration(Window, int)> Model(std::map<int64_t, Duration> by_window) {
  return [by_window](Window w, int since_change) {
    return since_change == 0 ? Duration(5000) : by_window.at(w.count());
  };
}

TEST(BatchWindowTunerTest, WarmsUpAtTheInitialWindowThenProbesEachCandidateInOrder) {
  BatchWindowTuner t(SmallOptions());
  EXPECT_EQ(t.window(), 2000us);
  FakeTraining run(t);
  auto model = Model({{0, 100ms}, {250, 90ms}, {1000, 95ms}, {2000, 500ms}});
  run.Steps(1, model);
  EXPECT_EQ(t.window(), 2000us) << "still warming up after one step";
  EXPECT_TRUE(t.samples().empty());
  run.Steps(1, model);
  EXPECT_EQ(t.window(), 0us) << "the probe starts after warmup_steps";
  // Each candidate: 1 settle step + 3 scored steps.
  run.Steps(4, model);
  EXPECT_EQ(t.window(), 250us);
  EXPECT_EQ(t.samples().size(), 3u);
  run.Steps(4, model);
  EXPECT_EQ(t.window(), 1000us);
  EXPECT_FALSE(t.decided());
  run.Steps(4, model);
  EXPECT_TRUE(t.decided());
  EXPECT_EQ(t.window(), 250us);
  EXPECT_EQ(run.changes, (std::vector<Window>{0us, 250us, 1000us, 250us}));
  ASSERT_EQ(t.samples().size(), 9u);
  for (const auto& s : t.samples()) EXPECT_LT(s.step, 200ms) << "a settle step was scored";
  EXPECT_EQ(t.medians(), (std::vector<std::chrono::nanoseconds>{100ms, 90ms, 95ms}));
}

TEST(BatchWindowTunerTest, ScoresTheMedianSoOneSlowStepDoesNotDecide) {
  BatchWindowTuner t(SmallOptions());
  FakeTraining run(t);
  run.Steps(2, Model({{2000, 100ms}}));
  // 0 us is the fastest on two of its three steps; one step of it is hit by a burst of load.
  run.Steps(4, [](Window, int i) { return i == 0 ? 100ms : i == 2 ? Duration(900) : 80ms; });
  run.Steps(8, Model({{250, 90ms}, {1000, 95ms}}));
  ASSERT_TRUE(t.decided());
  EXPECT_EQ(t.window(), 0us);
  EXPECT_EQ(t.medians()[0], 80ms);
}

TEST(BatchWindowTunerTest, TiesWithinTheMarginGoToTheShorterWindow) {
  // 0 us is 2% slower than the best (1000 us), within the 3% margin: the shorter window wins.
  {
    BatchWindowTuner t(SmallOptions());
    FakeTraining run(t);
    run.Steps(2 + 12, Model({{2000, 1s}, {0, 102ms}, {250, 101ms}, {1000, 100ms}}));
    ASSERT_TRUE(t.decided());
    EXPECT_EQ(t.window(), 0us);
  }
  // 4% slower is outside it: 250 us (1% slower) is the shortest within the margin.
  {
    BatchWindowTuner t(SmallOptions());
    FakeTraining run(t);
    run.Steps(2 + 12, Model({{2000, 1s}, {0, 104ms}, {250, 101ms}, {1000, 100ms}}));
    ASSERT_TRUE(t.decided());
    EXPECT_EQ(t.window(), 250us);
  }
  // With no margin, only the fastest; with exactly equal medians, still the shorter.
  {
    auto o = SmallOptions();
    o.tie_margin = 0;
    BatchWindowTuner t(o);
    FakeTraining run(t);
    run.Steps(2 + 12, Model({{2000, 1s}, {0, 101ms}, {250, 100ms}, {1000, 100ms}}));
    ASSERT_TRUE(t.decided());
    EXPECT_EQ(t.window(), 250us);
  }
}

TEST(BatchWindowTunerTest, HoldsTheChoiceAndStopsMeasuring) {
  BatchWindowTuner t(SmallOptions());
  FakeTraining run(t);
  run.Steps(2 + 12, Model({{2000, 1s}, {0, 100ms}, {250, 90ms}, {1000, 80ms}}));
  ASSERT_TRUE(t.decided());
  EXPECT_EQ(t.window(), 1000us);
  // Whatever happens afterwards (here every window is suddenly slow), the choice is held.
  run.Steps(50, [](Window, int) { return Duration(400); });
  EXPECT_EQ(t.window(), 1000us);
  EXPECT_EQ(t.samples().size(), 9u);
  // 0, 250 and 1000 us while probing; choosing the last one probed is no change.
  EXPECT_EQ(run.changes, (std::vector<Window>{0us, 250us, 1000us}));
}

TEST(BatchWindowTunerTest, NoWarmupOrSettleStepsAndUnsortedCandidates) {
  auto o = SmallOptions();
  o.candidates = {1000us, 0us, 1000us};  // sorted and deduplicated: 0, 1000
  o.warmup_steps = 0;
  o.settle_steps = 0;
  o.steps_per_candidate = 1;
  BatchWindowTuner t(o);
  EXPECT_EQ(t.candidates(), (std::vector<Window>{0us, 1000us}));
  EXPECT_EQ(t.window(), 2000us);
  FakeTraining run(t);  // the first end of a step starts the probe at once
  EXPECT_EQ(t.window(), 0us);
  run.Steps(2, [](Window w, int) { return w == 0us ? 50ms : 40ms; });
  ASSERT_TRUE(t.decided());
  EXPECT_EQ(t.window(), 1000us);
}

TEST(BatchWindowTunerTest, TimeGoingBackwardsCountsAsAZeroStep) {
  auto o = SmallOptions();
  o.warmup_steps = 0;
  o.settle_steps = 0;
  o.steps_per_candidate = 1;
  BatchWindowTuner t(o);
  const Clock::time_point start{std::chrono::seconds(10)};
  t.StepEnded(start);
  t.StepEnded(start - 1ms);
  ASSERT_EQ(t.samples().size(), 1u);
  EXPECT_EQ(t.samples()[0].step, std::chrono::nanoseconds::zero());
  t.StepEnded(start + 5ms);  // measured from the latest time seen, not the earlier one
  EXPECT_EQ(t.samples()[1].step, 5ms);
}

TEST(BatchWindowTunerTest, ReportNamesTheChoiceAndEveryMedian) {
  BatchWindowTuner t(SmallOptions());
  FakeTraining run(t);
  run.Steps(2 + 12, Model({{2000, 1s}, {0, 100ms}, {250, 90ms}, {1000, 95ms}}));
  ASSERT_TRUE(t.decided());
  const std::string r = t.Report();
  EXPECT_NE(r.find("batch window 0.25 ms"), std::string::npos) << r;
  EXPECT_NE(r.find("0 ms -> 100.00 ms, 0.25 ms -> 90.00 ms, 1 ms -> 95.00 ms"), std::string::npos)
      << r;
}

TEST(BatchWindowTunerTest, RefusesOptionsItCannotRun) {
  auto expect_invalid = [](BatchWindowTuner::Options o, const std::string& field) {
    try {
      BatchWindowTuner t(o);
      ADD_FAILURE() << "accepted bad " << field;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  };
  auto o = SmallOptions();
  o.candidates.clear();
  expect_invalid(o, "candidates");
  o = SmallOptions();
  o.candidates.push_back(-1us);
  expect_invalid(o, "negative");
  o = SmallOptions();
  o.steps_per_candidate = 0;
  expect_invalid(o, "steps_per_candidate");
  o = SmallOptions();
  o.warmup_steps = -1;
  expect_invalid(o, "warmup_steps");
  o = SmallOptions();
  o.tie_margin = -0.1;
  expect_invalid(o, "tie_margin");
}

}  // namespace
}  // namespace cadre::engine
