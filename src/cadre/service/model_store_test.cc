// StoreTrainingModel and the models table over a real database file and real folders: a model
// is copied once and shown only to its owner; links and missing or misnamed files are refused,
// naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "cadre/service/accounts.h"
#include "cadre/service/db.h"
#include "cadre/service/model_store.h"

namespace cadre::service {
namespace {
namespace fs = std::filesystem;

constexpr char kSignature[] =
    R"({"format": "cadre-model/1", "model_file": "model.pt",
        "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 4]}],
        "outputs": [{"name": "output", "datatype": "FP32", "shape": [-1, 3]}]})";

class ModelStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cadre-models-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "jobs" / "t1" / "model");
    ASSERT_TRUE(Db::Open(dir_ / "cadre.db", &db_).ok());
    Accounts accounts(*db_);
    std::string token;
    ASSERT_TRUE(accounts.AddUser("ada", "standard", &token).ok());
    ASSERT_TRUE(accounts.AddUser("bob", "standard", &token).ok());
    training_.id = "t1";
    training_.user_id = 1;
    training_.name = "tiny";
    training_.job_dir = dir_ / "jobs" / "t1";
  }
  void TearDown() override {
    db_.reset();
    fs::remove_all(dir_);
  }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(training_.job_dir / "model" / name) << text;
  }
  Status Store(ModelRecord* out) {
    ModelStore models(*db_);
    return StoreTrainingModel(models, dir_ / "models", training_, out);
  }

  fs::path dir_;
  std::unique_ptr<Db> db_;
  TrainingRecord training_;
};

TEST_F(ModelStoreTest, CopiesOnceAndShowsItOnlyToItsOwner) {
  EXPECT_FALSE(TrainingSavedModel(training_));
  Write("model.pt", "weights");
  Write("model.json", kSignature);
  ASSERT_TRUE(TrainingSavedModel(training_));
  ModelRecord first, again;
  ASSERT_TRUE(Store(&first).ok());
  EXPECT_TRUE(fs::is_regular_file(first.dir / "model.pt"));
  EXPECT_TRUE(fs::is_regular_file(first.dir / "model.json"));
  EXPECT_EQ(first.size_bytes, static_cast<int64_t>(7 + std::string(kSignature).size()));
  ASSERT_TRUE(Store(&again).ok());  // storing again (a restarted server) registers nothing new
  EXPECT_EQ(again.id, first.id);
  ModelStore models(*db_);
  EXPECT_EQ(models.List(1, "").size(), 1u);
  EXPECT_EQ(models.List(1, "t1").size(), 1u);
  EXPECT_TRUE(models.List(1, "t2").empty());
  EXPECT_TRUE(models.Get(first.id, 1).has_value());
  EXPECT_FALSE(models.Get(first.id, 2).has_value());
  EXPECT_TRUE(models.List(2, "").empty());
}

TEST_F(ModelStoreTest, RefusesLinksAndMissingOrMisnamedFiles) {
  ModelRecord out;
  Write("elsewhere.json", kSignature);
  fs::create_symlink(training_.job_dir / "model" / "elsewhere.json",
                     training_.job_dir / "model" / "model.json");
  Status st = Store(&out);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("not a regular file"), std::string::npos) << st.message();
  fs::remove(training_.job_dir / "model" / "model.json");

  Write("model.json", kSignature);  // model.pt is missing
  st = Store(&out);
  EXPECT_EQ(st.code(), Code::kNotFound);
  EXPECT_NE(st.message().find("model.pt"), std::string::npos) << st.message();

  Write("model.json", R"({"model_file": "../model.pt", "inputs": [{}]})");
  st = Store(&out);
  EXPECT_NE(st.message().find("model_file"), std::string::npos) << st.message();
  Write("model.json", R"({"model_file": "model.pt"})");
  st = Store(&out);
  EXPECT_NE(st.message().find("inputs"), std::string::npos) << st.message();
  EXPECT_TRUE(ModelStore(*db_).List(1, "").empty());
  EXPECT_FALSE(fs::exists(dir_ / "models") && !fs::is_empty(dir_ / "models"));
}

}  // namespace
}  // namespace cadre::service
