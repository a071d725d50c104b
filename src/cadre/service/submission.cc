#include "cadre/service/submission.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string_view>
#include <utility>

#include "cadre/base/printable.h"
#include "cadre/launch/manifest.h"
#include "cadre/launch/problems.h"
#include "cadre/service/scheduler.h"

namespace cadre::service {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Manifest paths and the WML body fields they come from, longest first.
const std::pair<const char*, const char*> kFieldMap[] = {
    {"execution.compute_configuration.nodes", "hardware_spec.nodes"},
    {"execution.compute_configuration.name", "hardware_spec.name"},
    {"execution.compute_configuration", "hardware_spec"},
    {"execution.command", "model_definition.command"},
    {"execution", "model_definition"},
    {"framework.version", "software_spec.version"},
    {"framework.name", "software_spec.name"},
    {"framework", "software_spec"},
    {"parameter_servers", "hardware_spec.parameter_servers"},
    {"training_data_reference", "training_data_references[0]"},
};

// The fields of a WML v4 training body this server reads, and those it accepts as WML clients
// send them but does not act on (echoed in the training's resource): description, tags, custom,
// space_id, project_id, results_reference (results always go to the job directory), and in a
// data reference its id, connection and schema (an fs folder needs neither). Anything else is
// refused, naming the field: a misspelled field silently ignored would run another job.
const std::vector<std::string_view> kBodyFields = {"name",
                                                   "model_definition",
                                                   "hardware_spec",
                                                   "software_spec",
                                                   "training_data_references",
                                                   "description",
                                                   "tags",
                                                   "custom",
                                                   "space_id",
                                                   "project_id",
                                                   "results_reference"};
// WML fields for kinds of training this server does not run.
const std::vector<std::string_view> kUnsupportedFields = {
    "experiment", "pipeline", "federated_learning", "test_data_references"};

// Unknown and unsupported fields at every level the body is read from, and the types of the
// fields accepted without being acted on.
void CheckBodyFields(const json& body, std::vector<ApiError>* errors) {
  json known_body = json::object();
  for (const auto& [key, value] : body.items()) {
    if (std::find(kUnsupportedFields.begin(), kUnsupportedFields.end(), key) ==
        kUnsupportedFields.end()) {
      known_body[key] = value;
      continue;
    }
    errors->push_back({"invalid_parameter",
                       key + ": not supported by this server, which runs a command on its "
                             "learners (model_definition.command); leave the field out",
                       key});
  }
  CheckFields(known_body, "", kBodyFields, errors);
  auto expect = [&](const char* key, bool ok, const char* what) {
    if (!body.contains(key) || ok) return;
    errors->push_back({"invalid_parameter", std::string(key) + ": expected " + what, key});
  };
  auto strings = [](const json& v) {
    return v.is_array() &&
           std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string(); });
  };
  for (const char* key : {"description", "space_id", "project_id"}) {
    expect(key, body.contains(key) && body[key].is_string(), "a string");
  }
  expect("tags", body.contains("tags") && strings(body["tags"]), "a list of strings");
  for (const char* key : {"custom", "results_reference"}) {
    expect(key, body.contains(key) && body[key].is_object(), "an object");
  }
  if (body.contains("model_definition")) {
    const json& def = body["model_definition"];
    // WML nests the specs in model_definition; this server reads them from the body's top.
    for (const char* key : {"hardware_spec", "software_spec"}) {
      if (!def.is_object() || !def.contains(key)) continue;
      errors->push_back({"invalid_parameter",
                         std::string("model_definition.") + key + ": give " + key +
                             " at the top level of the body, beside model_definition",
                         std::string("model_definition.") + key});
    }
    json rest = def.is_object() ? def : json::object();
    rest.erase("hardware_spec");
    rest.erase("software_spec");
    CheckFields(rest, "model_definition", {"command"}, errors);
  }
  if (body.contains("hardware_spec")) {
    CheckFields(body["hardware_spec"], "hardware_spec", {"name", "nodes", "parameter_servers"},
                errors);
  }
  if (body.contains("software_spec")) {
    CheckFields(body["software_spec"], "software_spec", {"name", "version"}, errors);
  }
  if (body.contains("training_data_references") && body["training_data_references"].is_array()) {
    const json& refs = body["training_data_references"];
    for (size_t i = 0; i < refs.size(); ++i) {
      const std::string path = "training_data_references[" + std::to_string(i) + "]";
      CheckFields(refs[i], path, {"type", "location", "id", "connection", "schema"}, errors);
      if (refs[i].is_object() && refs[i].contains("location")) {
        CheckFields(refs[i]["location"], path + ".location", {"path"}, errors);
      }
    }
  }
}

bool BodyToManifest(const json& body, json* manifest, std::vector<ApiError>* errors) {
  CheckBodyFields(body, errors);
  auto object_field = [&](const char* name) -> const json* {
    if (!body.contains(name)) return nullptr;
    const json& value = body[name];
    if (!value.is_object()) {
      errors->push_back({"invalid_parameter", std::string(name) + " must be an object", name});
      return nullptr;
    }
    return &value;
  };
  // The manifest reads any YAML scalar as text, so a JSON number or list where text belongs
  // would pass as its spelling ("command": 5 runs `5`): text fields are checked here.
  auto text_field = [&](const json& parent, const char* key, const std::string& path) -> bool {
    if (!parent.contains(key)) return false;
    if (parent[key].is_string()) return true;
    errors->push_back({"invalid_parameter",
                       path + ": expected a string, got " + std::string(parent[key].type_name()),
                       path});
    return false;
  };
  json& m = *manifest;
  m = json::object();
  if (text_field(body, "name", "name")) m["name"] = body["name"];
  if (const json* def = object_field("model_definition")) {
    if (text_field(*def, "command", "model_definition.command")) {
      m["execution"]["command"] = (*def)["command"];
    }
  }
  if (const json* hw = object_field("hardware_spec")) {
    if (text_field(*hw, "name", "hardware_spec.name")) {
      m["execution"]["compute_configuration"]["name"] = (*hw)["name"];
    }
    // The manifest takes a null as a field left out (its default): here it would run a job
    // other than the one the body shows, so it is refused.
    auto number_field = [&](const char* key) -> const json* {
      if (!hw->contains(key)) return nullptr;
      if (!(*hw)[key].is_null()) return &(*hw)[key];
      const std::string path = std::string("hardware_spec.") + key;
      errors->push_back({"invalid_parameter", path + ": expected an integer, got null", path});
      return nullptr;
    };
    if (const json* nodes = number_field("nodes")) {
      m["execution"]["compute_configuration"]["nodes"] = *nodes;
    }
    if (const json* servers = number_field("parameter_servers")) m["parameter_servers"] = *servers;
  }
  if (const json* sw = object_field("software_spec")) {
    if (text_field(*sw, "name", "software_spec.name")) m["framework"]["name"] = (*sw)["name"];
    if (text_field(*sw, "version", "software_spec.version")) {
      m["framework"]["version"] = (*sw)["version"];
    }
  }
  if (body.contains("training_data_references")) {
    const json& refs = body["training_data_references"];
    if (!refs.is_array() || refs.size() > 1) {
      errors->push_back({"invalid_parameter",
                         "training_data_references must be a list of at most one reference",
                         "training_data_references"});
    } else if (refs.size() == 1) {
      const json& ref = refs[0];
      // value() would throw on a "type" that is not a string (a 500): read it by hand.
      std::string type;
      if (ref.is_object()) {
        type = !ref.contains("type")     ? "fs"
               : ref["type"].is_string() ? ref["type"].get<std::string>()
                                         : "";
      }
      if (!ref.is_object() || type != "fs" || !ref.contains("location") ||
          !ref["location"].is_object() || !ref["location"].contains("path") ||
          !ref["location"]["path"].is_string()) {
        errors->push_back({"invalid_parameter",
                           "a data reference is {\"type\": \"fs\", \"location\": {\"path\": "
                           "\"/a/folder/on/the/server\"}}",
                           "training_data_references[0]"});
      } else {
        m["training_data_reference"] = {{"type", "fs"},
                                        {"location", {{"path", ref["location"]["path"]}}}};
      }
    }
  }
  return errors->empty();
}

// A multipart submission's parts other than one manifest and at most one model_definition: a
// misspelled part (`-F model_defintion=@code.zip`) silently ignored would run the job without its
// code, as an unknown field of a JSON body would run another job.
std::vector<ApiError> PartErrors(const httplib::Request& req) {
  const std::vector<std::string_view> known = {"manifest", "model_definition"};
  std::vector<ApiError> errors;
  for (auto it = req.files.begin(); it != req.files.end(); it = req.files.upper_bound(it->first)) {
    const std::string& name = it->first;
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string hint = launch::DidYouMean(name, known);
      errors.push_back({"invalid_parameter",
                        Quoted(name) + ": unknown part (" +
                            (hint.empty() ? "the parts are 'manifest' and 'model_definition'"
                                          : "did you mean '" + hint + "'?") +
                            ")",
                        name});
    } else if (size_t n = req.files.count(name); n > 1) {
      errors.push_back(
          {"invalid_parameter", name + ": sent " + std::to_string(n) + " times; send one", name});
    }
  }
  return errors;
}

}  // namespace

std::string WmlFieldOf(const std::string& manifest_path) {
  for (const auto& [from, to] : kFieldMap) {
    std::string prefix = from;
    if (manifest_path == prefix) return to;
    if (manifest_path.starts_with(prefix + ".")) return to + manifest_path.substr(prefix.size());
  }
  return manifest_path;
}

bool ReadSubmission(const httplib::Request& req, httplib::Response& res, Submission* out) {
  if (req.is_multipart_form_data()) {
    std::vector<ApiError> errors;
    if (!req.has_file("manifest")) {
      errors.push_back({"missing_parameter",
                        "a multipart submission needs a 'manifest' part (the job's YAML manifest)",
                        "manifest"});
    }
    for (ApiError& e : PartErrors(req)) errors.push_back(std::move(e));
    if (!errors.empty()) {
      SendErrors(res, 400, errors);
      return false;
    }
    out->manifest_text = req.get_file_value("manifest").content;
    // A manifest's text ends up in JSON answers, which must be UTF-8.
    if (std::optional<size_t> at = FirstNonUtf8Byte(out->manifest_text)) {
      SendError(res, 400, "invalid_parameter",
                "manifest: not UTF-8 text (byte " + std::to_string(*at) + " is not)", "manifest");
      return false;
    }
    if (req.has_file("model_definition")) {
      out->code_zip = req.get_file_value("model_definition").content;
    }
    return true;
  }
  std::string type = req.get_header_value("Content-Type");
  if (type.find("application/json") == std::string::npos) {
    SendError(res, 400, "invalid_content_type",
              "send application/json (a WML v4 training body) or multipart/form-data (a "
              "'manifest' part and an optional 'model_definition' zip), not " +
                  Quoted(type));
    return false;
  }
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    SendError(
        res, 400, "invalid_json",
        body.is_discarded() ? "the body is not valid JSON" : "the body must be a JSON object");
    return false;
  }
  json manifest;
  std::vector<ApiError> errors;
  if (!BodyToManifest(body, &manifest, &errors)) {
    SendErrors(res, 400, errors);
    return false;
  }
  out->manifest_text = manifest.dump(2);
  if (out->manifest_text.size() > launch::kMaxManifestBytes) {
    // Its runner reads at most this much of a manifest: accepted, the job would fail at once.
    const json& command = body["model_definition"]["command"];
    const size_t command_bytes = command.is_string() ? command.get<std::string>().size() : 0;
    const std::string limit = std::to_string(launch::kMaxManifestBytes >> 20) + " MiB";
    if (command_bytes > launch::kMaxManifestBytes / 2) {
      SendError(res, 400, "invalid_parameter",
                "model_definition.command: is " + std::to_string(command_bytes) +
                    " bytes, and the job it makes is over the " + limit +
                    " a job's manifest may be; a command that long belongs in a script",
                "model_definition.command");
    } else {
      SendError(res, 400, "invalid_parameter",
                "the job this body describes is " + std::to_string(out->manifest_text.size()) +
                    " bytes as a manifest, over the " + limit + " a job's manifest may be");
    }
    return false;
  }
  out->from_wml_body = true;
  for (std::string_view key : kBodyFields) {
    if (body.contains(std::string(key))) out->entity[std::string(key)] = body[std::string(key)];
  }
  return true;
}

bool PrepareJob(const Submission& submission, const fs::path& work_dir,
                const launch::Installed& installed, const ZipLimits& limits, httplib::Response& res,
                PreparedJob* out) {
  fs::path model = work_dir / "model";
  std::error_code ec;
  fs::create_directories(model, ec);
  if (ec) {
    SendError(res, 500, "internal_error", "cannot create the job directory: " + ec.message());
    return false;
  }
  if (!submission.code_zip.empty()) {
    Status st = ExtractZip(submission.code_zip, model, limits);
    if (!st.ok()) {
      SendError(res, st.code() == Code::kInvalidArgument ? 400 : 500, "invalid_model_definition",
                "model_definition: " + st.message(), "model_definition");
      return false;
    }
  }
  fs::path manifest_file = model / kManifestName;
  {
    std::ofstream file(manifest_file, std::ios::trunc);
    file << submission.manifest_text;
    if (!file) {
      SendError(res, 500, "internal_error", "cannot write " + manifest_file.string());
      return false;
    }
  }
  launch::JobRequest request;
  launch::Problems problems;
  request.base_dir = model;
  request.manifest_text = submission.manifest_text;
  std::optional<launch::JobSpec> spec;
  if (launch::ReadManifest(submission.manifest_text, "manifest", &request, &problems)) {
    spec = launch::BuildJobSpec(request, installed, &problems);
  }
  if (!problems.empty()) {
    std::vector<ApiError> errors;
    for (const auto& p : problems.list()) {
      std::string target = submission.from_wml_body ? WmlFieldOf(p.path) : p.path;
      errors.push_back({"invalid_parameter", target + ": " + p.message, target});
    }
    SendErrors(res, 400, errors);
    return false;
  }
  out->spec = std::move(*spec);
  out->distributed =
      out->spec.nodes > 1 || out->spec.framework.mode != launch::Mode::kParameterServer;
  return true;
}

bool CheckPlan(const User& user, const PreparedJob& job, int64_t active_learners,
               int64_t server_slots, httplib::Response& res) {
  const Plan& plan = user.plan;
  if (job.distributed && !plan.distributed) {
    SendError(res, 403, "plan_not_supported",
              "the " + plan.name + " plan does not run distributed jobs (this one has " +
                  std::to_string(job.spec.nodes) + " learners, framework '" +
                  std::string(job.spec.framework.name) + "'); use a plan such as standard",
              "hardware_spec.nodes");
    return false;
  }
  if (job.spec.nodes > plan.max_nodes) {
    SendError(res, 403, "plan_limit_exceeded",
              "max_nodes: the " + plan.name + " plan allows " + std::to_string(plan.max_nodes) +
                  " learners per job, this job has " + std::to_string(job.spec.nodes),
              "hardware_spec.nodes");
    return false;
  }
  if (active_learners + job.spec.nodes > plan.max_active_learners) {
    SendError(res, 403, "plan_limit_exceeded",
              "max_active_learners: the " + plan.name + " plan allows " +
                  std::to_string(plan.max_active_learners) +
                  " learners in queued and running jobs together; " +
                  std::to_string(active_learners) + " are, and this job adds " +
                  std::to_string(job.spec.nodes));
    return false;
  }
  if (job.spec.total_slots() > server_slots) {
    SendError(res, 400, "exceeds_capacity",
              "the job runs " + std::to_string(job.spec.total_slots()) +
                  " processes (slots) at once; this server has " + std::to_string(server_slots),
              "hardware_spec");
    return false;
  }
  return true;
}

bool CheckGpus(const launch::MachineGpus& machine, const PreparedJob& job, bool from_wml_body,
               httplib::Response& res) {
  Status st = launch::CheckMachineGpus(machine, job.spec.compute.gpus, job.spec.gpu_learners(),
                                       job.spec.compute.name, job.spec.parameter_servers);
  if (st.ok()) return true;
  std::string target =
      from_wml_body ? WmlFieldOf(job.spec.compute_origin) : job.spec.compute_origin;
  SendError(res, 400, "exceeds_capacity", target + ": " + st.message(), target);
  return false;
}

}  // namespace cadre::service
