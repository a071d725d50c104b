// Accounts: users, their plans, and bearer tokens.
//
// A token reads "cadre_<id>_<secret>": the id finds the row, the secret is checked against a
// salted SHA-256 stored in its place (the secret itself is never stored) with a constant-time
// comparison. Plans are rows of the `plans` table (schema.cc), so limits are data.
//
// Thread-safe: every call takes the Db's lock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
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
  explicit Accounts(Db& db) : db_(db) {}

  // Creates the user and returns a new token in *token. kAlreadyExists for a taken name,
  // kInvalidArgument for a bad name or an unknown plan (the message lists the plans).
  Status AddUser(const std::string& name, const std::string& plan, std::string* token);

  // The user a bearer token belongs to; nullopt for anything else (malformed, unknown, wrong).
  std::optional<User> Authenticate(const std::string& token);

  std::vector<Plan> Plans();

 private:
  Db& db_;
};

// Hex of n random bytes from OpenSSL.
std::string RandomHex(size_t n);
// Hex SHA-256 of `data`.
std::string Sha256Hex(const std::string& data);

}  // namespace cadre::service
