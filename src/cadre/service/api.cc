#include "cadre/service/api.h"

#include <algorithm>
#include <charconv>
#include <chrono>

#include "cadre/base/printable.h"
#include "cadre/launch/problems.h"

namespace cadre::service {

void SendJson(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  // Text from a request (a path, a parameter, a manifest) may hold bytes that are not UTF-8;
  // dump() would throw on them, and an answer must never fail to be written.
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                  "application/json");
}

std::string SendErrors(httplib::Response& res, int status, const std::vector<ApiError>& errors) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& e : errors) {
    nlohmann::json item = {{"code", e.code}, {"message", e.message}};
    if (!e.target.empty()) item["target"] = {{"type", "field"}, {"name", e.target}};
    list.push_back(item);
  }
  std::string trace = RandomHex(16);
  SendJson(res, status, {{"trace", trace}, {"errors", list}});
  return trace;
}

std::string SendError(httplib::Response& res, int status, const std::string& code,
                      const std::string& message, const std::string& target) {
  return SendErrors(res, status, {ApiError{code, message, target}});
}

void CheckFields(const nlohmann::json& object, const std::string& path,
                 const std::vector<std::string_view>& known, std::vector<ApiError>* errors) {
  if (!object.is_object()) return;
  for (const auto& [key, value] : object.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string where = path.empty() ? key : path + "." + key;
    std::string message = where + ": unknown field";
    std::string hint = launch::DidYouMean(key, known);
    if (!hint.empty()) {
      message += " (did you mean '" + hint + "'?)";
    } else {
      message += " (known here: ";
      for (size_t i = 0; i < known.size(); ++i) message += (i ? ", " : "") + std::string(known[i]);
      message += ")";
    }
    errors->push_back({"invalid_parameter", message, where});
  }
}

std::optional<User> BearerUser(ApiContext& ctx, const httplib::Request& req, ApiError* why) {
  std::string header = req.get_header_value("Authorization");
  const std::string bearer = "Bearer ";
  if (header.empty()) {
    *why = {"authorization_rejected",
            "missing Authorization header; send 'Authorization: Bearer <token>' (a token "
            "comes from `cadre users add`)",
            ""};
    return std::nullopt;
  }
  std::optional<User> user;
  if (header.starts_with(bearer)) user = ctx.accounts.Authenticate(header.substr(bearer.size()));
  if (!user) *why = {"authentication_failed", "the bearer token is not valid", ""};
  return user;
}

std::optional<User> Authenticate(ApiContext& ctx, const httplib::Request& req,
                                 httplib::Response& res) {
  ApiError why;
  std::optional<User> user = BearerUser(ctx, req, &why);
  if (!user) SendError(res, 401, why.code, why.message);
  return user;
}

std::optional<TrainingRecord> CallersTraining(ApiContext& ctx, const httplib::Request& req,
                                              httplib::Response& res) {
  if (!CheckVersion(req, res)) return std::nullopt;
  std::optional<User> user = Authenticate(ctx, req, res);
  if (!user) return std::nullopt;
  std::string id = req.matches[1];
  std::optional<TrainingRecord> record = ctx.trainings.Get(id, user->id);
  if (!record) SendTrainingNotFound(res, id);
  return record;
}

void SendTrainingNotFound(httplib::Response& res, const std::string& id) {
  SendError(res, 404, "training_not_found", "training " + Quoted(id) + " does not exist", "id");
}

bool CheckVersion(const httplib::Request& req, httplib::Response& res) {
  if (!req.has_param("version")) {
    SendError(res, 400, "missing_version",
              "missing query parameter 'version' (a date, e.g. version=2020-09-01)", "version");
    return false;
  }
  std::string v = req.get_param_value("version");
  bool ok = v.size() == 10 && v[4] == '-' && v[7] == '-';
  for (size_t i = 0; ok && i < v.size(); ++i) {
    if (i != 4 && i != 7) ok = v[i] >= '0' && v[i] <= '9';
  }
  if (ok) {  // a calendar date: 2020-02-30 and 2020-13-01 are not versions
    const std::chrono::year_month_day date{std::chrono::year{std::stoi(v.substr(0, 4))},
                                           std::chrono::month{unsigned(std::stoi(v.substr(5, 2)))},
                                           std::chrono::day{unsigned(std::stoi(v.substr(8, 2)))}};
    ok = date.ok();
  }
  if (!ok) {
    SendError(res, 400, "invalid_version",
              "query parameter 'version' must be a date YYYY-MM-DD, got " + Quoted(v), "version");
  }
  return ok;
}

bool IntParam(const httplib::Request& req, httplib::Response& res, const std::string& name,
              int64_t fallback, int64_t min, int64_t max, int64_t* out) {
  if (!req.has_param(name.c_str())) {
    *out = fallback;
    return true;
  }
  std::string text = req.get_param_value(name.c_str());
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    SendError(res, 400, "invalid_parameter",
              "query parameter '" + name + "' must be an integer from " + std::to_string(min) +
                  " to " + std::to_string(max) + ", got " + Quoted(text),
              name);
    return false;
  }
  *out = value;
  return true;
}

}  // namespace cadre::service
