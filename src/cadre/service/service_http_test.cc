// The service's HTTP front over a real socket: a chunked body over the size limit is answered
// 413 in the service's error shape, without being read into memory.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "cadre/service/service.h"

namespace cadre::service {
namespace {
namespace fs = std::filesystem;

// The process's largest resident size so far, in KiB (memory freed since counts too).
long PeakRssKib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// Sends `head`, then a chunked body of `mib` chunks of 1 MiB, until the server answers (or stops
// taking it); returns what the server sent until it closed the connection.
std::string SendChunked(int port, const std::string& head, int mib) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string chunk = "100000\r\n" + std::string(1 << 20, 'x') + "\r\n";
  bool ok = send(fd, head.data(), head.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(head.size());
  for (int i = 0; ok && i < mib; ++i) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 0) > 0) break;  // answered
    for (size_t at = 0; ok && at < chunk.size();) {
      ssize_t n = send(fd, chunk.data() + at, chunk.size() - at, MSG_NOSIGNAL);
      ok = n > 0;
      if (ok) at += static_cast<size_t>(n);
    }
  }
  if (ok) send(fd, "0\r\n\r\n", 5, MSG_NOSIGNAL);
  std::string answer;
  char buffer[65536];
  timeval wait{60, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof(wait));
  for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) answer.append(buffer, n);
  close(fd);
  return answer;
}

TEST(ServiceHttpTest, AChunkedBodyOverTheLimitIs413WithoutBeingReadIntoMemory) {
  const fs::path dir = fs::temp_directory_path() / ("cadre-http-" + std::to_string(getpid()));
  fs::remove_all(dir);
  ServiceOptions options;
  options.data_dir = dir;
  options.port = 0;
  options.slots = 1;
  options.max_body = 1 << 20;
  Service service(options);
  ASSERT_TRUE(service.Start().ok());
  std::thread serving([&] { service.Run(); });
  const std::string head =
      "POST /ml/v4/trainings?version=2020-09-01 HTTP/1.1\r\nHost: x\r\n"
      "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
  const int mib = 64;  // the limit and 63 MiB more
  const long before = PeakRssKib();
  const std::string answer = SendChunked(service.port(), head, mib);
  const long grown = PeakRssKib() - before;
  // Read to its end, the body would have taken 64 MiB (more as its string grew).
  EXPECT_LT(grown, 24 << 10) << "grew by " << grown << " KiB for a " << mib << " MiB body";
  EXPECT_EQ(answer.rfind("HTTP/1.1 413 ", 0), 0u) << answer.substr(0, 500);
  EXPECT_NE(answer.find("\"code\":\"payload_too_large\""), std::string::npos) << answer;
  EXPECT_NE(answer.find("Connection: close"), std::string::npos) << answer;
  // At the limit, a chunked body is read whole (and then the route wants a token).
  const std::string whole =
      SendChunked(service.port(), head.substr(0, head.size() - 2) + "Connection: close\r\n\r\n", 1);
  EXPECT_EQ(whole.rfind("HTTP/1.1 401 ", 0), 0u) << whole.substr(0, 500);
  service.Stop();
  serving.join();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cadre::service
