// Db: one SQLite connection (WAL mode) shared by the service's threads, and Statement, a prepared
// statement with typed binding. SQLite does the storing; this only makes it hard to misuse.
//
// Thread-safety: a Db is used by many threads; every use holds its mutex (Db::Lock), because a
// connection and its statements must not be used by two threads at once. Other processes
// (`cadre users add` while the server runs) open their own Db on the same file; WAL and the busy
// timeout let them write while the server reads.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "cadre/base/status.h"

namespace cadre::service {

class Db {
 public:
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // Opens (creating) the database file in WAL mode with a busy timeout, and applies the schema's
  // migrations (schema.h).
  static Status Open(const std::filesystem::path& file, std::unique_ptr<Db>* db);

  // Runs one or more statements without results. The caller holds the lock.
  Status Exec(const std::string& sql);

  std::unique_lock<std::mutex> Lock() { return std::unique_lock<std::mutex>(mutex_); }
  sqlite3* handle() { return db_; }
  int64_t last_insert_rowid() { return sqlite3_last_insert_rowid(db_); }
  int changes() { return sqlite3_changes(db_); }

 private:
  friend class Statement;
  // A prepared statement for `sql`, reused across calls: preparing (parsing and planning the
  // SQL) costs more than running the service's small queries. One in use already (a nested
  // statement with the same text) gets a fresh one. The caller holds the lock.
  sqlite3_stmt* Acquire(const char* sql);
  // Gives `stmt` back, reset and unbound (a stepped statement holds a read transaction open).
  void Release(sqlite3_stmt* stmt);

  Db() = default;
  sqlite3* db_ = nullptr;
  std::mutex mutex_;
  struct Cached {
    sqlite3_stmt* stmt = nullptr;
    bool in_use = false;
  };
  std::unordered_map<std::string, Cached> statements_;  // guarded by mutex_
};

// A prepared statement. Bind parameters are 1-based, as in SQLite. Use while holding the Db's lock.
class Statement {
 public:
  Statement(Db& db, const char* sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& Bind(int index, int64_t value);
  Statement& Bind(int index, const std::string& value);
  Statement& Bind(int index, std::nullopt_t);
  Statement& BindOptional(int index, const std::optional<std::string>& value);
  Statement& BindOptional(int index, const std::optional<int64_t>& value);

  // Advances to the next row: true when there is one. A failure is kept in status().
  bool Step();
  // Runs a statement that returns no rows.
  Status Run();
  const Status& status() const { return status_; }

  int64_t Int(int column);
  std::string Text(int column);
  std::optional<std::string> OptionalText(int column);
  std::optional<int64_t> OptionalInt(int column);

 private:
  Db& db_;
  sqlite3_stmt* stmt_ = nullptr;
  Status status_;
};

// BEGIN IMMEDIATE ... COMMIT, rolled back unless Commit() is called. The caller holds the lock.
class Transaction {
 public:
  explicit Transaction(Db& db);
  ~Transaction();
  Status Commit();
  const Status& status() const { return begun_; }

 private:
  Db& db_;
  Status begun_;
  bool done_ = false;
};

}  // namespace cadre::service
