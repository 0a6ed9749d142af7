#include "perdure/persistence/delivery_listener.hpp"

#include <pqxx/pqxx>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "perdure/persistence/detail/channel.hpp"
#include "perdure/persistence/sqlite_store.hpp"

namespace perdure::persistence {

namespace {

/// How often the runtime looks at the store for deliveries whose notice
/// never came.
constexpr std::chrono::seconds sweep_every{5};

class pg_listener final : public delivery_listener {
public:
  pg_listener(store_options opts, callback on_notice)
    : opts_(std::move(opts)), on_notice_(std::move(on_notice)) {
    thread_ = std::thread{[this] { run(); }};
  }

  ~pg_listener() override {
    stopping_ = true;
    thread_.join();
  }

private:
  struct receiver final : pqxx::notification_receiver {
    receiver(pqxx::connection_base& c, const std::string& channel,
             const callback& f)
      : notification_receiver(c, channel), f_(f) {
    }

    void operator()(const std::string& payload, int) override {
      f_(payload);
    }

    const callback& f_;
  };

  void run() {
    using namespace std::chrono_literals;
    while (!stopping_) {
      try {
        pqxx::connection conn{opts_.url};
        receiver r{conn, detail::delivery_channel(opts_.schema), on_notice_};
        conn.get_notifs(); // LISTEN is in effect from here on
        on_notice_("*");   // anything sent before now: look at the store
        // Polling as the fallback: look anyway every `sweep_every`, however
        // many other notices arrive meanwhile (a notice is lost if its
        // sender crashed between commit and NOTIFY; a busy channel must not
        // postpone the look for ever).
        auto last_sweep = std::chrono::steady_clock::now();
        while (!stopping_) {
          conn.await_notification(0, 200'000);
          auto now = std::chrono::steady_clock::now();
          if (now - last_sweep >= sweep_every) {
            last_sweep = now;
            on_notice_("*");
          }
        }
      } catch (const std::exception& ex) {
        if (stopping_)
          return;
        spdlog::warn("perdure: delivery listener lost its connection ({}); "
                     "reconnecting",
                     ex.what());
        for (int i = 0; i < 10 && !stopping_; ++i)
          std::this_thread::sleep_for(50ms);
      }
    }
  }

  store_options opts_;
  callback on_notice_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

/// SQLite has no NOTIFY: another process sharing the file (a helper that
/// resolves awakeables, say) writes its notices to a table, polled here.
class sqlite_listener final : public delivery_listener {
public:
  /// How often the notices table is read: the delay a delivery from
  /// another process waits at most (one indexed read of a local file).
  static constexpr std::chrono::milliseconds poll_every{100};

  sqlite_listener(store_options opts, callback on_notice)
    : opts_(std::move(opts)), on_notice_(std::move(on_notice)) {
    thread_ = std::thread{[this] { run(); }};
  }

  ~sqlite_listener() override {
    stopping_ = true;
    thread_.join();
  }

private:
  void run() {
    using namespace std::chrono_literals;
    std::unique_ptr<store> db;
    std::int64_t last = -1;
    auto last_sweep = std::chrono::steady_clock::now();
    while (!stopping_) {
      try {
        if (!db) {
          db = open_store(opts_);
          last = -1;
        }
        auto& lite = static_cast<sqlite_store&>(*db);
        if (last < 0) {
          last = lite.notices_after(-1).front().first;
          on_notice_("*"); // anything sent before now: look at the store
        }
        for (auto& [id, payload] : lite.notices_after(last)) {
          last = id;
          on_notice_(payload);
        }
        auto now = std::chrono::steady_clock::now();
        if (now - last_sweep >= sweep_every) {
          last_sweep = now;
          on_notice_("*");
        }
      } catch (const std::exception& ex) {
        spdlog::warn("perdure: could not read notices ({}); trying again",
                     ex.what());
        db.reset();
      }
      for (int i = 0; i < 4 && !stopping_; ++i)
        std::this_thread::sleep_for(poll_every / 4);
    }
  }

  store_options opts_;
  callback on_notice_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

} // namespace

std::unique_ptr<delivery_listener>
listen_for_deliveries(const store_options& opts,
                      delivery_listener::callback on_notice) {
  if (opts.url.rfind("postgres", 0) == 0)
    return std::make_unique<pg_listener>(opts, std::move(on_notice));
  if (opts.url.rfind("sqlite:", 0) == 0)
    return std::make_unique<sqlite_listener>(opts, std::move(on_notice));
  return nullptr;
}

} // namespace perdure::persistence
