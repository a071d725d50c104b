// A training as the API shows it: WML v4's {metadata, entity} resource.
//   metadata: id, name, created_at, modified_at
//   entity:   the submission as echoed (model_definition, hardware_spec, software_spec, ...),
//             results_reference (the job directory), status {state, running_at, completed_at,
//             message {level, text}, failure {trace, errors}, metrics [...]}
// Metrics are the lines of the job's metrics.jsonl (written by cadre.log_metrics), each
// {timestamp, iteration, ml_metrics {name: value}}.
#pragma once

#include <nlohmann/json.hpp>

#include "cadre/service/training_store.h"

namespace cadre::service {

// `with_metrics`: the whole series (single GET) or only the latest point (lists).
nlohmann::json TrainingResource(const TrainingRecord& record, bool with_metrics);

// The job's metrics, oldest first, at most `limit` (the newest ones).
nlohmann::json ReadMetrics(const std::filesystem::path& job_dir, size_t limit);

}  // namespace cadre::service
