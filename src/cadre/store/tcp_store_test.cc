#include "cadre/store/tcp_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "cadre/base/status.h"
#include "cadre/net/frame.h"
#include "cadre/net/handshake.h"
#include "cadre/net/wire.h"
#include "cadre/store/tcp_store_protocol.h"

namespace cadre::store {
namespace {

using namespace std::chrono_literals;

constexpr char kToken[] = "job-token-123";

TcpStoreServerOptions ServerOptions() {
  TcpStoreServerOptions o;
  o.token = kToken;
  return o;
}

TcpStoreOptions ClientOptions(const TcpStoreServer& server, std::string token = kToken) {
  TcpStoreOptions o;
  o.port = server.port();
  o.token = std::move(token);
  o.connect_timeout = 10s;
  o.timeout = 10s;
  return o;
}

std::string WhatOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(TcpStoreTest, SetGetAddCheck) {
  TcpStoreServer server(ServerOptions());
  TcpStore s(ClientOptions(server));
  EXPECT_FALSE(s.check({"a"}));
  s.set_string("a", "hello");
  EXPECT_EQ(s.get_string("a"), "hello");
  s.set("empty", {});
  EXPECT_TRUE(s.get("empty").empty());
  EXPECT_TRUE(s.check({"a", "empty"}));
  EXPECT_FALSE(s.check({"a", "b"}));
  EXPECT_EQ(s.add("n", 5), 5);
  EXPECT_EQ(s.add("n", -7), -2);
  EXPECT_EQ(s.get_string("n"), "-2");
  Bytes big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i % 251);
  s.set("big", big);
  EXPECT_EQ(s.get("big"), big);
  EXPECT_EQ(server.num_clients(), 1u);
}

TEST(TcpStoreTest, GetAndWaitBlockUntilAnotherClientSets) {
  TcpStoreServer server(ServerOptions());
  TcpStore reader(ClientOptions(server)), writer(ClientOptions(server));
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    writer.set_string("addr/1", "127.0.0.1:4000");
    std::this_thread::sleep_for(20ms);
    writer.add("ready", 1);
  });
  EXPECT_EQ(reader.get_string("addr/1"), "127.0.0.1:4000");
  reader.wait({"addr/1", "ready"});
  t.join();
}

TEST(TcpStoreTest, ManyClientsCountTogether) {
  TcpStoreServer server(ServerOptions());
  constexpr int kClients = 8, kAdds = 50;
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      TcpStore s(ClientOptions(server));
      for (int j = 0; j < kAdds; ++j) s.add("counter", 1);
      s.set_string("done/" + std::to_string(i), "1");
    });
  }
  TcpStore observer(ClientOptions(server));
  std::vector<std::string> keys;
  for (int i = 0; i < kClients; ++i) keys.push_back("done/" + std::to_string(i));
  observer.wait(keys);
  EXPECT_EQ(observer.add("counter", 0), kClients * kAdds);
  for (auto& t : threads) t.join();
}

TEST(TcpStoreTest, OneClientSharedByThreads) {
  TcpStoreServer server(ServerOptions());
  TcpStore s(ClientOptions(server));
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int j = 0; j < 50; ++j) {
        s.add("shared", 1);
        s.set_string("t" + std::to_string(i), std::to_string(j));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(s.add("shared", 0), 200);
  EXPECT_EQ(s.get_string("t3"), "49");
}

TEST(TcpStoreTest, WaitTimesOutNamingOnlyTheMissingKeys) {
  TcpStoreServer server(ServerOptions());
  TcpStore s(ClientOptions(server));
  s.set_string("present", "1");
  try {
    s.wait({"present", "absent"}, 100ms);
    FAIL() << "wait returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kTimeout);
    EXPECT_NE(std::string(e.what()).find("'absent'"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("'present'"), std::string::npos) << e.what();
  }
  s.set_timeout(100ms);
  EXPECT_NE(WhatOf([&] { s.get("nope"); }).find("'nope'"), std::string::npos);
  // The connection is still in step after timeouts.
  s.set_string("after", "ok");
  EXPECT_EQ(s.get_string("after"), "ok");
}

TEST(TcpStoreTest, AddOnNonCounterIsInvalidArgumentAndKeepsTheConnection) {
  TcpStoreServer server(ServerOptions());
  TcpStore s(ClientOptions(server));
  s.set_string("x", "hello");
  try {
    s.add("x", 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos);
  }
  EXPECT_EQ(s.add("y", 2), 2);
}

TEST(TcpStoreTest, OversizedKeyIsRefusedBeforeSending) {
  TcpStoreServer server(ServerOptions());
  TcpStore s(ClientOptions(server));
  try {
    s.set_string(std::string(kMaxKeyBytes + 1, 'k'), "v");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidArgument);
  }
  s.set_string("k", "v");
}

TEST(TcpStoreTest, WrongTokenIsRefusedAndOthersKeepWorking) {
  TcpStoreServer server(ServerOptions());
  TcpStore good(ClientOptions(server));
  try {
    TcpStore bad(ClientOptions(server, "not-the-token"));
    FAIL() << "connected with a wrong token";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kAuth) << e.what();
  }
  good.set_string("still", "here");
  EXPECT_EQ(good.get_string("still"), "here");
}

TEST(TcpStoreTest, ServerStoppingWakesParkedClientsWithAnError) {
  auto server = std::make_unique<TcpStoreServer>(ServerOptions());
  TcpStore s(ClientOptions(*server));
  std::thread stopper([&] {
    std::this_thread::sleep_for(100ms);
    server.reset();
  });
  try {
    s.wait({"never"}, 30s);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kIo) << e.what();
  }
  stopper.join();
}

TEST(TcpStoreTest, ClientReconnectsAfterTheServerComesBack) {
  auto server = std::make_unique<TcpStoreServer>(ServerOptions());
  uint16_t port = server->port();
  TcpStore s(ClientOptions(*server));
  s.set_string("k", "1");
  server.reset();
  EXPECT_THROW(s.set_string("k", "2"), Error);
  TcpStoreServerOptions again = ServerOptions();
  again.port = port;
  server = std::make_unique<TcpStoreServer>(again);
  s.set_string("k", "3");  // a fresh connection and handshake
  EXPECT_EQ(s.get_string("k"), "3");
}

// A server that was up and is gone (its process ended) refuses the reconnection: the call fails
// at once with kIo instead of retrying refusals until connect_timeout (a kTimeout), so a rank
// reporting a failure through a dead store is not held for a minute per call.
TEST(TcpStoreTest, AReconnectionToAServerThatIsGoneFailsAtOnce) {
  auto server = std::make_unique<TcpStoreServer>(ServerOptions());
  TcpStoreOptions o = ClientOptions(*server);
  o.connect_timeout = std::chrono::hours(1);
  TcpStore s(o);
  s.set_string("k", "1");
  server.reset();
  EXPECT_THROW(s.set_string("k", "2"), Error);  // the connection closes under the call
  for (int i = 0; i < 2; ++i) {
    try {
      s.set_string("k", "3");
      ADD_FAILURE() << "set on a store that is gone succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kIo) << e.what();
      EXPECT_NE(std::string(e.what()).find("cannot reach the store"), std::string::npos)
          << e.what();
    }
  }
}

// A server that refuses a request as malformed (an ERROR of kProtocol) closes the connection:
// the client reports the server's reason and reconnects on its next call, instead of failing
// that call on the closed stream.
TEST(TcpStoreTest, ARequestTheServerRefusesAsMalformedIsReportedAndTheNextCallReconnects) {
  net::Socket listener;
  ASSERT_TRUE(net::Socket::Listen("127.0.0.1", 0, 4, &listener).ok());
  std::thread server([&] {
    for (int i = 0; i < 2; ++i) {
      net::Socket c;
      if (!listener.Accept(Deadline(10s), &c).ok()) return;
      std::string peer;
      if (!net::ServerHandshake(c, kToken, "store", Deadline(10s), &peer).ok()) return;
      net::FrameHeader h;
      std::vector<uint8_t> request;
      if (!net::RecvFrame(c, wire::kMaxPayload, Deadline(10s), &h, &request).ok()) return;
      net::WireWriter w;
      if (i == 0) {
        w.PutU8(static_cast<uint8_t>(Code::kProtocol));
        w.PutString("malformed SET: the key is cut short");
        (void)net::SendFrame(c, wire::kError, 0, h.tag, w.data(), Deadline(10s));
      } else {
        (void)net::SendFrame(c, wire::kOk, 0, h.tag, {}, Deadline(10s));
      }
    }
  });
  TcpStoreOptions o;
  o.port = listener.local_port();
  o.token = kToken;
  o.connect_timeout = 10s;
  o.timeout = 10s;
  TcpStore s(o);
  try {
    s.set_string("k", "1");
    ADD_FAILURE() << "a refused request succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kProtocol) << e.what();
    EXPECT_NE(std::string(e.what()).find("malformed SET: the key is cut short"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(s.set_string("k", "2"));  // a fresh connection: the second accept
  server.join();
}

TEST(TcpStoreTest, ConnectTimesOutAgainstAStalledServer) {
  // A listener that accepts TCP connections but never handshakes.
  net::Socket listener;
  ASSERT_TRUE(net::Socket::Listen("127.0.0.1", 0, 4, &listener).ok());
  TcpStoreOptions o;
  o.port = listener.local_port();
  o.token = kToken;
  o.connect_timeout = 200ms;
  try {
    TcpStore s(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kTimeout) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(o.port)), std::string::npos);
  }
}

TEST(TcpStoreTest, AServerThatStopsAnsweringFailsTheCallWithinTheTimeout) {
  // Handshakes properly, then never replies.
  net::Socket listener;
  ASSERT_TRUE(net::Socket::Listen("127.0.0.1", 0, 4, &listener).ok());
  net::Socket accepted;
  std::thread mute([&] {
    ASSERT_TRUE(listener.Accept(Deadline(10s), &accepted).ok());
    std::string peer;
    EXPECT_TRUE(net::ServerHandshake(accepted, kToken, "mute", Deadline(10s), &peer).ok());
  });
  TcpStoreOptions o;
  o.port = listener.local_port();
  o.token = kToken;
  o.timeout = 200ms;
  TcpStore s(o);
  mute.join();
  try {
    s.add("k", 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kTimeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("store at 127.0.0.1:"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cadre::store
