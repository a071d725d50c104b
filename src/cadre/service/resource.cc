#include "cadre/service/resource.h"

#include <deque>
#include <fstream>

namespace cadre::service {
using nlohmann::json;

json ReadMetrics(const std::filesystem::path& job_dir, size_t limit) {
  std::ifstream in(job_dir / "metrics.jsonl");
  std::deque<json> points;
  for (std::string line; std::getline(in, line);) {
    json point = json::parse(line, nullptr, false);
    // A line being written (no newline yet) or garbage from a script is skipped, not fatal.
    if (point.is_discarded() || !point.is_object()) continue;
    points.push_back(std::move(point));
    if (points.size() > limit) points.pop_front();
  }
  json out = json::array();
  for (auto& p : points) out.push_back(std::move(p));
  return out;
}

json TrainingResource(const TrainingRecord& r, bool with_metrics) {
  json status = {{"state", r.state}};
  if (r.running_at) status["running_at"] = *r.running_at;
  if (r.completed_at) status["completed_at"] = *r.completed_at;
  // WML's levels: a failure's message is an error, every other one information.
  if (r.message) {
    status["message"] = {{"level", r.state == kFailed ? "error" : "info"}, {"text", *r.message}};
  }
  if (r.failure) {
    status["failure"] = {
        {"trace", r.id},
        {"errors", json::array({{{"code", "training_failed"}, {"message", *r.failure}}})}};
  }
  status["metrics"] = ReadMetrics(r.job_dir, with_metrics ? 10000 : 1);
  json entity = json::parse(r.entity, nullptr, false);
  if (!entity.is_object()) entity = json::object();
  entity["results_reference"] = {{"type", "fs"}, {"location", {{"path", r.job_dir.string()}}}};
  entity["status"] = std::move(status);
  std::string modified = r.completed_at.value_or(r.running_at.value_or(r.created_at));
  return {
      {"metadata",
       {{"id", r.id}, {"name", r.name}, {"created_at", r.created_at}, {"modified_at", modified}}},
      {"entity", std::move(entity)}};
}

}  // namespace cadre::service
