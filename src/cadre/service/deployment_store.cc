#include "cadre/service/deployment_store.h"

#include "cadre/service/clock.h"

namespace cadre::service {
namespace {

constexpr char kColumns[] =
    "seq, id, user_id, name, model_id, state, message, failure, restarts, created_at, "
    "modified_at, updating_to, update_note";

DeploymentRecord ReadRecord(Statement& s) {
  DeploymentRecord r;
  r.seq = s.Int(0);
  r.id = s.Text(1);
  r.user_id = s.Int(2);
  r.name = s.Text(3);
  r.model_id = s.Text(4);
  r.state = s.Text(5);
  r.message = s.OptionalText(6);
  r.failure = s.OptionalText(7);
  r.restarts = s.Int(8);
  r.created_at = s.Text(9);
  r.modified_at = s.Text(10);
  r.updating_to = s.OptionalText(11);
  r.update_note = s.OptionalText(12);
  return r;
}

std::string Select(const std::string& where) {
  return std::string("SELECT ") + kColumns + " FROM deployments WHERE " + where;
}

}  // namespace

Status DeploymentStore::Insert(DeploymentRecord* r) {
  auto lock = db_.Lock();
  Statement s(db_,
              "INSERT INTO deployments (id, user_id, name, model_id, state, message, restarts, "
              "created_at, modified_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  s.Bind(1, r->id).Bind(2, r->user_id).Bind(3, r->name).Bind(4, r->model_id).Bind(5, r->state);
  s.BindOptional(6, r->message).Bind(7, r->restarts).Bind(8, r->created_at);
  s.Bind(9, r->modified_at);
  CADRE_RETURN_IF_ERROR(s.Run());
  r->seq = db_.last_insert_rowid();
  return Status::Ok();
}

std::optional<DeploymentRecord> DeploymentStore::Get(const std::string& id, int64_t user_id) {
  auto lock = db_.Lock();
  Statement s(db_, Select("id = ? AND user_id = ?").c_str());
  s.Bind(1, id).Bind(2, user_id);
  if (!s.Step()) return std::nullopt;
  return ReadRecord(s);
}

std::optional<DeploymentRecord> DeploymentStore::GetAny(const std::string& id) {
  auto lock = db_.Lock();
  Statement s(db_, Select("id = ?").c_str());
  s.Bind(1, id);
  if (!s.Step()) return std::nullopt;
  return ReadRecord(s);
}

std::vector<DeploymentRecord> DeploymentStore::List(int64_t user_id) {
  auto lock = db_.Lock();
  Statement s(db_, (Select("user_id = ?") + " ORDER BY seq DESC").c_str());
  s.Bind(1, user_id);
  std::vector<DeploymentRecord> out;
  while (s.Step()) out.push_back(ReadRecord(s));
  return out;
}

std::vector<DeploymentRecord> DeploymentStore::InStates(const std::vector<std::string>& states) {
  auto lock = db_.Lock();
  std::string list;
  for (size_t i = 0; i < states.size(); ++i) list += (i ? ", ?" : "?");
  Statement s(db_, (Select("state IN (" + list + ")") + " ORDER BY seq").c_str());
  for (size_t i = 0; i < states.size(); ++i) s.Bind(static_cast<int>(i + 1), states[i]);
  std::vector<DeploymentRecord> out;
  while (s.Step()) out.push_back(ReadRecord(s));
  return out;
}

int64_t DeploymentStore::Count() {
  auto lock = db_.Lock();
  Statement s(db_, "SELECT COUNT(*) FROM deployments");
  return s.Step() ? s.Int(0) : 0;
}

Status DeploymentStore::Update(const std::string& id, const std::string& state,
                               const std::string& message,
                               const std::optional<std::string>& failure, int64_t restarts) {
  auto lock = db_.Lock();
  Statement s(db_,
              "UPDATE deployments SET state = ?, message = ?, failure = ?, restarts = ?, "
              "modified_at = ? WHERE id = ?");
  s.Bind(1, state).Bind(2, message).BindOptional(3, failure).Bind(4, restarts);
  s.Bind(5, NowIso()).Bind(6, id);
  CADRE_RETURN_IF_ERROR(s.Run());
  if (db_.changes() == 0) return NotFound("no such deployment");
  return Status::Ok();
}

namespace {

Status SetText(Db& db, const char* sql, const std::string& id, const std::string& value) {
  auto lock = db.Lock();
  Statement s(db, sql);
  s.Bind(1, value).Bind(2, NowIso()).Bind(3, id);
  CADRE_RETURN_IF_ERROR(s.Run());
  if (db.changes() == 0) return NotFound("no such deployment");
  return Status::Ok();
}

}  // namespace

Status DeploymentStore::SetName(const std::string& id, const std::string& name) {
  return SetText(db_, "UPDATE deployments SET name = ?, modified_at = ? WHERE id = ?", id, name);
}

Status DeploymentStore::SetModel(const std::string& id, const std::string& model_id) {
  return SetText(db_,
                 "UPDATE deployments SET model_id = ?, updating_to = NULL, update_note = NULL, "
                 "modified_at = ? WHERE id = ?",
                 id, model_id);
}

Status DeploymentStore::SetUpdate(const std::string& id,
                                  const std::optional<std::string>& updating_to,
                                  const std::optional<std::string>& update_note) {
  auto lock = db_.Lock();
  Statement s(db_,
              "UPDATE deployments SET updating_to = ?, update_note = ?, modified_at = ? "
              "WHERE id = ?");
  s.BindOptional(1, updating_to).BindOptional(2, update_note).Bind(3, NowIso()).Bind(4, id);
  CADRE_RETURN_IF_ERROR(s.Run());
  if (db_.changes() == 0) return NotFound("no such deployment");
  return Status::Ok();
}

bool DeploymentStore::Remove(const std::string& id, int64_t user_id) {
  auto lock = db_.Lock();
  Statement s(db_, "DELETE FROM deployments WHERE id = ? AND user_id = ?");
  s.Bind(1, id).Bind(2, user_id);
  return s.Run().ok() && db_.changes() > 0;
}

}  // namespace cadre::service
