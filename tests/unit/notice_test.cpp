// What processes tell each other: each notice survives its encoding, and
// text no Perdure wrote parses to nothing (a receiver drops it).

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "perdure/persistence/notice.hpp"

using perdure::persistence::notice;

TEST(notice_test, every_kind_survives_its_encoding) {
  const notice all[] = {
    notice::woken("run-1"),        notice::cancelled("r:2"),
    notice::saga_cancel("trip 7"), notice::created("n"),
    notice::gone("executor-a"),    notice::queued("emails"),
    notice::calls("account", "alice:42"),
    notice::calls("cart", ""), // an empty key is a key
    notice{notice::kind::missed, {}, {}},
    notice{notice::kind::sweep_due, {}, {}},
  };
  for (auto& n : all) {
    auto back = notice::parse(n.encode());
    ASSERT_TRUE(back) << n.encode();
    EXPECT_EQ(back->what, n.what) << n.encode();
    EXPECT_EQ(back->id, n.id) << n.encode();
    EXPECT_EQ(back->key, n.key) << n.encode();
  }
  // What PostgreSQL's enqueue builds in SQL: the prefix, then the queue.
  EXPECT_EQ(notice::prefix(notice::kind::queue_has_items) + "emails",
            notice::queued("emails").encode());
}

TEST(notice_test, text_no_perdure_wrote_parses_to_nothing) {
  for (const char* text : {"", "w", "w:", "wx", "z:id", "!x", "**", "o:type",
                           "o:\x1fkey", "q"})
    EXPECT_FALSE(notice::parse(text)) << '"' << text << '"';
  // Random text: a value or nothing, never a crash.
  std::mt19937_64 rng{7};
  for (int i = 0; i < 20000; ++i) {
    std::string s(rng() % 12, ' ');
    for (auto& c : s)
      c = "wckqxno!*:\x1f" "ab"[rng() % 13];
    if (auto n = notice::parse(s)) {
      EXPECT_EQ(notice::parse(n->encode())->encode(), n->encode()) << s;
    }
  }
}
