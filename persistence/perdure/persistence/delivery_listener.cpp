#include "perdure/persistence/delivery_listener.hpp"

#include <pqxx/pqxx>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "perdure/persistence/detail/channel.hpp"
#include "perdure/persistence/detail/log.hpp"
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
    // LISTEN before the constructor returns: a run that looks at the store
    // after this hears of everything committed after its look.
    try {
      subscribe();
    } catch (const std::exception& ex) {
      detail::log_to(opts_.logger)
        .warn("perdure: delivery listener cannot connect yet ({})", ex.what());
    }
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
      if (auto n = notice::parse(payload))
        f_(*n);
    }

    const callback& f_;
  };

  void subscribe() {
    receiver_.reset();
    conn_ = std::make_unique<pqxx::connection>(opts_.url);
    receiver_ = std::make_unique<receiver>(
      *conn_, detail::delivery_channel(opts_.schema), on_notice_);
    conn_->get_notifs(); // LISTEN is in effect from here on
  }

  void run() {
    using namespace std::chrono_literals;
    while (!stopping_) {
      try {
        if (!receiver_)
          subscribe();
        on_notice_(notice{notice::kind::missed, {}, {}}); // sent before LISTEN
        // Polling as the fallback: look anyway every `sweep_every`, however
        // many other notices arrive meanwhile (a notice is lost if its
        // sender crashed between commit and NOTIFY; a busy channel must not
        // postpone the look for ever).
        auto last_sweep = std::chrono::steady_clock::now();
        while (!stopping_) {
          conn_->await_notification(0, 200'000);
          auto now = std::chrono::steady_clock::now();
          if (now - last_sweep >= sweep_every) {
            last_sweep = now;
            on_notice_(notice{notice::kind::sweep_due, {}, {}});
          }
        }
      } catch (const std::exception& ex) {
        receiver_.reset();
        conn_.reset();
        if (stopping_)
          return;
        detail::log_to(opts_.logger)
          .warn("perdure: delivery listener lost its connection ({}); "
                "reconnecting",
                ex.what());
        for (int i = 0; i < 10 && !stopping_; ++i)
          std::this_thread::sleep_for(50ms);
      }
    }
    receiver_.reset();
  }

  store_options opts_;
  callback on_notice_;
  std::unique_ptr<pqxx::connection> conn_;
  std::unique_ptr<receiver> receiver_; // before conn_ goes
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
    // Where the notices stand now, before the constructor returns: none
    // written after this is skipped.
    try {
      open();
    } catch (const std::exception& ex) {
      detail::log_to(opts_.logger)
        .warn("perdure: could not read notices yet ({})", ex.what());
      db_.reset();
    }
    thread_ = std::thread{[this] { run(); }};
  }

  ~sqlite_listener() override {
    stopping_ = true;
    thread_.join();
  }

private:
  void open() {
    db_ = open_store(opts_);
    last_ = static_cast<sqlite_store&>(*db_).notices_after(-1).front().first;
  }

  void run() {
    using namespace std::chrono_literals;
    auto last_sweep = std::chrono::steady_clock::now();
    while (!stopping_) {
      try {
        if (!db_)
          open();
        auto& lite = static_cast<sqlite_store&>(*db_);
        if (!announced_) {
          announced_ = true;
          on_notice_(notice{notice::kind::missed, {}, {}}); // before we looked
        }
        for (auto& [id, payload] : lite.notices_after(last_)) {
          last_ = id;
          if (auto n = notice::parse(payload))
            on_notice_(*n);
        }
        auto now = std::chrono::steady_clock::now();
        if (now - last_sweep >= sweep_every) {
          last_sweep = now;
          on_notice_(notice{notice::kind::sweep_due, {}, {}});
        }
      } catch (const std::exception& ex) {
        detail::log_to(opts_.logger)
          .warn("perdure: could not read notices ({}); trying again",
                ex.what());
        db_.reset();
        announced_ = false;
      }
      for (int i = 0; i < 4 && !stopping_; ++i)
        std::this_thread::sleep_for(poll_every / 4);
    }
  }

  std::unique_ptr<store> db_;
  std::int64_t last_ = -1;
  bool announced_ = false;
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
