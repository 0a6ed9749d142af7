#include "support/small_disk.hpp"

#include <sys/mount.h>

#include <cstdio>
#include <cstdlib>

namespace perdure::test {

small_disk::small_disk(int megabytes) {
  char tmpl[] = "/tmp/perdure-full.XXXXXX";
  if (mkdtemp(tmpl) == nullptr)
    return;
  dir_ = tmpl;
  auto opts = "size=" + std::to_string(megabytes) + "m";
  mounted_ = ::mount("tmpfs", dir_.c_str(), "tmpfs", 0, opts.c_str()) == 0;
}

small_disk::~small_disk() {
  if (mounted_)
    ::umount2(dir_.c_str(), MNT_DETACH);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::filesystem::path small_disk::fill() {
  auto path = dir() / "filler";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr)
    return path;
  std::string chunk(64 * 1024, 'x');
  while (std::fwrite(chunk.data(), 1, chunk.size(), f) == chunk.size()) {
  }
  std::string byte(1, 'x');
  while (std::fwrite(byte.data(), 1, 1, f) == 1 && std::fflush(f) == 0) {
  }
  std::fclose(f);
  return path;
}

} // namespace perdure::test
