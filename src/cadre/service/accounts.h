// Accounts: users, their plans, and bearer tokens.
//
// A token reads "cadre_<id>_<secret>": the id finds the row, the secret is checked against a
// salted SHA-256 stored in its place (the secret itself is never stored) with a constant-time
// comparison. Plans are rows of the `plans` table (schema.cc), so limits are data.
//
// A token's row (its salt and hash, the user and plan) is kept in memory for a few seconds after
// it was read, so that a client polling the API does not cost a database read per request; the
// secret is still hashed with its salt and compared in constant time on every request. Changes
// another process makes to the database (`cadre users add`, `revoke`, `plan`) are seen within that
// time: a revoked token is refused, and a new plan applies to submissions, a few seconds later.
//
// Thread-safe: every call takes the Db's lock or the cache's.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/service/db.h"

namespace cadre::service {

struct Plan {
  std::string name;
  std::string description;
  int64_t max_nodes = 1;
  int64_t max_active_learners = 1;
  bool distributed = false;
};

struct User {
  int64_t id = 0;
  std::string name;
  Plan plan;
};

class Accounts {
 public:
  explicit Accounts(Db& db, std::chrono::milliseconds keep_tokens = std::chrono::seconds(5))
      : db_(db), keep_tokens_(keep_tokens) {}

  // Creates the user and returns a new token in *token. kAlreadyExists for a taken name,
  // kInvalidArgument for a bad name or an unknown plan (the message lists the plans).
  Status AddUser(const std::string& name, const std::string& plan, std::string* token);

  // A further token for user `name` (kNotFound for no such user); their other tokens stay valid.
  Status NewToken(const std::string& name, std::string* token);
  // Deletes every token of user `name`; *revoked is how many there were. Their trainings,
  // models and deployments stay, reachable again with a NewToken.
  Status RevokeTokens(const std::string& name, int64_t* revoked);
  // Moves user `name` to `plan`. Jobs already queued or running go on; every later submission
  // is checked against the new plan's limits.
  Status SetPlan(const std::string& name, const std::string& plan);

  // The user a bearer token belongs to; nullopt for anything else (malformed, unknown, wrong).
  std::optional<User> Authenticate(const std::string& token);

  std::vector<Plan> Plans();

 private:
  struct TokenRow {
    std::string salt, hash;
    User user;
    std::chrono::steady_clock::time_point read_at;
  };
  // The next four expect the Db's lock held, inside a transaction.
  Status InsertToken(int64_t user_id, std::string* token);
  Status UserId(const std::string& name, int64_t* user_id);
  Status KnownPlan(const std::string& plan);
  // The row of token `id`, from the cache while it is fresh, else from the database.
  std::optional<TokenRow> FindToken(const std::string& id);

  Db& db_;
  const std::chrono::milliseconds keep_tokens_;
  std::mutex cache_mutex_;
  std::unordered_map<std::string, TokenRow> tokens_;  // by token id; guarded by cache_mutex_
};

// Hex of n random bytes from OpenSSL.
std::string RandomHex(size_t n);
// Hex SHA-256 of `data`.
std::string Sha256Hex(const std::string& data);

}  // namespace cadre::service
