// POST/GET /ml/v4/deployments, GET/PATCH/DELETE /ml/v4/deployments/{id}, and scoring through the
// service: POST /ml/v4/deployments/{id}/predictions, proxied to the deployment's own process
// (deployments.h), and the same through the Open Inference Protocol: POST /v2/models/{id}/infer,
// GET /v2/models/{id}[/ready], and the server's GET /v2/health/live and /v2/health/ready.
//
// A deployment as the API shows it (WML v4): {metadata {id, name, created_at, modified_at},
// entity {name, online {}, asset {id}, status {state, message {level, text}, failure {trace,
// errors}, online_url {url}}, restarts}}.
//
// Predictions: the caller's bearer token is the service's (401 without it, 404 for a deployment
// that does not exist or is not theirs, 503 while it is not ready); a body larger than
// `max_prediction_bytes` is refused from its Content-Length (413) before any of it is parsed.
// The deployment's answer (predictions, or its own 400/500 naming the field at fault) is passed
// on as it is; a process that ends while scoring gives 503, and the supervisor restarts it.
#include <cstdlib>
#include <regex>

#include "cadre/base/logging.h"
#include "cadre/base/printable.h"
#include "cadre/service/api.h"
#include "cadre/service/clock.h"
#include "cadre/service/deployments.h"
#include "cadre/service/routes.h"

namespace cadre::service {
namespace {

using nlohmann::json;

json DeploymentResource(const DeploymentRecord& d) {
  json status = {{"state", d.state},
                 {"online_url", {{"url", "/ml/v4/deployments/" + d.id + "/predictions"}}}};
  // WML's levels: a failure's message is an error, every other one information.
  if (d.message) {
    status["message"] = {{"level", d.state == kFailed ? "error" : "info"}, {"text", *d.message}};
  }
  if (d.failure) {
    status["failure"] = {
        {"trace", d.id},
        {"errors", json::array({{{"code", "deployment_failed"}, {"message", *d.failure}}})}};
  }
  return {{"metadata",
           {{"id", d.id},
            {"name", d.name},
            {"created_at", d.created_at},
            {"modified_at", d.modified_at}}},
          {"entity",
           {{"name", d.name},
            {"online", json::object()},
            {"asset", {{"id", d.model_id}}},
            {"status", std::move(status)},
            {"restarts", d.restarts}}}};
}

void SendDeploymentNotFound(httplib::Response& res, const std::string& id) {
  SendError(res, 404, "deployment_not_found", "deployment " + Quoted(id) + " does not exist", "id");
}

void Create(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (!CheckVersion(req, res)) return;
  std::optional<User> user = Authenticate(ctx, req, res);
  if (!user) return;
  json body = json::parse(req.body, nullptr, false);
  if (!body.is_object()) {
    SendError(res, 400, "invalid_request_entity",
              "the body must be a JSON object {\"name\", \"online\": {}, \"asset\": {\"id\"}}");
    return;
  }
  // WML's fields: those read, and those accepted as WML clients send them but not acted on
  // (description, tags, custom, space_id, project_id, hardware_spec: a deployment is one
  // process; online.parameters; asset.rev). Anything else is refused, naming the field.
  std::vector<ApiError> errors;
  CheckFields(body, "",
              {"name", "online", "asset", "batch", "description", "tags", "custom", "space_id",
               "project_id", "hardware_spec"},
              &errors);
  CheckFields(body.value("online", json::object()), "online", {"parameters"}, &errors);
  CheckFields(body.value("asset", json::object()), "asset", {"id", "rev"}, &errors);
  std::string name;
  if (!body.contains("name") || !body["name"].is_string() ||
      body["name"].get<std::string>().empty()) {
    errors.push_back({"missing_field", "name: expected a non-empty string", "name"});
  } else {
    name = body["name"].get<std::string>();
  }
  if (body.contains("batch")) {
    errors.push_back({"invalid_parameter",
                      "batch: only online deployments are supported; "
                      "send \"online\": {}",
                      "batch"});
  } else if (!body.contains("online") || !body["online"].is_object()) {
    errors.push_back({"missing_field", "online: expected an object ({} will do)", "online"});
  }
  std::string model_id;
  if (!body.contains("asset") || !body["asset"].is_object() || !body["asset"].contains("id") ||
      !body["asset"]["id"].is_string()) {
    errors.push_back({"missing_field",
                      "asset.id: expected the id of a stored model "
                      "(GET /ml/v4/models)",
                      "asset.id"});
  } else {
    model_id = body["asset"]["id"].get<std::string>();
  }
  if (!errors.empty()) {
    SendErrors(res, 400, errors);
    return;
  }
  if (!ctx.models.Get(model_id, user->id)) {
    SendError(res, 404, "model_not_found",
              "asset.id: model " + Quoted(model_id) + " does not exist", "asset.id");
    return;
  }
  DeploymentRecord record;
  {
    std::lock_guard<std::mutex> lock(ctx.submit_mutex);
    if (ctx.deployment_store.Count() >= ctx.options.max_deployments) {
      SendError(res, 409, "deployment_limit_reached",
                "this server runs at most " + std::to_string(ctx.options.max_deployments) +
                    " deployments; delete one first");
      return;
    }
    record.id = "deployment-" + RandomHex(8);
    record.user_id = user->id;
    record.name = name;
    record.model_id = model_id;
    record.state = kInitializing;
    record.message = "starting its scoring process";
    record.created_at = record.modified_at = NowIso();
    Status st = ctx.deployment_store.Insert(&record);
    if (!st.ok()) {
      SendError(res, 500, "internal_error", "could not record the deployment: " + st.message());
      return;
    }
  }
  ctx.deployments.Launch(record);
  res.set_header("Location", "/ml/v4/deployments/" + record.id);
  SendJson(res, 201, DeploymentResource(record));
}

void List(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (!CheckVersion(req, res)) return;
  std::optional<User> user = Authenticate(ctx, req, res);
  if (!user) return;
  json resources = json::array();
  for (const auto& d : ctx.deployment_store.List(user->id)) {
    resources.push_back(DeploymentResource(d));
  }
  SendJson(res, 200, {{"total_count", resources.size()}, {"resources", resources}});
}

// The caller's deployment named in the path; otherwise answers (400, 401, 404) and nullopt.
std::optional<std::pair<User, DeploymentRecord>> Owned(ApiContext& ctx, const httplib::Request& req,
                                                       httplib::Response& res) {
  if (!CheckVersion(req, res)) return std::nullopt;
  std::optional<User> user = Authenticate(ctx, req, res);
  if (!user) return std::nullopt;
  std::string id = req.matches[1];
  std::optional<DeploymentRecord> d = ctx.deployment_store.Get(id, user->id);
  if (!d) {
    SendDeploymentNotFound(res, id);
    return std::nullopt;
  }
  return std::make_pair(std::move(*user), std::move(*d));
}

void Get(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (auto owned = Owned(ctx, req, res)) SendJson(res, 200, DeploymentResource(owned->second));
}

// PATCH /ml/v4/deployments/{id}: WML's JSON Patch, `[{"op": "replace", "path": "/asset",
// "value": {"id": MODEL}}]` (or "/asset/id" with the id) to serve another model, "/name" to
// rename. All or nothing: every operation is checked, each error naming its place, before any
// is applied. 202 when a model is being changed (the state is `updating`, or `initializing`
// for a deployment with no process), else 200.
void Patch(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto owned = Owned(ctx, req, res);
  if (!owned) return;
  const User& user = owned->first;
  const std::string& id = owned->second.id;
  std::optional<DeploymentRecord> d = owned->second;
  json body = json::parse(req.body, nullptr, false);
  if (!body.is_array() || body.empty()) {
    SendError(res, 400, "invalid_request_entity",
              "the body must be a JSON Patch array, such as [{\"op\": \"replace\", \"path\": "
              "\"/asset\", \"value\": {\"id\": \"MODEL_ID\"}}]");
    return;
  }
  std::vector<ApiError> errors;
  std::optional<std::string> name, model_id;
  std::string model_target;
  for (size_t i = 0; i < body.size(); ++i) {
    const std::string at = "[" + std::to_string(i) + "]";
    const json& op = body[i];
    if (!op.is_object()) {
      errors.push_back({"invalid_parameter", at + ": expected an object {op, path, value}", at});
      continue;
    }
    CheckFields(op, at, {"op", "path", "value"}, &errors);
    const std::string verb = op.value("op", json()).is_string() ? op["op"].get<std::string>() : "";
    if (verb != "replace" && verb != "add") {
      errors.push_back(
          {"invalid_parameter", at + ".op: expected \"replace\" (or \"add\")", at + ".op"});
    }
    const std::string path =
        op.value("path", json()).is_string() ? op["path"].get<std::string>() : "";
    const json value = op.value("value", json());
    if (path == "/name") {
      if (!value.is_string() || value.get<std::string>().empty()) {
        errors.push_back(
            {"invalid_parameter", at + ".value: expected a non-empty name", at + ".value"});
      } else {
        name = value.get<std::string>();
      }
    } else if (path == "/asset" || path == "/asset/id") {
      const json model = path == "/asset" && value.is_object() ? value.value("id", json()) : value;
      if (path == "/asset" && value.is_object()) {
        CheckFields(value, at + ".value", {"id", "rev"}, &errors);
      }
      if (!model.is_string() || model.get<std::string>().empty()) {
        errors.push_back({"invalid_parameter",
                          at + ".value: expected " +
                              (path == "/asset" ? "{\"id\": MODEL_ID}" : "a model's id") +
                              " (GET /ml/v4/models)",
                          at + ".value"});
      } else {
        model_id = model.get<std::string>();
        model_target = at + ".value";
      }
    } else {
      errors.push_back({"invalid_parameter",
                        at + ".path: expected \"/asset\", \"/asset/id\" or \"/name\" (" +
                            (path.empty() ? std::string("none given") : Quoted(path)) + ")",
                        at + ".path"});
    }
  }
  if (!errors.empty()) return (void)SendErrors(res, 400, errors);
  std::optional<ModelRecord> model;
  if (model_id) {
    model = ctx.models.Get(*model_id, user.id);
    if (!model) {
      SendError(res, 404, "model_not_found",
                model_target + ": model " + Quoted(*model_id) + " does not exist", model_target);
      return;
    }
  }
  if (name && !ctx.deployment_store.SetName(id, *name).ok()) {
    return SendDeploymentNotFound(res, id);
  }
  if (model) ctx.deployments.Update(*d, *model);
  d = ctx.deployment_store.Get(id, user.id);
  if (!d) return SendDeploymentNotFound(res, id);
  SendJson(res, model ? 202 : 200, DeploymentResource(*d));
}

void Delete(ApiContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (!CheckVersion(req, res)) return;
  std::optional<User> user = Authenticate(ctx, req, res);
  if (!user) return;
  std::string id = req.matches[1];
  if (!ctx.deployment_store.Remove(id, user->id)) return SendDeploymentNotFound(res, id);
  ctx.deployments.Retire(id);
  res.status = 204;
}

// Reads what is left of the body and throws it away: answering before the client has sent it
// all would reset the connection under the answer. A multipart form has its own reader.
void Drain(const httplib::Request& req, const httplib::ContentReader& reader) {
  if (req.is_multipart_form_data()) {
    reader([](const httplib::MultipartFormData&) { return true; },
           [](const char*, size_t) { return true; });
  } else {
    reader([](const char*, size_t) { return true; });
  }
}

// The answer for a deployment that is known but has no ready process.
std::string NotReadyReason(const DeploymentRecord& d) {
  std::string why = d.state == kFailed  ? "failed: " + d.failure.value_or("")
                    : d.state == kReady ? "its process is being started again"
                                        : d.state;
  return "deployment '" + d.id + "' is not ready (" + why + ")";
}

// Errors in the route's protocol: WML's shape on /ml/v4, {"error": "..."} on /v2.
void Fail(bool v2, httplib::Response& res, int status, const std::string& code,
          const std::string& message) {
  if (v2) {
    SendJson(res, status, {{"error", message}});
  } else {
    SendError(res, status, code, message);
  }
}

// Whether the request's Content-Length is over the deployments' limit.
bool AnnouncesTooMuch(const ApiContext& ctx, const httplib::Request& req) {
  const std::string length = req.get_header_value("Content-Length");
  return !length.empty() &&
         std::strtoull(length.c_str(), nullptr, 10) > ctx.options.max_prediction_bytes;
}

void SendPredictionTooLarge(const ApiContext& ctx, const httplib::Request& req, bool v2,
                            httplib::Response& res) {
  const std::string length = req.get_header_value("Content-Length");
  Fail(v2, res, 413, "payload_too_large",
       "the request body" + (length.empty() ? "" : " (" + length + " bytes)") +
           " is larger than a deployment takes (" +
           std::to_string(ctx.options.max_prediction_bytes) +
           " bytes); send fewer rows per request");
}

// The caller, from the service's bearer token; otherwise 401 in the route's protocol.
std::optional<User> Caller(ApiContext& ctx, const httplib::Request& req, httplib::Response& res,
                           bool v2) {
  ApiError why;
  std::optional<User> user = BearerUser(ctx, req, &why);
  if (!user) Fail(v2, res, 401, why.code, why.message);
  return user;
}

// Sends `method path` with `body` to the deployment's process and passes its answer on.
void Forward(ApiContext& ctx, const ScoringTarget& target, const std::string& id, bool v2,
             const std::string& method, const std::string& path, const std::string& body,
             httplib::Response& res) {
  httplib::Client client("127.0.0.1", target.port);
  // cpp-httplib sends a request's headers and body in two writes: with Nagle's algorithm the
  // body would wait for the scorer's delayed ACK (40 ms on Linux) on every prediction.
  client.set_tcp_nodelay(true);
  client.set_connection_timeout(5);
  client.set_read_timeout(300);
  httplib::Headers headers = {{"Authorization", "Bearer " + target.token}};
  auto r = method == "GET" ? client.Get(path.c_str(), headers)
                           : client.Post(path.c_str(), headers, body, "application/json");
  if (!r && r.error() == httplib::Error::Connection) {
    // Not connected, so not sent: a process that an update has just replaced closes its
    // listener (what it was sent is answered); the request goes to the new one.
    std::optional<ScoringTarget> now = ctx.deployments.Target(id);
    if (now && now->port != target.port) {
      return Forward(ctx, *now, id, v2, method, path, body, res);
    }
  }
  if (!r) {
    ctx.deployments.Wake();
    Fail(v2, res, 503, "deployment_unavailable",
         "deployment '" + id + "' did not answer (" + httplib::to_string(r.error()) +
             "): its process ended or is being stopped; it is restarted unless it was "
             "deleted, try again");
    return;
  }
  ctx.deployments.Answered(id, target.port);
  if (v2 || (r->status >= 200 && r->status < 300)) {
    res.status = r->status;
    res.set_content(r->body, "application/json");
    return;
  }
  // The scorer's own WML errors ({"errors": [{"code", "message"}], "status_code"}) in the
  // service's one shape, with a trace; the deployment's message is kept as it is.
  json answer = json::parse(r->body, nullptr, false);
  std::vector<ApiError> errors;
  if (answer.is_object() && answer.contains("errors") && answer["errors"].is_array()) {
    for (const json& e : answer["errors"]) {
      if (!e.is_object() || !e.contains("message") || !e["message"].is_string()) continue;
      std::string code = e.contains("code") && e["code"].is_string() ? e["code"].get<std::string>()
                                                                     : "prediction_failed";
      errors.push_back({code, e["message"].get<std::string>(), ""});
    }
  }
  if (errors.empty()) {
    errors.push_back({"prediction_failed",
                      "deployment '" + id + "' answered " + std::to_string(r->status) + ": " +
                          r->body.substr(0, 1000),
                      ""});
  }
  const std::string trace = SendErrors(res, r->status, errors);
  if (r->status >= 500) {
    CADRE_LOG(ERROR) << "cadre server: deployment " << id << " answered " << r->status << ", trace "
                     << trace << ": " << errors.front().message;
  }
}

// POST /ml/v4/deployments/{id}/predictions (WML) and POST /v2/models/{id}/infer (KServe v2).
void Predict(ApiContext& ctx, const httplib::Request& req, httplib::Response& res,
             const httplib::ContentReader& reader, bool v2) {
  std::optional<User> user;
  if (v2 || CheckVersion(req, res)) user = Caller(ctx, req, res, v2);
  if (!user) return Drain(req, reader);
  const uint64_t limit = ctx.options.max_prediction_bytes;
  if (AnnouncesTooMuch(ctx, req)) {
    Drain(req, reader);
    return SendPredictionTooLarge(ctx, req, v2, res);
  }
  std::string id = req.matches[1];
  std::optional<DeploymentRecord> d = ctx.deployment_store.Get(id, user->id);
  if (!d) {
    Drain(req, reader);
    return Fail(v2, res, 404, "deployment_not_found",
                "deployment " + Quoted(id) + " does not exist");
  }
  if (req.is_multipart_form_data()) {  // curl -F
    Drain(req, reader);
    return Fail(v2, res, 415, "unsupported_media_type",
                "the body is a multipart form (curl -F); send the JSON payload itself with "
                "'Content-Type: application/json' (curl -d @FILE)");
  }
  std::string body;
  bool over = false;
  reader([&](const char* data, size_t n) {
    if (!over && body.size() + n <= limit) {
      body.append(data, n);
    } else {
      over = true;
      body.clear();
    }
    return true;
  });
  if (over) return SendPredictionTooLarge(ctx, req, v2, res);
  std::optional<ScoringTarget> target = ctx.deployments.Target(id);
  if (!target) return Fail(v2, res, 503, "deployment_not_ready", NotReadyReason(*d));
  std::string path =
      v2 ? "/v2/models/" + id + "/infer" : "/ml/v4/deployments/" + id + "/predictions";
  Forward(ctx, *target, id, v2, "POST", path, body, res);
}

// GET /v2/models/{id} and /v2/models/{id}/ready: the deployment's own answer.
void V2Get(ApiContext& ctx, const httplib::Request& req, httplib::Response& res,
           const std::string& suffix) {
  std::optional<User> user = Caller(ctx, req, res, true);
  if (!user) return;
  std::string id = req.matches[1];
  std::optional<DeploymentRecord> d = ctx.deployment_store.Get(id, user->id);
  if (!d) return Fail(true, res, 404, "", "deployment " + Quoted(id) + " does not exist");
  std::optional<ScoringTarget> target = ctx.deployments.Target(id);
  if (!target) return Fail(true, res, 503, "", NotReadyReason(*d));
  Forward(ctx, *target, id, true, "GET", "/v2/models/" + id + suffix, "", res);
}

}  // namespace

bool RefuseLargePrediction(const ApiContext& ctx, const httplib::Request& req,
                           httplib::Response& res) {
  static const std::regex wml(R"(/ml/v4/deployments/[^/]+/predictions)");
  static const std::regex v2(R"(/v2/models/[^/]+/infer)");
  if (req.method != "POST" || !AnnouncesTooMuch(ctx, req)) return false;
  const bool is_v2 = std::regex_match(req.path, v2);
  if (!is_v2 && !std::regex_match(req.path, wml)) return false;
  SendPredictionTooLarge(ctx, req, is_v2, res);
  return true;
}

void AddDeploymentRoutes(httplib::Server& server, ApiContext& ctx) {
  server.Post("/ml/v4/deployments", [&ctx](const httplib::Request& req, httplib::Response& res) {
    Create(ctx, req, res);
  });
  server.Get("/ml/v4/deployments",
             [&ctx](const httplib::Request& req, httplib::Response& res) { List(ctx, req, res); });
  server.Get(R"(/ml/v4/deployments/([^/]+))",
             [&ctx](const httplib::Request& req, httplib::Response& res) { Get(ctx, req, res); });
  server.Patch(
      R"(/ml/v4/deployments/([^/]+))",
      [&ctx](const httplib::Request& req, httplib::Response& res) { Patch(ctx, req, res); });
  server.Delete(
      R"(/ml/v4/deployments/([^/]+))",
      [&ctx](const httplib::Request& req, httplib::Response& res) { Delete(ctx, req, res); });
  server.Post(
      R"(/ml/v4/deployments/([^/]+)/predictions)",
      [&ctx](const httplib::Request& req, httplib::Response& res,
             const httplib::ContentReader& reader) { Predict(ctx, req, res, reader, false); });
  // The Open Inference Protocol (KServe v2) for the same deployments, the model's name being the
  // deployment's id; the service's bearer token, no version parameter.
  server.Post(
      R"(/v2/models/([^/]+)/infer)",
      [&ctx](const httplib::Request& req, httplib::Response& res,
             const httplib::ContentReader& reader) { Predict(ctx, req, res, reader, true); });
  // The server's liveness and readiness, without a token (as cadre-serve's own): it answers.
  server.Get("/v2/health/live", [](const httplib::Request&, httplib::Response& res) {
    SendJson(res, 200, {{"live", true}});
  });
  server.Get("/v2/health/ready", [](const httplib::Request&, httplib::Response& res) {
    SendJson(res, 200, {{"ready", true}});
  });
  server.Get(R"(/v2/models/([^/]+))", [&ctx](const httplib::Request& req, httplib::Response& res) {
    V2Get(ctx, req, res, "");
  });
  server.Get(R"(/v2/models/([^/]+)/ready)",
             [&ctx](const httplib::Request& req, httplib::Response& res) {
               V2Get(ctx, req, res, "/ready");
             });
}

}  // namespace cadre::service
