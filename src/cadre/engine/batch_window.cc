#include "cadre/engine/batch_window.h"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "cadre/base/status.h"

namespace cadre::engine {

namespace {

std::chrono::nanoseconds Median(std::vector<std::chrono::nanoseconds> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Ms(std::chrono::nanoseconds d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

}  // namespace

BatchWindowTuner::BatchWindowTuner(Options options)
    : options_(std::move(options)), window_(options_.initial) {
  auto& c = options_.candidates;
  if (c.empty()) throw Error(InvalidArgument("batch window tuner: candidates must not be empty"));
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  if (c.front() < Window::zero() || options_.initial < Window::zero()) {
    throw Error(InvalidArgument("batch window tuner: windows must not be negative"));
  }
  if (options_.warmup_steps < 0 || options_.settle_steps < 0 || options_.steps_per_candidate < 1) {
    throw Error(
        InvalidArgument("batch window tuner: warmup_steps and settle_steps must be >= 0, "
                        "steps_per_candidate >= 1"));
  }
  if (!(options_.tie_margin >= 0)) {
    throw Error(InvalidArgument("batch window tuner: tie_margin must be >= 0"));
  }
}

bool BatchWindowTuner::StepEnded(Clock::time_point at) {
  const Window before = window_;
  if (phase_ == Phase::kStart) {
    // The first end of a step only starts the clock: the step before it has no beginning.
    last_ = at;
    phase_ = Phase::kWarmup;
  } else {
    const auto step = std::max(std::chrono::nanoseconds::zero(),
                               std::chrono::duration_cast<std::chrono::nanoseconds>(at - last_));
    last_ = std::max(last_, at);
    ++steps_in_phase_;
    if (phase_ == Phase::kProbe && steps_in_phase_ > options_.settle_steps) {
      current_.push_back(step);
      samples_.push_back({window_, step});
      if (current_.size() == static_cast<size_t>(options_.steps_per_candidate)) {
        medians_.push_back(Median(current_));
        if (candidate_ + 1 < options_.candidates.size()) {
          ++candidate_;
          window_ = options_.candidates[candidate_];
          steps_in_phase_ = 0;
          current_.clear();
        } else {
          Decide();
        }
      }
    }
  }
  if (phase_ == Phase::kWarmup && steps_in_phase_ >= options_.warmup_steps) {
    phase_ = Phase::kProbe;
    candidate_ = 0;
    window_ = options_.candidates[0];
    steps_in_phase_ = 0;
  }
  return window_ != before;
}

void BatchWindowTuner::Decide() {
  const auto best = *std::min_element(medians_.begin(), medians_.end());
  const double limit = Ms(best) * (1 + options_.tie_margin);
  // Candidates are ascending: the first within the margin is the shortest.
  for (size_t i = 0; i < medians_.size(); ++i) {
    if (Ms(medians_[i]) <= limit) {
      window_ = options_.candidates[i];
      break;
    }
  }
  phase_ = Phase::kHeld;
  current_.clear();
}

std::string BatchWindowTuner::Report() const {
  auto ms = [](Window w) { return std::chrono::duration<double, std::milli>(w).count(); };
  std::ostringstream out;
  out << "batch window " << ms(window_) << " ms (CADRE_BATCH_WAIT_MS=auto), chosen from the median"
      << " step time of " << options_.steps_per_candidate << " steps at each window:";
  for (size_t i = 0; i < medians_.size(); ++i) {
    out << (i ? "," : "") << " " << ms(options_.candidates[i]) << " ms -> " << std::fixed
        << std::setprecision(2) << Ms(medians_[i]) << " ms";
    out.unsetf(std::ios::floatfield);
    out << std::setprecision(6);
  }
  out << " (a shorter window within " << options_.tie_margin * 100 << "% of the fastest wins)";
  return out.str();
}

}  // namespace cadre::engine
