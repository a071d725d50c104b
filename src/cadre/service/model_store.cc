#include "cadre/service/model_store.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cadre/service/accounts.h"
#include "cadre/service/clock.h"

namespace cadre::service {
namespace {

namespace fs = std::filesystem;

constexpr char kColumns[] =
    "seq, id, user_id, training_id, name, dir, signature, size_bytes, created_at";

ModelRecord ReadRecord(Statement& s) {
  ModelRecord r;
  r.seq = s.Int(0);
  r.id = s.Text(1);
  r.user_id = s.Int(2);
  r.training_id = s.Text(3);
  r.name = s.Text(4);
  r.dir = s.Text(5);
  r.signature = s.Text(6);
  r.size_bytes = s.Int(7);
  r.created_at = s.Text(8);
  return r;
}

std::string Select(const std::string& where) {
  return std::string("SELECT ") + kColumns + " FROM models WHERE " + where;
}

// A regular file in `dir`, not a link (a script could leave a link to any file of the server's
// user there).
Status CheckRegular(const fs::path& file) {
  std::error_code ec;
  fs::file_status st = fs::symlink_status(file, ec);
  if (ec || !fs::exists(st)) return NotFound(file.string() + " does not exist");
  if (!fs::is_regular_file(st)) {
    return InvalidArgument(file.string() + " is not a regular file (links are not stored)");
  }
  return Status::Ok();
}

// What the service needs of model.json: its model file, and that it is a signature at all.
// The scorer checks the rest when a deployment loads the model.
Status ReadModelFile(const std::string& text, const fs::path& where, std::string* model_file) {
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
  std::string prefix = where.string() + ": ";
  if (!doc.is_object()) return InvalidArgument(prefix + "not a JSON object");
  *model_file = "model.pt";
  if (doc.contains("model_file")) {
    const auto& f = doc["model_file"];
    if (!f.is_string() || f.get<std::string>().empty() ||
        f.get<std::string>().find('/') != std::string::npos || f.get<std::string>() == "." ||
        f.get<std::string>() == "..") {
      return InvalidArgument(prefix + "model_file: expected a file name in the model folder");
    }
    *model_file = f.get<std::string>();
  }
  if (!doc.contains("inputs") || !doc["inputs"].is_array() || doc["inputs"].empty()) {
    return InvalidArgument(prefix + "inputs: expected a non-empty list");
  }
  return Status::Ok();
}

}  // namespace

Status ModelStore::Insert(const ModelRecord& r) {
  auto lock = db_.Lock();
  Statement s(db_,
              "INSERT INTO models (id, user_id, training_id, name, dir, signature, size_bytes, "
              "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)");
  s.Bind(1, r.id).Bind(2, r.user_id).Bind(3, r.training_id).Bind(4, r.name);
  s.Bind(5, r.dir.string()).Bind(6, r.signature).Bind(7, r.size_bytes).Bind(8, r.created_at);
  return s.Run();
}

std::optional<ModelRecord> ModelStore::Get(const std::string& id, int64_t user_id) {
  auto lock = db_.Lock();
  Statement s(db_, Select("id = ? AND user_id = ?").c_str());
  s.Bind(1, id).Bind(2, user_id);
  if (!s.Step()) return std::nullopt;
  return ReadRecord(s);
}

std::optional<ModelRecord> ModelStore::GetAny(const std::string& id) {
  auto lock = db_.Lock();
  Statement s(db_, Select("id = ?").c_str());
  s.Bind(1, id);
  if (!s.Step()) return std::nullopt;
  return ReadRecord(s);
}

std::optional<ModelRecord> ModelStore::OfTraining(const std::string& training_id) {
  auto lock = db_.Lock();
  Statement s(db_, Select("training_id = ?").c_str());
  s.Bind(1, training_id);
  if (!s.Step()) return std::nullopt;
  return ReadRecord(s);
}

std::vector<ModelRecord> ModelStore::List(int64_t user_id, const std::string& training_id) {
  auto lock = db_.Lock();
  Statement s(
      db_,
      (Select("user_id = ?1 AND (?2 = '' OR training_id = ?2)") + " ORDER BY seq DESC").c_str());
  s.Bind(1, user_id).Bind(2, training_id);
  std::vector<ModelRecord> out;
  while (s.Step()) out.push_back(ReadRecord(s));
  return out;
}

fs::path TrainingModelDir(const TrainingRecord& training) { return training.job_dir / "model"; }

bool TrainingSavedModel(const TrainingRecord& training) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(TrainingModelDir(training) / "model.json", ec));
}

Status StoreTrainingModel(ModelStore& models, const fs::path& models_dir,
                          const TrainingRecord& training, ModelRecord* stored) {
  if (std::optional<ModelRecord> done = models.OfTraining(training.id)) {
    *stored = *done;
    return Status::Ok();
  }
  fs::path from = TrainingModelDir(training);
  fs::path signature_file = from / "model.json";
  CADRE_RETURN_IF_ERROR(CheckRegular(signature_file));
  std::ifstream in(signature_file);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return IoError("cannot read " + signature_file.string());
  std::string model_file;
  CADRE_RETURN_IF_ERROR(ReadModelFile(text.str(), signature_file, &model_file));
  CADRE_RETURN_IF_ERROR(CheckRegular(from / model_file));

  ModelRecord r;
  r.id = "model-" + RandomHex(8);
  r.user_id = training.user_id;
  r.training_id = training.id;
  r.name = training.name;
  r.dir = models_dir / r.id;
  r.signature = text.str();
  r.created_at = NowIso();
  fs::path tmp = models_dir / (".incoming-" + r.id);
  std::error_code ec;
  fs::create_directories(tmp, ec);
  for (const std::string& name : {model_file, std::string("model.json")}) {
    if (!ec) fs::copy_file(from / name, tmp / name, ec);
    if (!ec) r.size_bytes += static_cast<int64_t>(fs::file_size(tmp / name, ec));
  }
  if (!ec) fs::rename(tmp, r.dir, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    return IoError("cannot copy the model of " + training.id + " from " + from.string() + " into " +
                   models_dir.string() + ": " + ec.message());
  }
  Status st = models.Insert(r);
  if (!st.ok()) {
    std::error_code ignored;
    fs::remove_all(r.dir, ignored);
    return st.WithContext("registering the model of " + training.id);
  }
  *stored = r;
  return Status::Ok();
}

}  // namespace cadre::service
