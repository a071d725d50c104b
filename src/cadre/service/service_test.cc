// The SQLite parts over a real database file: migrations, accounts and tokens, the training
// store's per-user view.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "cadre/service/accounts.h"
#include "cadre/service/db.h"
#include "cadre/service/schema.h"
#include "cadre/service/training_store.h"

namespace cadre::service {
namespace {
namespace fs = std::filesystem;

class ServiceDbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cadre-db-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ASSERT_TRUE(Db::Open(dir_ / "cadre.db", &db_).ok());
  }
  void TearDown() override {
    db_.reset();
    fs::remove_all(dir_);
  }
  int UserVersion() {
    auto lock = db_->Lock();
    Statement s(*db_, "PRAGMA user_version");
    return s.Step() ? static_cast<int>(s.Int(0)) : -1;
  }

  fs::path dir_;
  std::unique_ptr<Db> db_;
};

TEST_F(ServiceDbTest, MigratesOnceAndReopens) {
  EXPECT_EQ(UserVersion(), SchemaVersion());
  Accounts accounts(*db_);
  std::string token;
  ASSERT_TRUE(accounts.AddUser("ada", "standard", &token).ok());
  db_.reset();
  ASSERT_TRUE(Db::Open(dir_ / "cadre.db", &db_).ok());  // no step runs twice
  Accounts again(*db_);
  EXPECT_TRUE(again.Authenticate(token).has_value());
  EXPECT_EQ(again.Plans().size(), 3u);
}

// A server starting while `cadre users add` runs: two processes create and migrate the same new
// database at once. Both must succeed (SQLite may answer BUSY at once there, without waiting).
TEST_F(ServiceDbTest, ProcessesOpeningANewDatabaseTogetherAllSucceed) {
  for (int round = 0; round < 10; ++round) {
    fs::path file = dir_ / ("together-" + std::to_string(round) + ".db");
    std::vector<pid_t> children;
    for (int i = 0; i < 4; ++i) {
      pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        std::unique_ptr<Db> db;
        Status st = Db::Open(file, &db);
        if (!st.ok()) fprintf(stderr, "round %d process %d: %s\n", round, i, st.message().c_str());
        _exit(st.ok() ? 0 : 1);
      }
      children.push_back(pid);
    }
    for (pid_t pid : children) {
      int status = 0;
      ASSERT_EQ(waitpid(pid, &status, 0), pid);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round;
    }
  }
}

// A cached token row is used for its time only: a token removed from the database (here by
// hand, as another process could) stops working once its row is read again.
TEST_F(ServiceDbTest, ARemovedTokenIsRefusedOnceItsCachedRowExpires) {
  Accounts accounts(*db_, std::chrono::milliseconds(0));
  std::string ada;
  ASSERT_TRUE(accounts.AddUser("ada", "standard", &ada).ok());
  ASSERT_TRUE(accounts.Authenticate(ada));
  {
    auto lock = db_->Lock();
    ASSERT_TRUE(db_->Exec("DELETE FROM tokens").ok());
  }
  EXPECT_FALSE(accounts.Authenticate(ada));
}

// Statements are reused by their SQL text; two of the same text alive at once (nested) are
// still two statements, each with its own bindings and rows.
TEST_F(ServiceDbTest, NestedStatementsOfTheSameTextAreIndependent) {
  auto lock = db_->Lock();
  const char* sql = "SELECT ? + 1";
  for (int round = 0; round < 3; ++round) {
    Statement outer(*db_, sql);
    outer.Bind(1, int64_t{10});
    Statement inner(*db_, sql);
    inner.Bind(1, int64_t{20});
    ASSERT_TRUE(inner.Step());
    ASSERT_TRUE(outer.Step());
    EXPECT_EQ(outer.Int(0), 11);
    EXPECT_EQ(inner.Int(0), 21);
  }
}

TEST_F(ServiceDbTest, RefusesANewerSchema) {
  {
    auto lock = db_->Lock();
    ASSERT_TRUE(db_->Exec("PRAGMA user_version = 999").ok());
  }
  db_.reset();
  Status st = Db::Open(dir_ / "cadre.db", &db_);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("newer"), std::string::npos) << st.message();
}

TEST_F(ServiceDbTest, TokensAuthenticateOnlyTheirUser) {
  Accounts accounts(*db_);
  std::string ada, bob;
  ASSERT_TRUE(accounts.AddUser("ada", "lite", &ada).ok());
  ASSERT_TRUE(accounts.AddUser("bob", "premium", &bob).ok());
  std::optional<User> user = accounts.Authenticate(ada);
  ASSERT_TRUE(user);
  EXPECT_EQ(user->name, "ada");
  EXPECT_EQ(user->plan.name, "lite");
  EXPECT_FALSE(user->plan.distributed);
  EXPECT_EQ(accounts.Authenticate(bob)->plan.max_nodes, 64);
  std::string wrong = ada;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  EXPECT_FALSE(accounts.Authenticate(wrong));
  EXPECT_FALSE(accounts.Authenticate(""));
  EXPECT_FALSE(accounts.Authenticate("cadre_"));
  EXPECT_FALSE(accounts.Authenticate("cadre_x_y"));
  // The secret is not stored, only its salted hash.
  auto lock = db_->Lock();
  Statement s(*db_, "SELECT hash FROM tokens");
  while (s.Step()) {
    EXPECT_EQ(ada.find(s.Text(0)), std::string::npos);
    EXPECT_EQ(s.Text(0).size(), 64u);
  }
}

TEST_F(ServiceDbTest, AddUserNamesTheProblem) {
  Accounts accounts(*db_);
  std::string token;
  Status st = accounts.AddUser("ada", "gold", &token);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("lite, standard, premium"), std::string::npos) << st.message();
  ASSERT_TRUE(accounts.AddUser("ada", "lite", &token).ok());
  EXPECT_EQ(accounts.AddUser("ada", "lite", &token).code(), Code::kAlreadyExists);
  EXPECT_EQ(accounts.AddUser("a b", "lite", &token).code(), Code::kInvalidArgument);
}

TEST_F(ServiceDbTest, StoreShowsEachUserOnlyTheirJobs) {
  Accounts accounts(*db_);
  std::string token;
  ASSERT_TRUE(accounts.AddUser("ada", "standard", &token).ok());
  ASSERT_TRUE(accounts.AddUser("bob", "standard", &token).ok());
  TrainingStore store(*db_);
  for (int i = 0; i < 3; ++i) {
    TrainingRecord r;
    r.id = "t" + std::to_string(i);
    r.user_id = i == 2 ? 2 : 1;
    r.name = "job";
    r.framework = "pytorch";
    r.nodes = 2;
    r.job_dir = dir_ / r.id;
    r.work_dir = dir_ / ("work-" + r.id);
    r.created_at = "now";
    r.entity = "{}";
    ASSERT_TRUE(store.Insert(&r).ok());
  }
  EXPECT_TRUE(store.Get("t0", 1));
  EXPECT_FALSE(store.Get("t2", 1));
  EXPECT_TRUE(store.Get("t2", 2));
  TrainingPage page = store.List(1, "", 1, 0);
  EXPECT_EQ(page.total, 2);
  ASSERT_EQ(page.records.size(), 1u);
  EXPECT_EQ(page.records[0].id, "t1");  // newest first
  EXPECT_EQ(store.List(1, "running", 10, 0).total, 0);
  EXPECT_EQ(store.ActiveLearners(1), 4);
  ASSERT_TRUE(store.Finish("t0", kCompleted, "done", std::nullopt).ok());
  EXPECT_EQ(store.ActiveLearners(1), 2);
  EXPECT_FALSE(store.RequestCancel("t2", 1, true));  // not bob's to cancel
  ASSERT_TRUE(store.RequestCancel("t1", 1, true));
  EXPECT_FALSE(store.Get("t1", 1));  // hard-deleted rows are gone from view at once
}

}  // namespace
}  // namespace cadre::service
