#include "cadre/service/db.h"

#include <chrono>
#include <thread>

#include "cadre/service/schema.h"

namespace cadre::service {

namespace {

Status SqliteError(sqlite3* db, const std::string& what) {
  return IoError(what + ": " + (db != nullptr ? sqlite3_errmsg(db) : "out of memory"));
}

}  // namespace

constexpr std::chrono::milliseconds kBusyTimeout{10000};

// Enough for every statement the service runs; beyond it, statements are prepared each time.
constexpr size_t kMaxCachedStatements = 256;

Db::~Db() {
  for (auto& [sql, cached] : statements_) sqlite3_finalize(cached.stmt);
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

sqlite3_stmt* Db::Acquire(const char* sql) {
  auto it = statements_.find(sql);
  if (it != statements_.end() && !it->second.in_use) {
    it->second.in_use = true;
    return it->second.stmt;
  }
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_, sql, -1, &stmt, nullptr) != SQLITE_OK) {
    sqlite3_finalize(stmt);
    return nullptr;
  }
  if (it == statements_.end() && statements_.size() < kMaxCachedStatements) {
    statements_.emplace(sql, Cached{stmt, true});
  }
  return stmt;
}

void Db::Release(sqlite3_stmt* stmt) {
  if (stmt == nullptr) return;
  auto it = statements_.find(sqlite3_sql(stmt));
  if (it != statements_.end() && it->second.stmt == stmt) {
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    it->second.in_use = false;
    return;
  }
  sqlite3_finalize(stmt);
}

Status Db::Open(const std::filesystem::path& file, std::unique_ptr<Db>* out) {
  std::unique_ptr<Db> db(new Db());
  int rc =
      sqlite3_open_v2(file.c_str(), &db->db_,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) return SqliteError(db->db_, "cannot open the database " + file.string());
  sqlite3_busy_timeout(db->db_, static_cast<int>(kBusyTimeout.count()));
  auto lock = db->Lock();
  // Processes opening a new database together (a server starting while `cadre users add` runs)
  // can meet where SQLite answers "database is locked" at once instead of waiting out the busy
  // timeout: switching to WAL, or upgrading a read lock, would otherwise deadlock. The set-up
  // is idempotent, so it is tried again, for as long as the busy timeout.
  auto give_up = std::chrono::steady_clock::now() + kBusyTimeout;
  for (;;) {
    Status st =
        db->Exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;");
    if (st.ok()) st = Migrate(*db);
    if (st.ok()) break;
    bool busy = st.message().find("database is locked") != std::string::npos;
    if (!busy || std::chrono::steady_clock::now() > give_up) return st.WithContext(file.string());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  *out = std::move(db);
  return Status::Ok();
}

Status Db::Exec(const std::string& sql) {
  char* error = nullptr;
  int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error);
  if (rc == SQLITE_OK) return Status::Ok();
  std::string message = error != nullptr ? error : sqlite3_errstr(rc);
  sqlite3_free(error);
  return IoError("SQLite: " + message);
}

Statement::Statement(Db& db, const char* sql) : db_(db), stmt_(db.Acquire(sql)) {
  if (stmt_ == nullptr) status_ = SqliteError(db.handle(), "SQLite prepare");
}

Statement::~Statement() { db_.Release(stmt_); }

Statement& Statement::Bind(int index, int64_t value) {
  if (stmt_ != nullptr) sqlite3_bind_int64(stmt_, index, value);
  return *this;
}

Statement& Statement::Bind(int index, const std::string& value) {
  if (stmt_ != nullptr) {
    sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT);
  }
  return *this;
}

Statement& Statement::Bind(int index, std::nullopt_t) {
  if (stmt_ != nullptr) sqlite3_bind_null(stmt_, index);
  return *this;
}

Statement& Statement::BindOptional(int index, const std::optional<std::string>& value) {
  return value ? Bind(index, *value) : Bind(index, std::nullopt);
}

Statement& Statement::BindOptional(int index, const std::optional<int64_t>& value) {
  return value ? Bind(index, *value) : Bind(index, std::nullopt);
}

bool Statement::Step() {
  if (stmt_ == nullptr || !status_.ok()) return false;
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc != SQLITE_DONE) status_ = SqliteError(db_.handle(), "SQLite step");
  return false;
}

Status Statement::Run() {
  while (Step()) {
  }
  return status_;
}

int64_t Statement::Int(int column) { return sqlite3_column_int64(stmt_, column); }

std::string Statement::Text(int column) {
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  if (text == nullptr) return {};
  return std::string(reinterpret_cast<const char*>(text),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

std::optional<std::string> Statement::OptionalText(int column) {
  if (sqlite3_column_type(stmt_, column) == SQLITE_NULL) return std::nullopt;
  return Text(column);
}

std::optional<int64_t> Statement::OptionalInt(int column) {
  if (sqlite3_column_type(stmt_, column) == SQLITE_NULL) return std::nullopt;
  return Int(column);
}

Transaction::Transaction(Db& db) : db_(db) { begun_ = db_.Exec("BEGIN IMMEDIATE"); }

Transaction::~Transaction() {
  if (begun_.ok() && !done_) (void)db_.Exec("ROLLBACK");
}

Status Transaction::Commit() {
  CADRE_RETURN_IF_ERROR(begun_);
  done_ = true;
  return db_.Exec("COMMIT");
}

}  // namespace cadre::service
