// Problems: every mistake found in a job request, each with the field path it concerns, so that
// the user sees all of them at once ("execution.compute_configuration.nodes: expected an
// integer, got 'two'") and nothing starts until the list is empty.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cadre::launch {

struct Problem {
  std::string path;  // "framework.name", "--nodes", or "manifest" for the file as a whole
  std::string message;

  std::string ToString() const { return path + ": " + message; }
};

class Problems {
 public:
  void Add(std::string path, std::string message) {
    list_.push_back({std::move(path), std::move(message)});
  }
  bool empty() const { return list_.empty(); }
  size_t size() const { return list_.size(); }
  const std::vector<Problem>& list() const { return list_; }
  // One problem per line.
  std::string ToString() const;

 private:
  std::vector<Problem> list_;
};

// The candidate closest to `word` by edit distance when it is close enough to be a likely typo
// ("nodse" -> "nodes"); empty otherwise.
std::string DidYouMean(std::string_view word, const std::vector<std::string_view>& candidates);

}  // namespace cadre::launch
