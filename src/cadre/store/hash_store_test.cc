#include "cadre/store/hash_store.h"

#include <gtest/gtest.h>

#include <thread>

#include "cadre/base/status.h"
#include "cadre/store/prefix_store.h"

namespace cadre::store {
namespace {

using namespace std::chrono_literals;

TEST(HashStoreTest, SetGetAcrossThreads) {
  HashStore s;
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    s.set_string("addr/1", "127.0.0.1:4000");
  });
  EXPECT_EQ(s.get_string("addr/1"), "127.0.0.1:4000");
  t.join();
}

TEST(HashStoreTest, AddIsAtomic) {
  HashStore s;
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i) {
    ts.emplace_back([&] {
      for (int j = 0; j < 1000; ++j) s.add("n", 1);
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(s.add("n", 0), 4000);
  EXPECT_EQ(s.get_string("n"), "4000");
}

TEST(HashStoreTest, WaitTimesOutNamingKeys) {
  HashStore s;
  s.set_string("a", "1");
  try {
    s.wait({"a", "b"}, 30ms);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kTimeout);
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos);
    EXPECT_EQ(std::string(e.what()).find("'a'"), std::string::npos);
  }
}

TEST(HashStoreTest, AddOnNonCounterIsAnError) {
  HashStore s;
  s.set_string("x", "hello");
  EXPECT_THROW(s.add("x", 1), Error);
}

TEST(PrefixStoreTest, IsolatesGroups) {
  auto inner = std::make_shared<HashStore>();
  PrefixStore a("a", inner), b("b", inner);
  a.set_string("k", "1");
  b.set_string("k", "2");
  EXPECT_EQ(a.get_string("k"), "1");
  EXPECT_EQ(b.get_string("k"), "2");
  EXPECT_EQ(inner->get_string("a/k"), "1");
  EXPECT_FALSE(b.check({"only-a"}));
}

}  // namespace
}  // namespace cadre::store
