// What a claim of a partitioned queue takes: reading the first ready items
// (and more partitions' heads only when those are not enough) chooses as
// reading every partition's heads does.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <tuple>

#include "perdure/persistence/detail/queue_choice.hpp"

namespace {

using namespace perdure::persistence;
using detail::queue_candidate;

bool before(const queue_candidate& a, const queue_candidate& b) {
  return std::tie(a.priority, a.seq) < std::tie(b.priority, b.seq);
}

/// Each partition's first `n` items of `ready`, by priority then age.
std::vector<queue_candidate> heads_of(std::vector<queue_candidate> ready,
                                      std::int64_t n) {
  std::sort(ready.begin(), ready.end(), before);
  std::map<std::string, std::int64_t> taken;
  std::vector<queue_candidate> heads;
  for (auto& c : ready)
    if (taken[c.partition_key]++ < n)
      heads.push_back(c);
  return heads;
}

TEST(queue_choice, the_first_ready_items_choose_as_every_partitions_heads) {
  std::mt19937 rng{27};
  auto pick = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>{lo, hi}(rng);
  };
  int read_more_used = 0;
  for (int round = 0; round < 5000; ++round) {
    queue_claim_request req;
    req.queue.name = "q";
    req.queue.partition_concurrency = pick(1, 4);
    if (pick(0, 3) == 0)
      req.queue.concurrency = pick(1, 12);
    req.capacity = pick(1, 8);
    req.filter.names = {"w"};
    auto partitions = pick(1, 30);
    auto priorities = pick(1, 3);
    std::vector<queue_candidate> ready;
    auto items = pick(0, 200);
    for (int i = 0; i < items; ++i) {
      // Skewed: partition 0 is busy.
      auto p = pick(0, 2) == 0 ? 0 : pick(0, partitions - 1);
      ready.push_back({"i" + std::to_string(i), "w", "",
                       "p" + std::to_string(p), true, pick(0, priorities - 1),
                       i + 1});
    }
    detail::queue_load load;
    std::int64_t running = 0;
    for (int p = 0; p < partitions; ++p)
      if (auto n = pick(0, *req.queue.partition_concurrency); n > 0) {
        load.running_by_partition["p" + std::to_string(p)] = n;
        running += n;
      }
    load.running = running;

    auto expected = detail::choose_claims(
      req, load, heads_of(ready, detail::heads_per_partition(req)));

    auto sorted = ready;
    std::sort(sorted.begin(), sorted.end(), before);
    std::vector<queue_candidate> first(
      sorted.begin(),
      sorted.begin()
        + std::min<std::int64_t>(sorted.size(), detail::first_ready_to_read(req)));
    auto got = detail::choose_in_turns(
      req, load, first, [&](std::vector<queue_candidate>& more) {
        ++read_more_used;
        more = heads_of(ready, detail::heads_per_partition(req));
        std::shuffle(more.begin(), more.end(), rng);
        return false;
      });
    // The same items in the same order. (`concurrency_bound` may differ:
    // the first items hold a partition's later ones too, left for its
    // limit, which the heads alone do not show.)
    ASSERT_EQ(got.ids, expected.ids) << "round " << round;
  }
  // Both ways were taken: the first items alone, and more heads read.
  EXPECT_GT(read_more_used, 500);
  EXPECT_LT(read_more_used, 4500);
}

} // namespace
