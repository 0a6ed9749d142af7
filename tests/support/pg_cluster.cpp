#include "support/pg_cluster.hpp"

#include <pqxx/pqxx>

#include <cstdlib>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <unistd.h>

namespace perdure::test {

namespace {

/// Runs `cmd` with the shell; throws if it fails.
void run(const std::string& cmd) {
  if (std::system(cmd.c_str()) != 0)
    throw std::runtime_error("command failed: " + cmd);
}

/// Returns the newest PostgreSQL bin directory, or "".
std::string find_bin() {
  std::string best;
  std::error_code ec;
  for (auto& entry :
       std::filesystem::directory_iterator{"/usr/lib/postgresql", ec}) {
    auto bin = entry.path() / "bin";
    if (std::filesystem::exists(bin / "pg_ctl") && bin.string() > best)
      best = bin.string();
  }
  return best;
}

/// Returns a loopback port nothing listens on (probably).
int free_port() {
  std::random_device rd;
  return 40000 + static_cast<int>(rd() % 20000);
}

} // namespace

bool pg_cluster::available() {
  return !find_bin().empty() && ::geteuid() == 0
         && std::system("id postgres >/dev/null 2>&1") == 0;
}

pg_cluster::pg_cluster() : bin_(find_bin()) {
  if (bin_.empty())
    throw std::runtime_error("no PostgreSQL binaries under /usr/lib/postgresql");
  char tmpl[] = "/tmp/perdure-fault-pg.XXXXXX";
  if (!mkdtemp(tmpl))
    throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  run("chown postgres " + dir_);
  run("runuser -u postgres -- " + bin_ + "/initdb -D " + dir_
      + "/data -A trust -U postgres --no-sync >/dev/null");
  for (int attempt = 0;; ++attempt) {
    port_ = free_port();
    try {
      start();
      break;
    } catch (const std::exception&) {
      if (attempt == 5)
        throw;
    }
  }
  run("runuser -u postgres -- " + bin_ + "/createdb -h 127.0.0.1 -p "
      + std::to_string(port_) + " perdure_test");
  url_ = "postgresql://postgres@127.0.0.1:" + std::to_string(port_)
         + "/perdure_test";
}

pg_cluster::~pg_cluster() {
  std::system(("runuser -u postgres -- " + bin_ + "/pg_ctl -D " + dir_
               + "/data -m immediate stop >/dev/null 2>&1")
                .c_str());
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void pg_cluster::pg_ctl(const std::string& args) {
  run("runuser -u postgres -- " + bin_ + "/pg_ctl -D " + dir_ + "/data -l "
      + dir_ + "/log " + args + " >/dev/null");
}

void pg_cluster::start() {
  pg_ctl("-w -o \"-p " + std::to_string(port_) + " -k " + dir_
         + " -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300\" start");
}

void pg_cluster::stop(const char* mode) {
  pg_ctl(std::string{"-w -m "} + mode + " stop");
}

void pg_cluster::restart(const char* mode) {
  pg_ctl("-w -m " + std::string{mode} + " -o \"-p " + std::to_string(port_)
         + " -k " + dir_
         + " -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300\" restart");
}

int pg_cluster::kill_backends() {
  pqxx::connection c{url_};
  pqxx::nontransaction nt{c};
  auto res = nt.exec("SELECT count(pg_terminate_backend(pid)) FROM "
                     "pg_stat_activity WHERE pid <> pg_backend_pid() AND "
                     "backend_type = 'client backend'");
  return res[0][0].as<int>();
}

void pg_cluster::refuse_connections(bool refuse) {
  auto admin = url_.substr(0, url_.rfind('/')) + "/postgres";
  pqxx::connection c{admin};
  pqxx::nontransaction nt{c};
  nt.exec(std::string{"ALTER DATABASE perdure_test WITH ALLOW_CONNECTIONS "}
          + (refuse ? "false" : "true"));
  if (refuse)
    nt.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
            "datname = 'perdure_test'");
}

} // namespace perdure::test
