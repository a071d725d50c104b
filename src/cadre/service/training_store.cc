#include "cadre/service/training_store.h"

#include "cadre/service/clock.h"

namespace cadre::service {
namespace {

constexpr char kColumns[] =
    "seq, id, user_id, name, framework, nodes, slots, state, job_dir, created_at, running_at, "
    "completed_at, message, failure, runner_pid, runner_start, cancel_requested, hard_delete, "
    "entity, work_dir, gpus, gpu_ids";

TrainingRecord ReadRecord(Statement& s) {
  TrainingRecord r;
  r.seq = s.Int(0);
  r.id = s.Text(1);
  r.user_id = s.Int(2);
  r.name = s.Text(3);
  r.framework = s.Text(4);
  r.nodes = s.Int(5);
  r.slots = s.Int(6);
  r.state = s.Text(7);
  r.job_dir = s.Text(8);
  r.created_at = s.Text(9);
  r.running_at = s.OptionalText(10);
  r.completed_at = s.OptionalText(11);
  r.message = s.OptionalText(12);
  r.failure = s.OptionalText(13);
  r.runner_pid = s.OptionalInt(14);
  r.runner_start = s.OptionalInt(15);
  r.cancel_requested = s.Int(16) != 0;
  r.hard_delete = s.Int(17) != 0;
  r.entity = s.Text(18);
  r.work_dir = s.Text(19);
  r.gpus = s.Int(20);
  r.gpu_ids = s.OptionalText(21);
  return r;
}

std::string Select(const std::string& where) {
  return std::string("SELECT ") + kColumns + " FROM trainings WHERE " + where;
}

Status RunUpdate(Db& db, Statement& s) {
  CADRE_RETURN_IF_ERROR(s.Run());
  if (db.changes() == 0) return NotFound("no such training");
  return Status::Ok();
}

}  // namespace

bool IsFinalState(const std::string& state) {
  return state == kCompleted || state == kFailed || state == kCanceled;
}

bool IsKnownState(const std::string& state) {
  return state == kQueued || state == kPending || state == kRunning || state == kStoring ||
         IsFinalState(state);
}

Status TrainingStore::Insert(TrainingRecord* r) {
  auto lock = db_.Lock();
  Statement s(db_,
              "INSERT INTO trainings (id, user_id, name, framework, nodes, slots, state, job_dir, "
              "created_at, entity, work_dir, gpus) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  s.Bind(1, r->id).Bind(2, r->user_id).Bind(3, r->name).Bind(4, r->framework);
  s.Bind(5, r->nodes).Bind(6, r->slots).Bind(7, r->state).Bind(8, r->job_dir.string());
  s.Bind(9, r->created_at).Bind(10, r->entity).Bind(11, r->work_dir.string());
  s.Bind(12, r->gpus);
  CADRE_RETURN_IF_ERROR(s.Run());
  r->seq = db_.last_insert_rowid();
  return Status::Ok();
}

std::optional<TrainingRecord> TrainingStore::Get(const std::string& id, int64_t user_id) {
  auto lock = db_.Lock();
  Statement s(db_, Select("id = ? AND user_id = ? AND hard_delete = 0").c_str());
  s.Bind(1, id).Bind(2, user_id);
  if (!s.Step()) return std::nullopt;
  return ReadRecord(s);
}

std::optional<TrainingRecord> TrainingStore::GetAny(const std::string& id) {
  auto lock = db_.Lock();
  Statement s(db_, Select("id = ?").c_str());
  s.Bind(1, id);
  if (!s.Step()) return std::nullopt;
  return ReadRecord(s);
}

TrainingPage TrainingStore::List(int64_t user_id, const std::string& state, int64_t limit,
                                 int64_t start) {
  auto lock = db_.Lock();
  TrainingPage page;
  std::string where = "user_id = ?1 AND hard_delete = 0 AND (?2 = '' OR state = ?2)";
  {
    Statement count(db_, ("SELECT COUNT(*) FROM trainings WHERE " + where).c_str());
    count.Bind(1, user_id).Bind(2, state);
    if (count.Step()) page.total = count.Int(0);
  }
  Statement s(db_, (Select(where) + " ORDER BY seq DESC LIMIT ?3 OFFSET ?4").c_str());
  s.Bind(1, user_id).Bind(2, state).Bind(3, limit).Bind(4, start);
  while (s.Step()) page.records.push_back(ReadRecord(s));
  return page;
}

int64_t TrainingStore::ActiveLearners(int64_t user_id) {
  auto lock = db_.Lock();
  Statement s(db_,
              "SELECT COALESCE(SUM(nodes), 0) FROM trainings WHERE user_id = ? AND state IN "
              "('queued', 'pending', 'running')");
  s.Bind(1, user_id);
  return s.Step() ? s.Int(0) : 0;
}

std::vector<TrainingRecord> TrainingStore::InStates(const std::vector<std::string>& states) {
  auto lock = db_.Lock();
  std::string list;
  for (size_t i = 0; i < states.size(); ++i) list += (i ? ", ?" : "?");
  Statement s(db_, (Select("state IN (" + list + ")") + " ORDER BY seq").c_str());
  for (size_t i = 0; i < states.size(); ++i) s.Bind(static_cast<int>(i + 1), states[i]);
  std::vector<TrainingRecord> out;
  while (s.Step()) out.push_back(ReadRecord(s));
  return out;
}

Status TrainingStore::SetPending(const std::string& id, const std::optional<std::string>& gpu_ids) {
  auto lock = db_.Lock();
  Statement s(db_,
              "UPDATE trainings SET state = 'pending', gpu_ids = ?, message = NULL WHERE id = ? "
              "AND state = 'queued'");
  s.BindOptional(1, gpu_ids).Bind(2, id);
  return RunUpdate(db_, s);
}

Status TrainingStore::SetQueuedReason(const std::string& id, const std::string& reason) {
  auto lock = db_.Lock();
  Statement s(db_, "UPDATE trainings SET message = ? WHERE id = ? AND state = 'queued'");
  s.Bind(1, reason).Bind(2, id);
  return s.Run();
}

Status TrainingStore::SetRunning(const std::string& id, int64_t pid, int64_t start,
                                 const std::string& at) {
  auto lock = db_.Lock();
  Statement s(db_,
              "UPDATE trainings SET state = 'running', runner_pid = ?, runner_start = ?, "
              "running_at = COALESCE(running_at, ?) WHERE id = ? AND state IN ('pending', "
              "'running')");
  s.Bind(1, pid).Bind(2, start).Bind(3, at).Bind(4, id);
  return RunUpdate(db_, s);
}

Status TrainingStore::SetQueued(const std::string& id) {
  auto lock = db_.Lock();
  Statement s(db_,
              "UPDATE trainings SET state = 'queued', gpu_ids = NULL WHERE id = ? AND state = "
              "'pending'");
  s.Bind(1, id);
  return RunUpdate(db_, s);
}

Status TrainingStore::SetStoring(const std::string& id) {
  auto lock = db_.Lock();
  Statement s(db_, "UPDATE trainings SET state = 'storing' WHERE id = ? AND state = 'running'");
  s.Bind(1, id);
  return RunUpdate(db_, s);
}

Status TrainingStore::Finish(const std::string& id, const std::string& state,
                             const std::string& message,
                             const std::optional<std::string>& failure) {
  auto lock = db_.Lock();
  Statement s(db_,
              "UPDATE trainings SET state = ?, message = ?, failure = ?, completed_at = ? WHERE "
              "id = ? AND state NOT IN ('completed', 'failed', 'canceled')");
  s.Bind(1, state).Bind(2, message).BindOptional(3, failure).Bind(4, NowIso()).Bind(5, id);
  return s.Run();
}

std::optional<TrainingRecord> TrainingStore::RequestCancel(const std::string& id, int64_t user_id,
                                                           bool hard) {
  auto lock = db_.Lock();
  Statement get(db_, Select("id = ? AND user_id = ? AND hard_delete = 0").c_str());
  get.Bind(1, id).Bind(2, user_id);
  if (!get.Step()) return std::nullopt;
  TrainingRecord before = ReadRecord(get);
  Statement s(db_,
              "UPDATE trainings SET cancel_requested = 1, hard_delete = MAX(hard_delete, ?) "
              "WHERE id = ?");
  s.Bind(1, hard ? 1 : 0).Bind(2, id);
  if (!s.Run().ok()) return std::nullopt;
  return before;
}

Status TrainingStore::Remove(const std::string& id) {
  auto lock = db_.Lock();
  Statement s(db_, "DELETE FROM trainings WHERE id = ?");
  s.Bind(1, id);
  return s.Run();
}

}  // namespace cadre::service
