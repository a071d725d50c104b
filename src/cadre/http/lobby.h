// The lobby: connections wait here, watched by one epoll thread, until a whole request head (and
// its small body) has arrived; only then does a worker thread serve them (see server.h).
//
// Thread-safety: Add(), Close() and Stop() from any thread; the rest is the lobby thread's own.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cadre/http/bytes.h"

namespace cadre::http {

using Clock = std::chrono::steady_clock;

// How many connections are open (waiting, or at a worker): a stop waits for none.
class Tally {
 public:
  void Add();
  void Remove();
  void WaitForNone();

 private:
  std::mutex mutex_;
  std::condition_variable none_;
  size_t open_ = 0;  // guarded by mutex_
};

struct Connection {
  Connection(int socket, Tally& tally);
  ~Connection();  // closes the socket
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  const int fd;
  Tally& tally;
  Bytes buffer;                            // read and not yet served: the start of the next request
  size_t requests = 0;                     // served on this connection
  Clock::time_point since = Clock::now();  // idle since, or its head's first byte came
  size_t want = std::string::npos;         // the request's size, once its head has ended
  bool draining = false;                   // refused: what the client still sends is thrown away
  size_t drained = 0;
  Clock::time_point drain_until;
};

struct LobbyLimits {
  size_t max_head = 32 << 10;
  std::chrono::seconds head_timeout{30};
  std::chrono::seconds idle_timeout{60};
  size_t max_idle = 4096;
};

// The body of a refusal (408, 414, 431) in the program's error shape.
using RefusalBody =
    std::function<std::string(int status, const std::string& code, const std::string& message)>;

// Answers `c` with `status` (408, 413, 414, 431, or 503 with Retry-After: 5) and
// `Connection: close`, shuts its sending side and sets it draining: once in the lobby, what the
// client still sends is read and thrown away for a little while, so that closing does not reset
// the connection under the answer.
void Refuse(Connection& c, const RefusalBody& body, int status, const std::string& code,
            const std::string& message);

// Shuts the sending side of `c`, answered already, and sets it draining as Refuse() does.
void Drain(Connection& c);

class Lobby {
 public:
  using Dispatch = std::function<void(std::unique_ptr<Connection>)>;

  Lobby(LobbyLimits limits, RefusalBody refusal, Dispatch dispatch);
  ~Lobby();
  Lobby(const Lobby&) = delete;
  Lobby& operator=(const Lobby&) = delete;

  void Start();
  // A connection that comes after Stop() is closed. One that is draining (Refuse) is closed once
  // its client stops sending, or after a little while.
  void Add(std::unique_ptr<Connection> c);
  // From now on a connection with nothing sent is closed (those waiting now, and those that come
  // back from a worker); one whose request has begun to arrive is dispatched once it is whole.
  void Close();
  // Closes every waiting connection and ends the thread.
  void Stop();

 private:
  using Waiting = std::unordered_map<int, std::unique_ptr<Connection>>;

  void Wake();
  void Run();
  void Admit(std::unique_ptr<Connection> c);
  void Drop(Waiting::iterator it);
  // Reads what `it` has sent; false when it left the lobby (dispatched or dropped).
  bool Readable(Waiting::iterator it);
  void Expire();
  // Closing: reads what each waiting connection has sent and closes those that sent nothing.
  void CloseIdle();

  LobbyLimits limits_;
  const RefusalBody refusal_;
  const Dispatch dispatch_;
  int epoll_ = -1;
  int wake_ = -1;
  std::thread thread_;
  std::mutex mutex_;
  bool closing_ = false;                               // guarded by mutex_
  bool stopped_ = false;                               // guarded by mutex_
  std::vector<std::unique_ptr<Connection>> incoming_;  // guarded by mutex_
  Waiting waiting_;                                    // the lobby thread's own
};

}  // namespace cadre::http
