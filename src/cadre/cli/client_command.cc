// The job service's terminal client:
//
//   cadre submit job.yaml            zips the manifest's folder, uploads both, prints the id
//   cadre jobs list                  your trainings: id, state, name, created
//   cadre jobs get ID                one training's resource (JSON)
//   cadre jobs logs [-f] ID          its log; -f follows it until the job ends (through a
//                                    restart of the server)
//   cadre jobs cancel ID [--hard-delete]
//   cadre deploy TRAINING_ID [--name N] [--update DEPLOYMENT_ID]  deploys the completed
//                                    training's saved model (or serves it from an existing
//                                    deployment); prints the deployment's id once it is ready
//   cadre score DEPLOYMENT_ID input.json
//                                    WML predictions of that deployment for the payload in the
//                                    file ({"input_data": [...]}; - reads stdin); prints them
//
// The server and token come from --server/--token or CADRE_SERVER/CADRE_TOKEN (default server
// http://127.0.0.1:8900). Exit codes: 0 done, 1 the server refused or could not be reached
// (its error printed), 2 bad usage.
#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "cadre/base/printable.h"
#include "cadre/cli/commands.h"
#include "cadre/cli/usage.h"
#include "cadre/service/resource_id.h"
#include "cadre/service/service.h"
#include "cadre/service/zip_folder.h"

namespace cadre::cli {
namespace {

using nlohmann::json;
constexpr char kVersion[] = "version=2020-09-01";

struct ClientFlags {
  std::string server, token;
};

struct Connection {
  std::string server;
  std::unique_ptr<httplib::Client> client;
  httplib::Headers headers;
};

// What went wrong on the way to the server, in words a user can act on.
std::string TransportError(const Connection& c, httplib::Error error) {
  std::string what;
  switch (error) {
    case httplib::Error::Connection:
      what = "nothing answers there (is `cadre server` running? set --server or CADRE_SERVER)";
      break;
    case httplib::Error::ConnectionTimeout:
      what = "the connection timed out";
      break;
    case httplib::Error::Read:
      what = "the connection closed before the answer was complete (the server stopped?)";
      break;
    case httplib::Error::Write:
      what = "the connection closed while the request was sent (the server stopped?)";
      break;
    default:
      what = httplib::to_string(error);
  }
  return "cannot reach the server " + c.server + ": " + what;
}

// A server started in the background a moment ago (`cadre server ... &` and the next line a
// client command, as in the README) may not listen yet: while nothing answers, the client waits
// up to kStartWait, saying so, before the request. Only a refused connection waits: the request
// has not reached any server, so nothing is sent twice.
constexpr auto kStartWait = std::chrono::seconds(10);

void WaitForServer(const char* who, Connection& c) {
  const auto until = std::chrono::steady_clock::now() + kStartWait;
  bool said = false;
  for (;;) {
    auto r = c.client->Get("/v2/health/live");
    if (r || r.error() != httplib::Error::Connection || std::chrono::steady_clock::now() >= until) {
      return;
    }
    if (!said) {
      std::cerr << who << ": nothing answers at " << c.server << " yet; waiting up to "
                << kStartWait.count() << " s for the server to start\n";
      said = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// Why `url` is not a server's address (http://HOST or http://HOST:PORT, PORT 1..65535, an
// IPv6 HOST in brackets, nothing after but slashes); "" when it is one.
std::string ServerUrlProblem(const std::string& url) {
  const std::string wrong = "must be http://HOST:PORT, got " + QuotedText(url);
  if (!url.starts_with("http://")) return wrong;
  std::string rest = url.substr(7);
  while (rest.ends_with("/")) rest.pop_back();
  size_t host_end = 0;
  if (rest.starts_with("[")) {
    host_end = rest.find(']');
    if (host_end == std::string::npos || host_end == 1) return wrong;
    ++host_end;
  } else {
    host_end = rest.find(':');
    if (host_end == std::string::npos) host_end = rest.size();
    if (host_end == 0) return wrong;
  }
  const std::string host = rest.substr(0, host_end);
  if (host.find_first_of("/?#@ ") != std::string::npos) return wrong;
  if (host_end == rest.size()) return "";
  if (rest[host_end] != ':') return wrong;
  const std::string port = rest.substr(host_end + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos) {
    return wrong;
  }
  if (const int number = std::stoi(port); number < 1 || number > 65535) {
    return "port must be 1..65535, got " + QuotedText(url);
  }
  return "";
}

bool Connect(const ClientFlags& flags, const char* who, Connection* c) {
  // An empty --server or --token is refused while parsing; an empty variable is a mistake too,
  // not "unset": it is named rather than quietly replaced by the default.
  std::string server = flags.server;
  if (server.empty()) {
    const char* env = std::getenv("CADRE_SERVER");
    server = env ? env : "http://127.0.0.1:" + std::to_string(service::kDefaultPort);
    if (std::string problem = ServerUrlProblem(server); !problem.empty()) {
      std::cerr << who << ": CADRE_SERVER " << problem << " (unset it for the default)\n";
      return false;
    }
  }
  std::string token = flags.token;
  if (token.empty()) {
    const char* env = std::getenv("CADRE_TOKEN");
    if (env != nullptr && *env == '\0') {
      std::cerr << who
                << ": CADRE_TOKEN is set but empty: set it to your token (from `cadre "
                   "users add`) or pass --token\n";
      return false;
    }
    token = env ? env : "";
  }
  if (token.empty()) {
    std::cerr << who << ": no token: pass --token or set CADRE_TOKEN (from `cadre users add`)\n";
    return false;
  }
  while (server.ends_with("/")) server.pop_back();
  c->server = server;
  c->client = std::make_unique<httplib::Client>(server);
  c->client->set_tcp_nodelay(true);  // a request's body is not held for a delayed ACK
  c->client->set_connection_timeout(10);
  c->client->set_read_timeout(3600);
  c->headers = {{"Authorization", "Bearer " + token}};
  WaitForServer(who, *c);
  return true;
}

// An id as one URL component (a path segment or a query value): anything but unreserved
// characters is percent-encoded, so that an id such as "../x?y" cannot reach another route.
std::string UrlComponent(const std::string& id) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char ch : id) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      out += static_cast<char>(ch);
    } else {
      out += '%';
      out += kHex[ch >> 4];
      out += kHex[ch & 15];
    }
  }
  return out;
}

// Prints the server's errors (or the transport's); returns 1.
int Report(const char* who, const Connection& c, const httplib::Result& r) {
  if (!r) {
    std::cerr << who << ": " << TransportError(c, r.error()) << "\n";
    return 1;
  }
  json body = json::parse(r->body, nullptr, false);
  if (body.is_object() && body.contains("errors") && body["errors"].is_array()) {
    for (const auto& e : body["errors"]) {
      std::cerr << who << ": " << e.value("message", "error") << " (" << e.value("code", "")
                << ", HTTP " << r->status << ")\n";
    }
  } else {
    std::cerr << who << ": HTTP " << r->status << ": " << r->body << "\n";
  }
  return 1;
}

int Submit(const ClientFlags& flags, const std::string& manifest) {
  const char* who = "cadre submit";
  std::error_code ec;
  if (manifest.empty()) {
    std::cerr << who << ": the argument manifest is empty; give the job's manifest (.yaml)\n";
    return 2;
  }
  if (!std::filesystem::is_regular_file(manifest, ec)) {
    std::cerr << who << ": " << manifest
              << (std::filesystem::is_directory(manifest, ec)
                      ? " is a folder; give its manifest (cadre submit FOLDER/job.yaml)"
                      : " does not exist or is not a file; give the job's manifest (.yaml)")
              << "\n";
    return 2;
  }
  std::ifstream in(manifest);
  if (!in) {
    std::cerr << who << ": cannot read " << manifest << "\n";
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();
  std::string zip;
  std::filesystem::path folder = std::filesystem::absolute(manifest).parent_path();
  Status st = service::ZipFolder(folder, 256ull << 20, &zip);
  if (!st.ok()) {
    std::cerr << who << ": " << st.message() << "\n";
    return 1;
  }
  Connection c;
  if (!Connect(flags, who, &c)) return 2;
  httplib::MultipartFormDataItems items = {
      {"manifest", text.str(), "manifest.yaml", "application/x-yaml"},
      {"model_definition", zip, "code.zip", "application/zip"}};
  auto r = c.client->Post(std::string("/ml/v4/trainings?") + kVersion, c.headers, items);
  if (!r || r->status != 201) return Report(who, c, r);
  json body = json::parse(r->body);
  std::cout << "cadre submit: " << body["entity"]["status"]["state"].get<std::string>()
            << "; follow it with: cadre jobs logs -f " << body["metadata"]["id"].get<std::string>()
            << "\n"
            << body["metadata"]["id"].get<std::string>() << "\n";
  return 0;
}

// Every training, newest first: the server gives at most 200 a page, so follow each page's
// `next` link to the last.
int List(const ClientFlags& flags) {
  const char* who = "cadre jobs list";
  Connection c;
  if (!Connect(flags, who, &c)) return 2;
  std::string path = std::string("/ml/v4/trainings?limit=200&") + kVersion;
  std::set<std::string> seen;
  while (seen.insert(path).second) {
    auto r = c.client->Get(path, c.headers);
    if (!r || r->status != 200) return Report(who, c, r);
    json body = json::parse(r->body, nullptr, false);
    if (!body.is_object() || !body.contains("resources") || !body["resources"].is_array()) {
      std::cerr << who << ": the server's answer to GET " << path
                << " is not a list of trainings\n";
      return 1;
    }
    // Once the server has answered: a refused token prints no list, not even its header.
    if (seen.size() == 1) std::printf("%-36s %-10s %-24s %s\n", "ID", "STATE", "CREATED", "NAME");
    for (const auto& t : body["resources"]) {
      const json& meta = t.value("metadata", json::object());
      const json& status = t.value("entity", json::object()).value("status", json::object());
      std::printf("%-36s %-10s %-24s %s\n", meta.value("id", "?").c_str(),
                  status.value("state", "?").c_str(), meta.value("created_at", "?").c_str(),
                  meta.value("name", "").c_str());
    }
    const json next = body.value("next", json::object());
    if (!next.is_object() || !next.contains("href") || !next["href"].is_string()) return 0;
    path = next["href"].get<std::string>();
  }
  std::cerr << who << ": the server's next page repeats " << path << "; stopped\n";
  return 1;
}

// An id that the server could never have given (`../../etc`) is named here, before any request:
// true (and the message printed) when `id` is not the shape of a `kind`'s id.
bool BadId(const char* who, const std::string& id, const char* kind) {
  Status st = service::CheckResourceId(id, kind);
  if (!st.ok()) std::cerr << who << ": " << st.message() << "\n";
  return !st.ok();
}

int Get(const ClientFlags& flags, const std::string& id) {
  Connection c;
  if (!Connect(flags, "cadre jobs get", &c)) return 2;
  auto r = c.client->Get("/ml/v4/trainings/" + UrlComponent(id) + "?" + kVersion, c.headers);
  if (!r || r->status != 200) return Report("cadre jobs get", c, r);
  std::cout << json::parse(r->body).dump(2) << "\n";
  return 0;
}

// With --follow, a stream that breaks (the server restarts) is taken up again after the last
// whole line printed, for as long as kReconnectFor the server cannot be reached.
constexpr auto kReconnectFor = std::chrono::seconds(60);

int Logs(const ClientFlags& flags, const std::string& id, bool follow) {
  Connection c;
  if (!Connect(flags, "cadre jobs logs", &c)) return 2;
  const std::string path =
      "/ml/v4/trainings/" + UrlComponent(id) + "/logs?" + kVersion + (follow ? "&follow=true" : "");
  int64_t lines = 0;    // whole lines printed
  std::string partial;  // the start of the next line
  bool streamed = false;
  auto gone_since = std::chrono::steady_clock::now();
  for (;;) {
    int status = 0;
    std::string error_body;
    partial.clear();
    auto r = c.client->Get(
        path + (lines > 0 ? "&since=" + std::to_string(lines) : ""), c.headers,
        [&](const httplib::Response& res) {
          status = res.status;
          return true;
        },
        [&](const char* data, size_t n) {
          if (status != 200) {
            error_body.append(data, n);
            return true;
          }
          partial.append(data, n);
          const size_t end = partial.rfind('\n');
          if (end != std::string::npos) {
            std::cout.write(partial.data(), static_cast<std::streamsize>(end + 1));
            std::cout.flush();
            lines += std::count(partial.begin(), partial.begin() + end + 1, '\n');
            partial.erase(0, end + 1);
          }
          return true;
        });
    if (r && r->status == 200) {
      std::cout << partial << std::flush;  // a last line without its newline
      return 0;
    }
    streamed = streamed || status == 200;
    const bool broke = !r && follow && streamed;
    if (!broke || std::chrono::steady_clock::now() - gone_since > kReconnectFor) {
      if (r) r->body = error_body;
      return Report("cadre jobs logs", c, r);
    }
    if (status == 200) {
      std::cerr << "cadre jobs logs: " << TransportError(c, r.error()) << "; trying again\n";
      gone_since = std::chrono::steady_clock::now();
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

int Cancel(const ClientFlags& flags, const std::string& id, bool hard) {
  Connection c;
  if (!Connect(flags, "cadre jobs cancel", &c)) return 2;
  auto r = c.client->Delete(
      "/ml/v4/trainings/" + UrlComponent(id) + "?" + kVersion + (hard ? "&hard_delete=true" : ""),
      c.headers);
  if (!r || r->status != 204) return Report("cadre jobs cancel", c, r);
  std::cout << "cadre jobs cancel: " << id << (hard ? " canceled and deleted" : " canceled")
            << "\n";
  return 0;
}

// The training's one stored model; errors say why there is none.
int ModelOfTraining(Connection& c, const char* who, const std::string& training_id,
                    std::string* model_id, std::string* name) {
  auto r =
      c.client->Get("/ml/v4/trainings/" + UrlComponent(training_id) + "?" + kVersion, c.headers);
  if (!r || r->status != 200) return Report(who, c, r);
  json training = json::parse(r->body);
  std::string state = training["entity"]["status"].value("state", "");
  *name = training["metadata"].value("name", training_id);
  if (state != "completed") {
    std::cerr << who << ": training " << training_id << " is " << state << "; "
              << (state == "failed" || state == "canceled"
                      ? "only a completed training's model can be deployed"
                      : "deploy it once it has completed (cadre jobs logs -f " + training_id + ")")
              << "\n";
    return 1;
  }
  r = c.client->Get("/ml/v4/models?training_id=" + UrlComponent(training_id) + "&" + kVersion,
                    c.headers);
  if (!r || r->status != 200) return Report(who, c, r);
  json models = json::parse(r->body)["resources"];
  if (models.empty()) {
    std::cerr << who << ": training " << training_id
              << " completed without a saved model: its script did not call "
                 "cadre.save_model(model, example_input) (docs/serving.md)\n";
    return 1;
  }
  *model_id = models[0]["metadata"]["id"].get<std::string>();
  return 0;
}

int Deploy(const ClientFlags& flags, const std::string& training_id, std::string name,
           double timeout_s, const std::string& update) {
  const char* who = "cadre deploy";
  Connection c;
  if (!Connect(flags, who, &c)) return 2;
  std::string model_id, training_name;
  if (int rc = ModelOfTraining(c, who, training_id, &model_id, &training_name); rc != 0) {
    return rc;
  }
  std::string id = update;
  if (update.empty()) {
    if (name.empty()) name = training_name;
    json request = {{"name", name}, {"online", json::object()}, {"asset", {{"id", model_id}}}};
    auto r = c.client->Post(std::string("/ml/v4/deployments?") + kVersion, c.headers,
                            request.dump(), "application/json");
    if (!r || r->status != 201) return Report(who, c, r);
    id = json::parse(r->body)["metadata"]["id"].get<std::string>();
    std::cerr << who << ": deployment " << id << " of model " << model_id << " is initializing\n";
  } else {
    // The deployment serves the new model once its process is ready; the old one answers
    // until then.
    json patch =
        json::array({{{"op", "replace"}, {"path", "/asset"}, {"value", {{"id", model_id}}}}});
    if (!name.empty()) patch.push_back({{"op", "replace"}, {"path", "/name"}, {"value", name}});
    auto r = c.client->Patch("/ml/v4/deployments/" + UrlComponent(id) + "?" + kVersion, c.headers,
                             patch.dump(), "application/json");
    if (!r || r->status != 202) return Report(who, c, r);
    std::cerr << who << ": deployment " << id << " is being updated to model " << model_id << "\n";
  }
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  std::string state;
  for (;;) {
    auto r = c.client->Get("/ml/v4/deployments/" + UrlComponent(id) + "?" + kVersion, c.headers);
    if (!r || r->status != 200) return Report(who, c, r);
    json entity = json::parse(r->body)["entity"];
    json status = entity["status"];
    state = status.value("state", "");
    const bool serves_it = entity["asset"].value("id", "") == model_id;
    if (state == "ready" && serves_it) break;
    const std::string said = status.contains("message") ? status["message"].value("text", "") : "";
    if (state == "ready" && said.rfind("the update to model " + model_id + " failed", 0) == 0) {
      std::cerr << who << ": deployment " << id << " was not updated: " << said << "\n";
      return 1;
    }
    if (state == "failed") {
      std::string why = "no reason given";
      if (status.contains("failure")) why = status["failure"]["errors"][0].value("message", why);
      std::cerr << who << ": deployment " << id << " failed: " << why << "\n";
      return 1;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::cerr << who << ": deployment " << id << " is still " << state << " after " << timeout_s
                << " s; follow it with GET /ml/v4/deployments/" << id << "\n";
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::cerr << who << ": ready; score it with: cadre score " << id << " input.json\n";
  std::cout << id << "\n";
  return 0;
}

int Score(const ClientFlags& flags, const std::string& id, const std::string& input) {
  const char* who = "cadre score";
  std::stringstream text;
  if (input == "-") {
    text << std::cin.rdbuf();
  } else {
    // A folder opens, and reads as nothing: it was sent as an empty payload.
    if (input.empty() || std::filesystem::is_directory(input)) {
      std::cerr << who << ": the argument input " << (input.empty() ? "is empty" : "is a folder")
                << "; give the payload's file, or - for stdin\n";
      return 2;
    }
    std::ifstream in(input);
    if (!in) {
      std::cerr << who << ": cannot read " << input << "\n";
      return 2;
    }
    text << in.rdbuf();
  }
  Connection c;
  if (!Connect(flags, who, &c)) return 2;
  auto r = c.client->Post("/ml/v4/deployments/" + UrlComponent(id) + "/predictions?" + kVersion,
                          c.headers, text.str(), "application/json");
  if (!r || r->status != 200) return Report(who, c, r);
  json body = json::parse(r->body, nullptr, false);
  std::cout << (body.is_discarded() ? r->body : body.dump(2)) << "\n";
  return 0;
}

void AddConnectionFlags(CLI::App* cmd, ClientFlags* flags) {
  cmd->add_option("--server", flags->server,
                  "The server's URL (default $CADRE_SERVER, else http://127.0.0.1:" +
                      std::to_string(service::kDefaultPort) + ")")
      ->type_name(kUrlType)
      ->check(CLI::Validator(ServerUrlProblem, ""));
  cmd->add_option("--token", flags->token, "Your bearer token (default $CADRE_TOKEN)")
      ->type_name(kTokenType);
}

}  // namespace

void AddClientCommands(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<ClientFlags>();
  auto manifest = std::make_shared<std::string>();
  auto* submit = app.add_subcommand(
      "submit", "Submit a job to a cadre server: uploads the manifest and its folder's code");
  submit->add_option("manifest", *manifest, "The job's manifest (.yaml)")->required();
  AddConnectionFlags(submit, flags.get());
  submit->callback([=] { *exit_code = Submit(*flags, *manifest); });

  auto* jobs = app.add_subcommand("jobs", "Your jobs on a cadre server: list, get, logs, cancel");
  jobs->require_subcommand(1);
  AddConnectionFlags(jobs, flags.get());
  auto id = std::make_shared<std::string>();
  auto follow = std::make_shared<bool>(false);
  auto hard = std::make_shared<bool>(false);
  auto* list = jobs->add_subcommand("list", "Your trainings, newest first");
  list->callback([=] { *exit_code = List(*flags); });
  auto* get = jobs->add_subcommand("get", "One training's resource, as JSON");
  get->add_option("id", *id, "The training's id")->required();
  get->callback(
      [=] { *exit_code = BadId("cadre jobs get", *id, "training") ? 2 : Get(*flags, *id); });
  auto* logs = jobs->add_subcommand("logs", "A training's log");
  logs->add_option("id", *id, "The training's id")->required();
  logs->add_flag("-f,--follow", *follow, "Keep printing lines as they are written, to the end");
  logs->callback([=] {
    *exit_code = BadId("cadre jobs logs", *id, "training") ? 2 : Logs(*flags, *id, *follow);
  });
  auto* cancel = jobs->add_subcommand("cancel", "Cancel a training (stops its learners)");
  cancel->add_option("id", *id, "The training's id")->required();
  cancel->add_flag("--hard-delete", *hard, "Also delete its record and files");
  cancel->callback([=] {
    *exit_code = BadId("cadre jobs cancel", *id, "training") ? 2 : Cancel(*flags, *id, *hard);
  });
  for (auto* sub : {list, get, logs, cancel}) AddConnectionFlags(sub, flags.get());

  auto training = std::make_shared<std::string>();
  auto name = std::make_shared<std::string>();
  auto timeout = std::make_shared<double>(300);
  auto update = std::make_shared<std::string>();
  auto* deploy =
      app.add_subcommand("deploy",
                         "Deploy a completed training's saved model for online scoring; prints the "
                         "deployment's id once it is ready");
  deploy->add_option("training_id", *training, "The training's id")->required();
  deploy->add_option("--name", *name, "The deployment's name (default: the training's)")
      ->type_name(kNameType);
  deploy->add_option("--timeout", *timeout, "Seconds to wait for it to be ready (default 300)")
      ->check(NumberIn(0.1, 1e6));
  deploy
      ->add_option("--update", *update,
                   "Serve the model from this existing deployment instead of a new one (its "
                   "current model answers until the new one is ready)")
      ->type_name(kIdType);
  AddConnectionFlags(deploy, flags.get());
  deploy->callback([=] {
    *exit_code = BadId("cadre deploy", *training, "training") ||
                         (!update->empty() && BadId("cadre deploy", *update, "deployment"))
                     ? 2
                     : Deploy(*flags, *training, *name, *timeout, *update);
  });

  auto deployment = std::make_shared<std::string>();
  auto input = std::make_shared<std::string>();
  auto* score = app.add_subcommand(
      "score",
      "Predictions of a deployment for a WML payload ({\"input_data\": [{\"fields\": "
      "[...], \"values\": [[...]]}]}) read from a file (- for stdin)");
  score->add_option("deployment_id", *deployment, "The deployment's id")->required();
  score->add_option("input", *input, "The payload's file, or -")->required();
  AddConnectionFlags(score, flags.get());
  score->callback([=] {
    *exit_code =
        BadId("cadre score", *deployment, "deployment") ? 2 : Score(*flags, *deployment, *input);
  });
}

}  // namespace cadre::cli
