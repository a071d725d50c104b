#include "cadre/net/event_loop.h"

#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

namespace cadre::net {
namespace {

using namespace std::chrono_literals;

struct LoopThread {
  EventLoop loop;
  std::thread thread{[this] { loop.Run(); }};
  ~LoopThread() {
    loop.Stop();
    thread.join();
  }
};

TEST(EventLoopTest, PostRunsOnTheLoopThread) {
  LoopThread lt;
  std::promise<bool> in_loop;
  lt.loop.Post([&] { in_loop.set_value(lt.loop.InLoopThread()); });
  EXPECT_TRUE(in_loop.get_future().get());
  EXPECT_FALSE(lt.loop.InLoopThread());
}

TEST(EventLoopTest, DispatchesReadableDescriptorsAndRemoveInsideCallback) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  LoopThread lt;
  std::promise<std::string> got;
  std::atomic<int> calls{0};
  lt.loop.Post([&] {
    ASSERT_TRUE(
        lt.loop
            .Add(fds[0], EPOLLIN,
                 [&](uint32_t) {
                   char buf[16];
                   ssize_t n = ::read(fds[0], buf, sizeof(buf));
                   ++calls;
                   lt.loop.Remove(fds[0]);  // its own registration, from inside its callback
                   got.set_value(std::string(buf, static_cast<size_t>(std::max<ssize_t>(n, 0))));
                 })
            .ok());
    EXPECT_FALSE(lt.loop.Add(fds[0], EPOLLIN, [](uint32_t) {}).ok());
  });
  ASSERT_EQ(::write(fds[1], "ping", 4), 4);
  EXPECT_EQ(got.get_future().get(), "ping");
  ASSERT_EQ(::write(fds[1], "more", 4), 4);  // no callback after Remove
  std::promise<void> flushed;
  lt.loop.Post([&] { flushed.set_value(); });
  flushed.get_future().wait();
  EXPECT_EQ(calls.load(), 1);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(EventLoopTest, TimersFireInOrderAndCancelWorks) {
  LoopThread lt;
  std::promise<std::vector<int>> done;
  auto order = std::make_shared<std::vector<int>>();
  lt.loop.Post([&, order] {
    auto now = Clock::now();
    lt.loop.RunAt(now + 30ms, [order] { order->push_back(2); });
    lt.loop.RunAt(now + 10ms, [order] { order->push_back(1); });
    auto cancelled = lt.loop.RunAt(now + 20ms, [order] { order->push_back(99); });
    lt.loop.Cancel(cancelled);
    lt.loop.RunAt(now + 40ms, [&, order] { done.set_value(*order); });
  });
  EXPECT_EQ(done.get_future().get(), (std::vector<int>{1, 2}));
}

TEST(EventLoopTest, StopBeforeRunReturnsAtOnce) {
  EventLoop loop;
  loop.Stop();
  loop.Run();
  loop.Post([] { FAIL() << "posted after stop"; });
}

}  // namespace
}  // namespace cadre::net
