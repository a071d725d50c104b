#include "cadre/service/accounts.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <stdexcept>

#include "cadre/service/clock.h"

namespace cadre::service {
namespace {

constexpr char kPrefix[] = "cadre_";

std::string Hex(const unsigned char* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(n * 2);
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[data[i] >> 4];
    out += kDigits[data[i] & 15];
  }
  return out;
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.' || c == '@';
    if (!ok) return false;
  }
  return true;
}

Plan ReadPlan(Statement& s, int first) {
  return Plan{s.Text(first), s.Text(first + 1), s.Int(first + 2), s.Int(first + 3),
              s.Int(first + 4) != 0};
}

}  // namespace

std::string RandomHex(size_t n) {
  std::string bytes(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(bytes.data()), static_cast<int>(n)) != 1) {
    throw std::runtime_error("OpenSSL RAND_bytes failed");
  }
  return Hex(reinterpret_cast<const unsigned char*>(bytes.data()), n);
}

std::string Sha256Hex(const std::string& data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  return Hex(digest, sizeof(digest));
}

Status Accounts::AddUser(const std::string& name, const std::string& plan, std::string* token) {
  if (!ValidName(name)) {
    return InvalidArgument("user name '" + name + "' must be 1-64 letters, digits or - _ . @");
  }
  auto lock = db_.Lock();
  Transaction tx(db_);
  CADRE_RETURN_IF_ERROR(tx.status());
  CADRE_RETURN_IF_ERROR(KnownPlan(plan));
  {
    Statement taken(db_, "SELECT 1 FROM users WHERE name = ?");
    taken.Bind(1, name);
    if (taken.Step()) return Status(Code::kAlreadyExists, "user '" + name + "' already exists");
  }
  Statement insert(db_, "INSERT INTO users (name, plan, created_at) VALUES (?, ?, ?)");
  insert.Bind(1, name).Bind(2, plan).Bind(3, NowIso());
  CADRE_RETURN_IF_ERROR(insert.Run());
  int64_t user_id = db_.last_insert_rowid();

  CADRE_RETURN_IF_ERROR(InsertToken(user_id, token));
  return tx.Commit();
}

Status Accounts::InsertToken(int64_t user_id, std::string* token) {
  std::string id = RandomHex(8), secret = RandomHex(24), salt = RandomHex(16);
  Statement put(db_,
                "INSERT INTO tokens (id, user_id, salt, hash, created_at) VALUES (?, ?, ?, ?, ?)");
  put.Bind(1, id)
      .Bind(2, user_id)
      .Bind(3, salt)
      .Bind(4, Sha256Hex(salt + secret))
      .Bind(5, NowIso());
  CADRE_RETURN_IF_ERROR(put.Run());
  *token = kPrefix + id + "_" + secret;
  return Status::Ok();
}

Status Accounts::UserId(const std::string& name, int64_t* user_id) {
  Statement s(db_, "SELECT id FROM users WHERE name = ?");
  s.Bind(1, name);
  if (s.Step()) {
    *user_id = s.Int(0);
    return Status::Ok();
  }
  CADRE_RETURN_IF_ERROR(s.status());
  return Status(Code::kNotFound, "no user named '" + name + "'");
}

Status Accounts::NewToken(const std::string& name, std::string* token) {
  auto lock = db_.Lock();
  Transaction tx(db_);
  CADRE_RETURN_IF_ERROR(tx.status());
  int64_t user_id = 0;
  CADRE_RETURN_IF_ERROR(UserId(name, &user_id));
  CADRE_RETURN_IF_ERROR(InsertToken(user_id, token));
  return tx.Commit();
}

Status Accounts::RevokeTokens(const std::string& name, int64_t* revoked) {
  {
    auto lock = db_.Lock();
    Transaction tx(db_);
    CADRE_RETURN_IF_ERROR(tx.status());
    int64_t user_id = 0;
    CADRE_RETURN_IF_ERROR(UserId(name, &user_id));
    Statement del(db_, "DELETE FROM tokens WHERE user_id = ?");
    del.Bind(1, user_id);
    CADRE_RETURN_IF_ERROR(del.Run());
    *revoked = db_.changes();
    CADRE_RETURN_IF_ERROR(tx.Commit());
  }
  std::lock_guard<std::mutex> lock(cache_mutex_);
  tokens_.clear();
  return Status::Ok();
}

Status Accounts::SetPlan(const std::string& name, const std::string& plan) {
  {
    auto lock = db_.Lock();
    Transaction tx(db_);
    CADRE_RETURN_IF_ERROR(tx.status());
    int64_t user_id = 0;
    CADRE_RETURN_IF_ERROR(UserId(name, &user_id));
    CADRE_RETURN_IF_ERROR(KnownPlan(plan));
    Statement set(db_, "UPDATE users SET plan = ? WHERE id = ?");
    set.Bind(1, plan).Bind(2, user_id);
    CADRE_RETURN_IF_ERROR(set.Run());
    CADRE_RETURN_IF_ERROR(tx.Commit());
  }
  std::lock_guard<std::mutex> lock(cache_mutex_);
  tokens_.clear();
  return Status::Ok();
}

Status Accounts::KnownPlan(const std::string& plan) {
  Statement known(db_, "SELECT 1 FROM plans WHERE name = ?");
  known.Bind(1, plan);
  if (known.Step()) return Status::Ok();
  CADRE_RETURN_IF_ERROR(known.status());
  std::string names;
  Statement all(db_, "SELECT name FROM plans ORDER BY max_nodes");
  while (all.Step()) names += (names.empty() ? "" : ", ") + all.Text(0);
  return InvalidArgument("unknown plan '" + plan + "'; plans: " + names);
}

std::optional<User> Accounts::Authenticate(const std::string& token) {
  const std::string prefix = kPrefix;
  if (token.size() > 200 || !token.starts_with(prefix)) return std::nullopt;
  size_t sep = token.find('_', prefix.size());
  if (sep == std::string::npos) return std::nullopt;
  std::string id = token.substr(prefix.size(), sep - prefix.size());
  std::string secret = token.substr(sep + 1);
  std::optional<TokenRow> row = FindToken(id);
  if (!row) return std::nullopt;
  std::string actual = Sha256Hex(row->salt + secret);
  if (row->hash.size() != actual.size() ||
      CRYPTO_memcmp(row->hash.data(), actual.data(), actual.size()) != 0) {
    return std::nullopt;
  }
  return row->user;
}

std::optional<Accounts::TokenRow> Accounts::FindToken(const std::string& id) {
  // Bounded: ids that do not exist are never kept, and at this size the cache starts over.
  constexpr size_t kMaxTokens = 100000;
  auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = tokens_.find(id);
    if (it != tokens_.end() && now - it->second.read_at < keep_tokens_) return it->second;
  }
  std::optional<TokenRow> row;
  {
    auto lock = db_.Lock();
    Statement s(db_,
                "SELECT t.salt, t.hash, u.id, u.name, p.name, p.description, p.max_nodes, "
                "p.max_active_learners, p.distributed FROM tokens t JOIN users u ON u.id = "
                "t.user_id JOIN plans p ON p.name = u.plan WHERE t.id = ?");
    s.Bind(1, id);
    if (s.Step())
      row = TokenRow{s.Text(0), s.Text(1), User{s.Int(2), s.Text(3), ReadPlan(s, 4)}, now};
  }
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (!row) {
    tokens_.erase(id);
    return std::nullopt;
  }
  if (tokens_.size() >= kMaxTokens) tokens_.clear();
  tokens_[id] = *row;
  return row;
}

std::vector<Plan> Accounts::Plans() {
  auto lock = db_.Lock();
  std::vector<Plan> plans;
  Statement s(db_,
              "SELECT name, description, max_nodes, max_active_learners, distributed FROM plans "
              "ORDER BY max_nodes");
  while (s.Step()) plans.push_back(ReadPlan(s, 0));
  return plans;
}

}  // namespace cadre::service
