#pragma once

// A tmpfs of a test's own, mounted on a fresh directory and unmounted
// after, so a test can fill the disk under a store (the tests run as root,
// as scripts/test does; `mounted()` says whether it worked).

#include <filesystem>
#include <string>

namespace perdure::test {

class small_disk {
public:
  explicit small_disk(int megabytes);
  ~small_disk();

  small_disk(const small_disk&) = delete;
  small_disk& operator=(const small_disk&) = delete;

  bool mounted() const noexcept {
    return mounted_;
  }

  std::filesystem::path dir() const {
    return dir_;
  }

  /// Fills the disk up with a file (to the last byte); returns its path.
  std::filesystem::path fill();

private:
  std::string dir_;
  bool mounted_ = false;
};

} // namespace perdure::test
