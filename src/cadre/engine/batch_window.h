// BatchWindowTuner: sizes the engine's batching window (EngineOptions::batch_wait) from measured
// step times, as Horovod's autotuner (HOROVOD_AUTOTUNE) sizes its knobs, for this one knob.
//
// Why measure: the window trades latency for fusion. While it is open, more of a backward pass's
// gradients join one negotiation (fewer exchanges, larger fused buffers), but the gradients that
// are ready do not travel meanwhile. Which side wins depends on the model (how fast backward
// produces gradients, and how large they are), the machine and the link: no constant is right
// everywhere, and a wrong one costs every step of a run.
//
// What is measured: a step is the interval between consecutive ends of a step (the engine passes
// the time of each Engine::Flush(), which DistributedOptimizer calls once per step when backward
// has submitted every gradient). That interval is the whole step as the training loop sees it
// (forward, backward, the wait for the reduced gradients, the update), so its inverse is the
// throughput users get, whatever the model.
//
// Schedule: `warmup_steps` at the initial window (the first steps allocate, warm caches and
// negotiate every name in full before the response cache holds it), then each candidate in
// ascending order: `settle_steps` that are not scored (a new window reaches the other ranks
// through the next negotiation, so the step in which it changes runs partly under the old one),
// then `steps_per_candidate` scored steps. A candidate's score is the median of its steps (one
// slow step, from a garbage collection, a checkpoint or another process's burst of load, does
// not move it). The choice is the shortest window whose median is within `tie_margin` of the
// best: a shorter window adds less latency to every gradient, and differences that small are
// within this kind of measurement's noise. The choice is then held for the rest of the run.
//
// No re-probing: a held window's step time drifts mostly for reasons the window does not cause
// (the model's phases, the data, other load on the machine), and each probe runs several steps
// at windows already measured to be worse. One probe at the start is the same trade as Horovod's
// autotuner, which also stops tuning once it has settled.
//
// Deterministic: no clock inside, the engine passes the time of each step's end, so tests feed
// synthetic times. Not thread-safe: owned by the engine thread of rank 0, which alone decides
// (every rank adopts rank 0's window through the negotiation, controller.h).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "cadre/base/deadline.h"

namespace cadre::engine {

class BatchWindowTuner {
 public:
  using Window = std::chrono::microseconds;

  struct Options {
    // Tried in ascending order (sorted and deduplicated by the constructor). Up to 2 ms: the
    // shortest training steps worth distributing are tens of milliseconds long.
    std::vector<Window> candidates = {Window(0),   Window(125),  Window(250),
                                      Window(500), Window(1000), Window(2000)};
    // The window before the tuner has decided (the engine's constant before it was measured).
    Window initial = Window(1000);
    int warmup_steps = 3;
    int settle_steps = 1;
    int steps_per_candidate = 5;
    // A shorter window whose median step is at most this fraction slower than the best wins.
    double tie_margin = 0.03;
  };

  struct Sample {
    Window window;
    std::chrono::nanoseconds step;
  };

  // Throws Error(kInvalidArgument) naming the field on empty candidates, negative windows or
  // counts, or a negative tie margin.
  explicit BatchWindowTuner(Options options);

  // Records the end of a step at `at` (times must not go backwards; an earlier time counts as a
  // zero-length step). True when window() changed as a result.
  bool StepEnded(Clock::time_point at);

  // The window to use from now on.
  Window window() const { return window_; }
  // True once every candidate has been scored and the choice is held.
  bool decided() const { return phase_ == Phase::kHeld; }
  // Scored steps so far, in the order measured (for HOROVOD_AUTOTUNE_LOG).
  const std::vector<Sample>& samples() const { return samples_; }
  // The median step of each candidate, in candidates() order (valid once decided()).
  const std::vector<std::chrono::nanoseconds>& medians() const { return medians_; }
  const std::vector<Window>& candidates() const { return options_.candidates; }
  // One line for the log, once decided(): the choice and each candidate's median step.
  std::string Report() const;

 private:
  enum class Phase { kStart, kWarmup, kProbe, kHeld };
  void Decide();

  Options options_;
  Phase phase_ = Phase::kStart;
  Window window_;
  Clock::time_point last_{};
  int steps_in_phase_ = 0;  // steps since the current phase (or candidate) began
  size_t candidate_ = 0;    // the one being probed
  std::vector<std::chrono::nanoseconds> current_;  // scored steps of that candidate
  std::vector<Sample> samples_;
  std::vector<std::chrono::nanoseconds> medians_;
};

}  // namespace cadre::engine
