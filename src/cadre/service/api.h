// What every route shares: the ApiContext (the service's parts) and the request helpers:
// bearer authentication, WML-shaped JSON errors, query parameters.
//
// Errors are WML's: {"trace": "<id>", "errors": [{"code", "message", "target"?}]} with the HTTP
// status that fits (400 bad input, 401 no or wrong token, 403 refused by the plan, 404 unknown
// or not yours, 411 no Content-Length, 413 too large).
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cadre/launch/job_spec.h"
#include "cadre/service/accounts.h"
#include "cadre/service/deployment_store.h"
#include "cadre/service/deployments.h"
#include "cadre/service/model_store.h"
#include "cadre/service/scheduler.h"
#include "cadre/service/service.h"
#include "cadre/service/training_store.h"

namespace cadre::service {

struct ApiContext {
  const ServiceOptions& options;
  Accounts& accounts;
  TrainingStore& trainings;
  Scheduler& scheduler;
  ModelStore& models;
  DeploymentStore& deployment_store;
  Deployments& deployments;
  launch::Installed installed;        // what submissions are validated against
  const std::atomic<bool>& stopping;  // the server is shutting down: streams end
  // Held while a submission's plan limits (or the deployment limit) are checked and it is
  // recorded, so that concurrent submissions cannot slip past a limit together.
  std::mutex submit_mutex;
  // Log followers hold an HTTP thread each for as long as they follow: at most half of the
  // threads follow, so that the others keep answering.
  std::atomic<int> followers{0};
};

struct ApiError {
  std::string code;     // "invalid_parameter", "plan_not_supported", ...
  std::string message;  // for people
  std::string target;   // the field at fault ("hardware_spec.nodes"); empty when none
};

void SendJson(httplib::Response& res, int status, const nlohmann::json& body);
// Both return the answer's trace id (for the server's log).
std::string SendErrors(httplib::Response& res, int status, const std::vector<ApiError>& errors);
std::string SendError(httplib::Response& res, int status, const std::string& code,
                      const std::string& message, const std::string& target = "");

// Refuses what a JSON body must not silently ignore: one invalid_parameter error for each key
// of `object` that is not in `known`, at its path ("training_data_references[0].conection"),
// naming the closest known key or, when none is close, all of them. `path` is the object's own
// path ("" for the body).
void CheckFields(const nlohmann::json& object, const std::string& path,
                 const std::vector<std::string_view>& known, std::vector<ApiError>* errors);

// The caller's user, from `Authorization: Bearer <token>`; otherwise nullopt, with why in *why.
std::optional<User> BearerUser(ApiContext& ctx, const httplib::Request& req, ApiError* why);
// The same; otherwise answers 401 (in WML's shape) and returns nullopt.
std::optional<User> Authenticate(ApiContext& ctx, const httplib::Request& req,
                                 httplib::Response& res);

// WML's mandatory `version=YYYY-MM-DD`; answers 400 and returns false when it is missing or
// malformed.
bool CheckVersion(const httplib::Request& req, httplib::Response& res);

// The caller's training `req.matches[1]`, after CheckVersion and Authenticate; otherwise the
// answer is sent (400, 401, or 404 for a training that does not exist or is not the caller's)
// and nullopt returned.
std::optional<TrainingRecord> CallersTraining(ApiContext& ctx, const httplib::Request& req,
                                              httplib::Response& res);
// 404 training_not_found for `id`.
void SendTrainingNotFound(httplib::Response& res, const std::string& id);

// An integer query parameter in [min, max], or `fallback` when absent; answers 400 naming the
// parameter and returns false for anything else.
bool IntParam(const httplib::Request& req, httplib::Response& res, const std::string& name,
              int64_t fallback, int64_t min, int64_t max, int64_t* out);

}  // namespace cadre::service
