#pragma once

// Reads what cereal's PortableBinaryOutputArchive wrote, from a byte range,
// refusing any length larger than the bytes left. cereal's own input
// archive resizes a string or container to the length it reads before
// reading its elements: a payload of thirty bytes claiming a 19 GB string
// made a process allocate and zero 19 GB (found by the decoder fuzz test).
// Here such a payload is a decode error. (A container of empty elements
// longer than the payload is refused too; no Perdure user stores one.)

#include <cereal/archives/portable_binary.hpp>
#include <cereal/cereal.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace perdure::persistence::detail {

class bounded_binary_input_archive
  : public cereal::InputArchive<bounded_binary_input_archive,
                                cereal::AllowEmptyClassElision> {
public:
  explicit bounded_binary_input_archive(std::string_view bytes)
    : cereal::InputArchive<bounded_binary_input_archive,
                           cereal::AllowEmptyClassElision>(this),
      next_(bytes.data()),
      end_(bytes.data() + bytes.size()) {
    std::uint8_t little = 0;
    (*this)(little); // the writer's byte order, as cereal writes it first
    swap_ = (little != 0) != cereal::portable_binary_detail::is_little_endian();
  }

  /// Returns how many bytes are left to read.
  std::size_t remaining() const noexcept {
    return static_cast<std::size_t>(end_ - next_);
  }

  template <std::size_t DataSize>
  void load_binary(void* data, std::size_t size) {
    if (size == 0)
      return; // an empty container's data: maybe a null pointer
    if (size > remaining())
      throw cereal::Exception("wanted " + std::to_string(size)
                              + " bytes, the payload has "
                              + std::to_string(remaining()) + " left");
    std::memcpy(data, next_, size);
    next_ += size;
    if (swap_) {
      auto* p = static_cast<std::uint8_t*>(data);
      for (std::size_t i = 0; i < size; i += DataSize)
        cereal::portable_binary_detail::swap_bytes<DataSize>(p + i);
    }
  }

private:
  const char* next_;
  const char* end_;
  bool swap_ = false;
};

template <class T>
std::enable_if_t<std::is_arithmetic_v<T>>
CEREAL_LOAD_FUNCTION_NAME(bounded_binary_input_archive& ar, T& t) {
  ar.template load_binary<sizeof(T)>(std::addressof(t), sizeof(t));
}

/// A bool is one byte, 0 or 1: any other value would be undefined
/// behaviour to read as a bool.
inline void CEREAL_LOAD_FUNCTION_NAME(bounded_binary_input_archive& ar,
                                      bool& b) {
  std::uint8_t byte = 0;
  ar.template load_binary<1>(&byte, 1);
  if (byte > 1)
    throw cereal::Exception("a bool stored as " + std::to_string(byte));
  b = byte == 1;
}

template <class T>
void CEREAL_SERIALIZE_FUNCTION_NAME(bounded_binary_input_archive& ar,
                                    cereal::NameValuePair<T>& t) {
  ar(t.value);
}

/// A length: never more elements than bytes left.
template <class T>
void CEREAL_SERIALIZE_FUNCTION_NAME(bounded_binary_input_archive& ar,
                                    cereal::SizeTag<T>& t) {
  ar(t.size);
  if (static_cast<std::uint64_t>(t.size) > ar.remaining())
    throw cereal::Exception("a length of " + std::to_string(t.size)
                            + " in a payload with "
                            + std::to_string(ar.remaining())
                            + " bytes left");
}

template <class T>
void CEREAL_LOAD_FUNCTION_NAME(bounded_binary_input_archive& ar,
                               cereal::BinaryData<T>& bd) {
  using element = std::remove_pointer_t<T>;
  ar.template load_binary<sizeof(element)>(bd.data,
                                           static_cast<std::size_t>(bd.size));
}

} // namespace perdure::persistence::detail

CEREAL_REGISTER_ARCHIVE(perdure::persistence::detail::bounded_binary_input_archive)
// Half of CEREAL_SETUP_ARCHIVE_TRAITS: the output archive maps back to
// cereal's own input archive already.
namespace cereal::traits::detail {
template <>
struct get_output_from_input<
  perdure::persistence::detail::bounded_binary_input_archive> {
  using type = cereal::PortableBinaryOutputArchive;
};
} // namespace cereal::traits::detail
