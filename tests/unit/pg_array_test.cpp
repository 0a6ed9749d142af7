#include <gtest/gtest.h>

#include "perdure/persistence/detail/pg_array.hpp"

using perdure::persistence::detail::pg_array;
using perdure::persistence::detail::to_hex;

TEST(pg_array, quotes_and_escapes_every_element) {
  pg_array a;
  a.add("plain").add("with \"quotes\"").add("back\\slash").add("comma,brace}");
  EXPECT_EQ(a.str(),
            R"({"plain","with \"quotes\"","back\\slash","comma,brace}"})");
}

TEST(pg_array, spells_null_and_numbers_bare) {
  pg_array a;
  a.add_opt(std::nullopt).add(42).add_opt(std::string{"x"});
  EXPECT_EQ(a.str(), R"({NULL,42,"x"})");
}

TEST(pg_array, an_empty_string_is_an_element) {
  pg_array a;
  a.add("").add("");
  EXPECT_EQ(a.str(), R"({"",""})");
}

TEST(pg_array, hex_keeps_every_byte) {
  EXPECT_EQ(to_hex(std::string{"\x00\xff\x10", 3}), "00ff10");
}
