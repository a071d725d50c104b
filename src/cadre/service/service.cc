#include "cadre/service/service.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <thread>

#include "cadre/base/logging.h"
#include "cadre/base/printable.h"
#include "cadre/http/server.h"
#include "cadre/launch/learner_env.h"
#include "cadre/launch/python_env.h"
#include "cadre/service/api.h"
#include "cadre/service/data_dir_lock.h"
#include "cadre/service/db.h"
#include "cadre/service/resource_id.h"
#include "cadre/service/routes.h"

namespace cadre::service {
namespace fs = std::filesystem;

namespace {

// The lobby's own refusals (408, 414, 431) in the service's error shape.
std::string LobbyRefusal(int, const std::string& code, const std::string& message) {
  nlohmann::json body = {
      {"trace", RandomHex(16)},
      {"errors", nlohmann::json::array({{{"code", code}, {"message", message}}})}};
  return body.dump();
}

void SendBodyTooLarge(httplib::Response& res, uint64_t max_body) {
  SendError(res, 413, "payload_too_large",
            "the request body is larger than this server accepts (" +
                std::to_string(max_body >> 20) + " MiB)");
}

Status OpenDatabase(const fs::path& data_dir, std::unique_ptr<Db>* db) {
  std::error_code ec;
  fs::create_directories(data_dir / "jobs", ec);
  if (ec) {
    return IoError("cannot create the data directory " + data_dir.string() + ": " + ec.message());
  }
  return Db::Open(data_dir / "cadre.db", db);
}

}  // namespace

fs::path DefaultWebDir() {
#ifdef CADRE_SOURCE_DIR
  return fs::path(CADRE_SOURCE_DIR) / "web";
#else
  return "web";
#endif
}

struct Service::Parts {
  std::unique_ptr<DataDirLock> lock;  // first: held until everything else is gone
  std::unique_ptr<Db> db;
  std::unique_ptr<Accounts> accounts;
  std::unique_ptr<TrainingStore> trainings;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<ModelStore> models;
  std::unique_ptr<DeploymentStore> deployment_store;
  std::unique_ptr<Deployments> deployments;
  std::unique_ptr<ApiContext> ctx;
  std::unique_ptr<http::Server> http;
};

Service::Service(ServiceOptions options) : options_(std::move(options)) {}

Service::~Service() {
  Stop();
  if (parts_ && parts_->deployments) parts_->deployments->StopAll();
  if (parts_ && parts_->scheduler) parts_->scheduler->Stop();
}

Status Service::Start() {
  options_.data_dir = fs::absolute(options_.data_dir);
  if (options_.slots <= 0) {
    // At least 4, so that the examples (2 learners x 2 slots) run on a small machine, as they
    // do with `cadre run`.
    options_.slots = std::max<int64_t>(4, std::thread::hardware_concurrency());
  }
  if (options_.web_dir.empty()) options_.web_dir = DefaultWebDir();
  auto parts = std::make_unique<Parts>();
  CADRE_RETURN_IF_ERROR(OpenDatabase(options_.data_dir, &parts->db));
  CADRE_RETURN_IF_ERROR(DataDirLock::Acquire(options_.data_dir, &parts->lock));
  parts->accounts = std::make_unique<Accounts>(*parts->db);
  parts->trainings = std::make_unique<TrainingStore>(*parts->db);
  parts->models = std::make_unique<ModelStore>(*parts->db);
  parts->deployment_store = std::make_unique<DeploymentStore>(*parts->db);
  SchedulerOptions scheduling;
  scheduling.slots = options_.slots;
  scheduling.cadre = options_.cadre;
  scheduling.grace = options_.grace;
  scheduling.poll = std::chrono::milliseconds(100);
  scheduling.models = parts->models.get();
  scheduling.models_dir = options_.data_dir / "models";
  scheduling.run_args = options_.run_args;
  // Jobs on this machine share its GPUs; on a cluster the engine places them.
  if (options_.backend == "local") {
    CADRE_RETURN_IF_ERROR(launch::DetectMachineGpus(&scheduling.gpus)
                              .WithContext("the machine's GPUs, which jobs share"));
  }
  parts->scheduler = std::make_unique<Scheduler>(*parts->trainings, scheduling);
  if (options_.serve_program.empty()) {
    options_.serve_program = options_.cadre.parent_path() / "cadre-serve";
  }
  DeploymentOptions deploying;
  deploying.serve_program = options_.serve_program;
  deploying.dir = options_.data_dir / "deployments";
  deploying.max_restarts = options_.max_deployment_restarts;
  deploying.grace = options_.grace;
  deploying.max_request_bytes = options_.max_prediction_bytes;
  parts->deployments =
      std::make_unique<Deployments>(*parts->deployment_store, *parts->models, deploying);
  launch::PythonInfo python = launch::FindPython();
  parts->ctx.reset(new ApiContext{options_,
                                  *parts->accounts,
                                  *parts->trainings,
                                  *parts->scheduler,
                                  *parts->models,
                                  *parts->deployment_store,
                                  *parts->deployments,
                                  launch::Installed{python.torch_version, python.interpreter},
                                  stopping_,
                                  {}});

  http::Limits limits;
  limits.threads = static_cast<size_t>(options_.threads);
  limits.head_timeout = options_.request_timeout;
  limits.body_min_rate = options_.min_upload_rate;
  // Log followers may take half the threads (routes_logs.cc), large uploads a quarter: a
  // quarter is always left to every other request.
  limits.max_streamed = std::max<size_t>(1, limits.threads / 4);
  parts->http = std::make_unique<http::Server>(limits, LobbyRefusal);
  http::Server& server = *parts->http;
  server.set_payload_max_length(options_.max_body);
  server.set_read_timeout(options_.request_timeout.count(), 0);
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // A client that asks before it sends (Expect: 100-continue, as curl does for a large upload)
  // learns from the Content-Length alone that the body is too large, and never sends it: over
  // the server's limit, or over the deployments' for a prediction.
  const uint64_t max_body = options_.max_body;
  const ApiContext* ctx = parts->ctx.get();
  server.set_expect_100_continue_handler([max_body, ctx](const httplib::Request& req,
                                                         httplib::Response& res) {
    if (RefuseLargePrediction(*ctx, req, res)) return 413;
    if (std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10) <= max_body) {
      return 100;
    }
    SendBodyTooLarge(res, max_body);
    return 413;
  });
  // cpp-httplib 0.11 reads a POST, PUT or PATCH without Content-Length (curl -X POST with no
  // data) until the connection ends: the client would wait out the read timeout for a 400.
  server.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    const bool has_body = req.method == "POST" || req.method == "PUT" || req.method == "PATCH";
    // An id the service could never have given (`../../etc`) is named, before any route or
    // lookup: a route would answer "no route" for one with a slash, "not found" for the rest.
    if (Status st = CheckIdInPath(req.path); !st.ok()) {
      SendError(res, 400, "invalid_parameter", st.message(), "id");
      // The body, if any, is not read: the connection cannot carry another request.
      if (has_body) res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!has_body || req.has_header("Content-Length") || req.has_header("Transfer-Encoding")) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    SendError(res, 411, "length_required",
              req.method + " needs a body with a Content-Length (curl: give it -d or -F)");
    return httplib::Server::HandlerResponse::Handled;
  });
  server.set_error_handler([max_body, &server](const httplib::Request& req,
                                               httplib::Response& res) {
    if (!res.body.empty()) return;
    // A chunked body stops being read once it passes the limit: cpp-httplib says 400.
    // What the client still sends of it is not read.
    if (res.status == 400 && server.BodyCut(req)) {
      res.status = 413;
      res.set_header("Connection", "close");
    }
    // cpp-httplib parses a form-urlencoded body (what `curl -d` sends without a Content-Type)
    // as form fields and refuses one over 8 KiB with 413, far below the server's limit.
    if (res.status == 413 &&
        req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0) {
      SendError(res, 415, "invalid_content_type",
                "the body is sent as application/x-www-form-urlencoded (curl -d without a "
                "Content-Type), which this server reads only up to 8 KiB; send JSON with "
                "'Content-Type: application/json'");
    } else if (res.status == 413) {
      SendBodyTooLarge(res, max_body);
    } else if (res.status == 404) {
      SendError(res, 404, "not_found", "no route " + req.method + " " + Quoted(req.path));
    } else if (res.status == 414) {
      SendError(res, 414, "uri_too_long", "the request's URI is longer than this server reads");
    } else if (res.status == 400 &&
               req.get_header_value("Content-Type").rfind("multipart/form-data", 0) == 0) {
      // cpp-httplib refuses a form it cannot split into parts before any route sees it.
      SendError(res, 400, "invalid_multipart",
                "the multipart/form-data body could not be read: its Content-Type needs a "
                "boundary, and the body must be parts each opened by --BOUNDARY and closed by "
                "a final --BOUNDARY-- (curl -F writes one)");
    } else {
      SendError(res, res.status, "bad_request",
                "the request could not be handled (a malformed request line or header?)");
    }
  });
  // A route that throws is the server's fault: the client gets a trace to quote, the server's
  // log the details (they may name files and internals the client has no business seeing).
  server.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        const std::string trace = RandomHex(16);
        CADRE_LOG(ERROR) << "cadre server: internal error, trace " << trace << ", " << req.method
                         << " " << Quoted(req.path) << ": " << what;
        nlohmann::json error = {
            {"code", "internal_error"},
            {"message", "internal error; the server's log tells more under trace " + trace}};
        SendJson(res, 500, {{"trace", trace}, {"errors", nlohmann::json::array({error})}});
      });
  AddTrainingRoutes(server, *parts->ctx);
  AddLogRoutes(server, *parts->ctx);
  AddModelRoutes(server, *parts->ctx);
  AddDeploymentRoutes(server, *parts->ctx);
  AddDashboardRoutes(server, *parts->ctx);

  std::string bind_error;
  port_ = server.Bind(options_.host, options_.port, &bind_error);
  if (port_ < 0) {
    return IoError(options_.port == 0 ? "cannot listen on " + options_.host + " (any port)"
                                      : bind_error + "; choose another with --listen HOST:PORT");
  }
  parts->scheduler->Start();
  parts->deployments->Start();
  parts_ = std::move(parts);
  return Status::Ok();
}

const launch::MachineGpus& Service::gpus() const { return parts_->scheduler->gpus(); }

void Service::Run() {
  if (!parts_) return;
  parts_->http->Serve();
  parts_->deployments->StopAll();
}

void Service::Stop() {
  stopping_ = true;
  if (parts_) parts_->http->Stop();
}

Status AddUser(const fs::path& data_dir, const std::string& name, const std::string& plan,
               std::string* token) {
  std::unique_ptr<Db> db;
  CADRE_RETURN_IF_ERROR(OpenDatabase(data_dir, &db));
  Accounts accounts(*db);
  return accounts.AddUser(name, plan, token);
}

Status ChangeUser(const fs::path& data_dir, UserChange change, const std::string& name,
                  const std::string& value, std::string* out) {
  std::unique_ptr<Db> db;
  CADRE_RETURN_IF_ERROR(OpenDatabase(data_dir, &db));
  Accounts accounts(*db);
  switch (change) {
    case UserChange::kNewToken:
      return accounts.NewToken(name, out);
    case UserChange::kRevokeTokens: {
      int64_t revoked = 0;
      Status st = accounts.RevokeTokens(name, &revoked);
      *out = std::to_string(revoked);
      return st;
    }
    case UserChange::kSetPlan:
      return accounts.SetPlan(name, value);
  }
  return InvalidArgument("unknown change");
}

}  // namespace cadre::service
