// Submissions: what POST /ml/v4/trainings takes, turned into a job directory and a validated
// launch::JobSpec. Both forms end as a manifest file in the job's model/ folder, so validation is
// the runner's own (every problem at once, with field paths) and the runner later runs exactly
// that file:
//  - a WML v4 JSON body (name, model_definition.command, hardware_spec {name, nodes},
//    software_spec {name}, training_data_references) becomes a manifest; problems are named by
//    the body's fields ("hardware_spec.nodes"), not the manifest's;
//  - a multipart form with a `manifest` part (the YAML `cadre run` takes) and an optional
//    `model_definition` part (a zip of the code, extracted safely: zip_extract.h).
#pragma once

#include <httplib.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cadre/launch/gpu_plan.h"
#include "cadre/launch/job_spec.h"
#include "cadre/service/accounts.h"
#include "cadre/service/api.h"
#include "cadre/service/zip_extract.h"

namespace cadre::service {

struct Submission {
  std::string manifest_text;  // YAML, or JSON (which YAML reads)
  std::string code_zip;       // empty: no code uploaded
  bool from_wml_body = false;
  nlohmann::json entity = nlohmann::json::object();  // echoed in the training's resource
};

// Reads the request (JSON or multipart) into *out; on failure answers 400 and returns false.
bool ReadSubmission(const httplib::Request& req, httplib::Response& res, Submission* out);

struct PreparedJob {
  launch::JobSpec spec;
  bool distributed = false;  // more than one learner, or an allreduce framework
};

// Writes the code and the manifest into work_dir/model and validates the job. On failure answers
// (400 naming every problem) and returns false; the caller removes work_dir.
bool PrepareJob(const Submission& submission, const std::filesystem::path& work_dir,
                const launch::Installed& installed, const ZipLimits& limits, httplib::Response& res,
                PreparedJob* out);

// The plan's word on the job: 403 plan_not_supported for a distributed job on a plan without
// them, 403 plan_limit_exceeded naming the limit, 400 when the server itself is too small.
bool CheckPlan(const User& user, const PreparedJob& job, int64_t active_learners,
               int64_t server_slots, httplib::Response& res);

// The machine's word on the job's GPUs (GPUs per learner x learners): 400 exceeds_capacity,
// naming the field that chose the compute configuration, when the machine has GPUs but fewer
// than that. A machine without GPUs takes any job (its GPU configurations run on CPUs).
bool CheckGpus(const launch::MachineGpus& machine, const PreparedJob& job, bool from_wml_body,
               httplib::Response& res);

// The manifest field a WML body's field became, and back ("execution.compute_configuration.nodes"
// is "hardware_spec.nodes").
std::string WmlFieldOf(const std::string& manifest_path);

}  // namespace cadre::service
