// Safe extraction: ordinary archives come out whole; zip-slip, absolute paths, symbolic links,
// bombs and too many entries are refused naming the problem, leaving nothing behind.
#include "cadre/service/zip_extract.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zip.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace cadre::service {
namespace {
namespace fs = std::filesystem;

struct Entry {
  std::string name;
  std::string data;
  mode_t mode = S_IFREG | 0644;
};

class ZipExtractTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("cadre-zip-" + std::to_string(getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "dest");
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string MakeZip(const std::vector<Entry>& entries) {
    fs::path file = root_ / "archive.zip";
    int error = 0;
    zip_t* z = zip_open(file.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
    EXPECT_NE(z, nullptr);
    for (const auto& e : entries) {
      zip_source_t* src = zip_source_buffer(z, e.data.data(), e.data.size(), 0);
      zip_int64_t index = zip_file_add(z, e.name.c_str(), src, ZIP_FL_ENC_UTF_8);
      EXPECT_GE(index, 0) << e.name;
      zip_file_set_external_attributes(z, static_cast<zip_uint64_t>(index), 0, ZIP_OPSYS_UNIX,
                                       static_cast<zip_uint32_t>(e.mode) << 16);
    }
    EXPECT_EQ(zip_close(z), 0);
    std::ifstream in(file, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    return bytes.str();
  }

  bool DestEmpty() { return fs::is_empty(root_ / "dest"); }

  fs::path root_;
};

TEST_F(ZipExtractTest, ExtractsFilesAndFolders) {
  std::string zip = MakeZip({{"train.py", "print('hi')\n"}, {"pkg/util.py", "X = 1\n"}});
  ASSERT_TRUE(ExtractZip(zip, root_ / "dest", ZipLimits{}).ok());
  std::ifstream in(root_ / "dest" / "pkg" / "util.py");
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "X = 1");
  EXPECT_TRUE(fs::exists(root_ / "dest" / "train.py"));
  EXPECT_FALSE(fs::exists(root_ / "dest" / ".unzip"));
}

TEST_F(ZipExtractTest, RefusesEntriesOutsideTheFolder) {
  for (const char* name : {"../evil.py", "a/../../evil.py", "/etc/evil", "a\\..\\evil"}) {
    Status st = ExtractZip(MakeZip({{"ok.py", "1"}, {name, "boom"}}), root_ / "dest", ZipLimits{});
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << name;
    EXPECT_NE(st.message().find("outside"), std::string::npos) << st.message();
    EXPECT_TRUE(DestEmpty()) << name;
  }
  EXPECT_FALSE(fs::exists(root_ / "evil.py"));
}

TEST_F(ZipExtractTest, RefusesSymbolicLinks) {
  Status st =
      ExtractZip(MakeZip({{"link", "/etc/passwd", S_IFLNK | 0777}}), root_ / "dest", ZipLimits{});
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("symbolic link"), std::string::npos) << st.message();
  EXPECT_TRUE(DestEmpty());
}

TEST_F(ZipExtractTest, RefusesABomb) {
  std::string zeros(4 << 20, '\0');  // compresses to a few KiB
  std::string zip = MakeZip({{"a.bin", zeros}, {"b.bin", zeros}});
  EXPECT_LT(zip.size(), 100u << 10);
  Status st = ExtractZip(zip, root_ / "dest", ZipLimits{6 << 20, 100});
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("zip bomb"), std::string::npos) << st.message();
  EXPECT_TRUE(DestEmpty());
}

TEST_F(ZipExtractTest, RefusesTooManyEntries) {
  std::vector<Entry> entries;
  for (int i = 0; i < 12; ++i) entries.push_back({"f" + std::to_string(i), "x"});
  Status st = ExtractZip(MakeZip(entries), root_ / "dest", ZipLimits{1 << 20, 10});
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("12 entries"), std::string::npos) << st.message();
}

TEST_F(ZipExtractTest, RefusesGarbage) {
  Status st = ExtractZip("this is not a zip", root_ / "dest", ZipLimits{});
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("not a readable zip"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace cadre::service
