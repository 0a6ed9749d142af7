#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "perdure/persistence/codec.hpp"

using namespace perdure;
using namespace perdure::persistence;

namespace {

struct order {
  std::string id;
  std::vector<int> items;
  std::map<std::string, double> prices;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(CEREAL_NVP(id), CEREAL_NVP(items), CEREAL_NVP(prices));
  }

  friend bool operator==(const order&, const order&) = default;
};

order sample() {
  return {"o-1\n\"quoted\"\\", {1, 2, 3}, {{"book", 9.5}, {"pen", 1.25}}};
}

} // namespace

TEST(codec, json_round_trips_a_user_type_on_one_readable_line) {
  auto bytes = encode(sample(), encoding::json);
  EXPECT_EQ(bytes.find('\n'), std::string::npos) << bytes;
  EXPECT_NE(bytes.find("\"items\""), std::string::npos) << bytes;
  EXPECT_EQ(decode<order>(bytes), sample());
}

TEST(codec, binary_round_trips_and_is_tagged) {
  auto bytes = encode(sample(), encoding::binary);
  ASSERT_FALSE(bytes.empty());
  EXPECT_EQ(bytes.front(), detail::binary_tag);
  EXPECT_EQ(decode<order>(bytes), sample());
}

TEST(codec, decoding_reads_either_encoding) {
  auto json = encode(std::string{"x"}, encoding::json);
  auto bin = encode(std::string{"x"}, encoding::binary);
  EXPECT_EQ(decode<std::string>(json), "x");
  EXPECT_EQ(decode<std::string>(bin), "x");
}

TEST(codec, strings_with_nul_bytes_survive_both_encodings) {
  std::string s{"a\0b\0c", 5};
  EXPECT_EQ(decode<std::string>(encode(s, encoding::json)), s);
  EXPECT_EQ(decode<std::string>(encode(s, encoding::binary)), s);
}

TEST(codec, garbage_is_a_decode_failed_error_not_a_crash) {
  for (std::string bad : {std::string{"not json"}, std::string{"{\"value\": "},
                          std::string{"\x01\x02"}, std::string{}}) {
    try {
      decode<order>(bad);
      FAIL() << "decoded garbage: " << bad;
    } catch (const perdure::error& ex) {
      EXPECT_EQ(ex.code(), errc::decode_failed);
    }
  }
}

TEST(codec, a_payload_of_another_type_is_a_decode_failed_error) {
  auto bytes = encode(std::string{"text"});
  try {
    decode<order>(bytes);
    FAIL();
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::decode_failed);
  }
}

namespace {

/// A binary payload: the tag, cereal's byte-order byte, then `body`.
std::string binary_payload(std::string body) {
  return std::string{"\x01\x01", 2} + body;
}

} // namespace

TEST(codec, a_length_beyond_the_payload_is_refused_before_allocating) {
  // Found by the decoder fuzz test: a string "of 16 GiB" in 12 bytes made
  // the decoder allocate and zero all of it.
  std::string huge{"\x00\x00\x00\x00\x04\x00\x00\x00xx", 10};
  try {
    decode<std::string>(binary_payload(huge));
    FAIL() << "decoded a 16 GiB string from 12 bytes";
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::decode_failed);
    EXPECT_NE(std::string{ex.what()}.find("bytes left"), std::string::npos)
      << ex.what();
  }
}

TEST(codec, a_bool_stored_as_another_byte_is_refused) {
  // Found by the fuzz test under UBSan: reading 4 as a bool is undefined.
  try {
    decode<bool>(binary_payload(std::string{"\x04", 1}));
    FAIL() << "decoded 4 as a bool";
  } catch (const perdure::error& ex) {
    EXPECT_EQ(ex.code(), errc::decode_failed);
  }
  EXPECT_TRUE(decode<bool>(encode(true, encoding::binary)));
  EXPECT_FALSE(decode<bool>(encode(false, encoding::binary)));
}
