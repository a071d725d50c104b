// POST /ml/v4/trainings, GET /ml/v4/trainings, GET and DELETE /ml/v4/trainings/{id}.
#include <mutex>

#include "cadre/base/printable.h"
#include "cadre/launch/job_status.h"
#include "cadre/service/api.h"
#include "cadre/service/clock.h"
#include "cadre/service/resource.h"
#include "cadre/service/routes.h"
#include "cadre/service/submission.h"

namespace cadre::service {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

void Submit(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (!CheckVersion(req, res)) return;
  std::optional<User> user = Authenticate(ctx, req, res);
  if (!user) return;
  Submission submission;
  if (!ReadSubmission(req, res, &submission)) return;

  std::string id = launch::NewTrainingId();
  fs::path job_dir = ctx.options.data_dir / "jobs" / id;
  fs::path work_dir = ctx.options.data_dir / "trainings" / id;
  PreparedJob job;
  ZipLimits limits{ctx.options.max_unzipped, 10000};
  bool ok = PrepareJob(submission, work_dir, ctx.installed, limits, res, &job);
  if (ok && !job.spec.backend.empty() && job.spec.backend != ctx.options.backend) {
    SendError(res, 400, "invalid_request",
              "execution.backend: this server runs jobs on the " + ctx.options.backend +
                  " backend, not '" + job.spec.backend + "'; leave the field out",
              "execution.backend");
    ok = false;
  }
  if (ok && ctx.options.backend == "kubernetes" && job.spec.image.empty()) {
    SendError(res, 400, "invalid_request",
              "image: this server runs jobs on Kubernetes; name the container image (holding "
              "cadre and the job's command) in the manifest's image field",
              "image");
    ok = false;
  }
  std::lock_guard<std::mutex> lock(ctx.submit_mutex);
  ok = ok &&
       CheckPlan(*user, job, ctx.trainings.ActiveLearners(user->id), ctx.scheduler.slots(), res) &&
       CheckGpus(ctx.scheduler.gpus(), job, submission.from_wml_body, res);
  TrainingRecord record;
  if (ok) {
    if (!submission.from_wml_body) {
      submission.entity = {
          {"name", job.spec.name},
          {"model_definition",
           {{"command", job.spec.command}, {"code", !submission.code_zip.empty()}}},
          {"hardware_spec", {{"name", job.spec.compute.name}, {"nodes", job.spec.nodes}}},
          {"software_spec", {{"name", job.spec.framework.name}}}};
    }
    record.id = id;
    record.user_id = user->id;
    record.name = job.spec.name;
    record.framework = std::string(job.spec.framework.name);
    record.nodes = job.spec.nodes;
    record.slots = job.spec.total_slots();
    // Parameter servers take none (gpu_plan.h): only the workers' GPUs are held.
    record.gpus = static_cast<int64_t>(job.spec.compute.gpus) * job.spec.gpu_learners();
    record.job_dir = job_dir;
    record.work_dir = work_dir;
    record.created_at = NowIso();
    record.entity = submission.entity.dump();
    Status st = ctx.trainings.Insert(&record);
    if (!st.ok()) {
      SendError(res, 500, "internal_error", "could not record the training: " + st.message());
      ok = false;
    }
  }
  if (!ok) {
    std::error_code ec;
    fs::remove_all(work_dir, ec);
    return;
  }
  ctx.scheduler.Wake();
  res.set_header("Location", "/ml/v4/trainings/" + id);
  SendJson(res, 201, TrainingResource(record, false));
}

void List(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (!CheckVersion(req, res)) return;
  std::optional<User> user = Authenticate(ctx, req, res);
  if (!user) return;
  int64_t limit = 0, start = 0;
  if (!IntParam(req, res, "limit", 100, 1, 200, &limit)) return;
  if (!IntParam(req, res, "start", 0, 0, INT64_MAX / 2, &start)) return;
  std::string state = req.get_param_value("state");
  if (!state.empty() && !IsKnownState(state)) {
    SendError(res, 400, "invalid_parameter",
              "state must be one of pending, queued, running, storing, completed, failed, "
              "canceled; got " +
                  Quoted(state),
              "state");
    return;
  }
  TrainingPage page = ctx.trainings.List(user->id, state, limit, start);
  json resources = json::array();
  for (const auto& r : page.records) resources.push_back(TrainingResource(r, false));
  json body = {{"total_count", page.total}, {"limit", limit}, {"resources", resources}};
  if (start + limit < page.total) {
    body["next"] = {{"href", "/ml/v4/trainings?version=" + req.get_param_value("version") +
                                 "&limit=" + std::to_string(limit) +
                                 "&start=" + std::to_string(start + limit) +
                                 (state.empty() ? "" : "&state=" + state)}};
  }
  SendJson(res, 200, body);
}

void Get(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  std::optional<TrainingRecord> record = CallersTraining(ctx, req, res);
  if (!record) return;
  SendJson(res, 200, TrainingResource(*record, true));
}

void Delete(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (!CheckVersion(req, res)) return;
  std::optional<User> user = Authenticate(ctx, req, res);
  if (!user) return;
  std::string id = req.matches[1];
  std::string hard = req.get_param_value("hard_delete");
  if (!hard.empty() && hard != "true" && hard != "false") {
    SendError(res, 400, "invalid_parameter", "hard_delete must be true or false", "hard_delete");
    return;
  }
  std::optional<TrainingRecord> before = ctx.trainings.RequestCancel(id, user->id, hard == "true");
  if (!before) {
    SendTrainingNotFound(res, id);
    return;
  }
  if (IsFinalState(before->state)) {
    if (hard == "true") RemoveTraining(ctx.trainings, *before);
  } else {
    ctx.scheduler.Cancel(*before);
  }
  res.status = 204;
}

}  // namespace

void AddTrainingRoutes(httplib::Server& server, ApiContext& ctx) {
  server.Post("/ml/v4/trainings", [&ctx](const httplib::Request& req, httplib::Response& res) {
    Submit(ctx, req, res);
  });
  server.Get("/ml/v4/trainings",
             [&ctx](const httplib::Request& req, httplib::Response& res) { List(ctx, req, res); });
  server.Get(R"(/ml/v4/trainings/([^/]+))",
             [&ctx](const httplib::Request& req, httplib::Response& res) { Get(ctx, req, res); });
  server.Delete(
      R"(/ml/v4/trainings/([^/]+))",
      [&ctx](const httplib::Request& req, httplib::Response& res) { Delete(ctx, req, res); });
}

}  // namespace cadre::service
