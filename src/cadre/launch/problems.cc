#include "cadre/launch/problems.h"

#include <algorithm>
#include <cctype>

namespace cadre::launch {
namespace {

// Levenshtein distance, case-insensitive (a key typed as "Nodes" is the same typo as "nodse").
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                  std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string Problems::ToString() const {
  std::string out;
  for (const auto& p : list_) out += p.ToString() + "\n";
  return out;
}

std::string DidYouMean(std::string_view word, const std::vector<std::string_view>& candidates) {
  // A third of the length (at least 2) separates typos from different words.
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  std::string_view best;
  size_t best_distance = std::string_view::npos;
  for (auto candidate : candidates) {
    // The distance is at least the difference in length: a megabyte-long value is no typo, and
    // comparing it letter by letter would take seconds.
    const size_t longer = std::max(word.size(), candidate.size());
    if (longer - std::min(word.size(), candidate.size()) > limit) continue;
    size_t d = EditDistance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  if (best_distance > limit) return "";
  return std::string(best);
}

}  // namespace cadre::launch
