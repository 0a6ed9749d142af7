#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>
#include <variant>
#include <vector>

#include "perdure/error.hpp"
#include "perdure/persistence/records.hpp"
#include "perdure/persistence/store.hpp"

namespace perdure::persistence {


/// How a write sent to the journal writer ended.
enum class write_ack : std::uint8_t {
  /// Committed; the caller may act on it.
  committed,
  /// Rejected by the fence: the caller no longer owns the run.
  rejected,
  /// The database failed beyond the store's retry budget; nothing committed.
  failed,
  /// An append met an index that holds an outcome already (an in-doubt
  /// write sent again, or a second copy of the run): nothing was written,
  /// and the outcome stored there stands (see `write_result::recorded`).
  superseded,
};

/// A write's fate, as its callback hears it.
struct write_result {
  write_ack ack = write_ack::committed;
  /// With `superseded`: the entry stored at the index, which stands.
  std::optional<journal_entry> recorded;
  /// With `failed`: why (`store_unavailable`, `store_full`, `store_error`).
  errc error = errc::none;
  /// A creation committed: stored ENQUEUED instead of PENDING (see
  /// `batch_result::enqueued`), and its place in its key's inbox.
  bool enqueued = false;
  std::int64_t inbox_seq = 0;
};

/// The group-commit writer: every run creation, journal append and run
/// completion goes through it. Writes from many actors collect in a queue
/// while the previous batch commits; the next free connection takes them in
/// one transaction (a write another depends on is called back before that
/// one is submitted), and each writer is called back after the commit
/// (never before). Under load
/// this turns one commit per step into one commit per batch. A batch that
/// fails is retried write by write, so one bad write fails alone.
class journal_writer {
public:
  /// Called on the writer's thread once the write's fate is known.
  using callback = std::function<void(write_result)>;

  struct options {
    /// Most writes committed in one transaction.
    std::size_t max_batch = 2048;
    /// Where group commits are timed and sized (null: nowhere); must
    /// outlive the writer.
    const store_metrics* metrics = nullptr;
    /// Where failed batches are logged (null: spdlog's default logger).
    std::shared_ptr<spdlog::logger> logger;
  };

  /// Starts one writer thread per connection. Each thread takes whatever is
  /// queued when it is free, so with several connections one batch commits
  /// while the next is written. A run never has two writes in flight, so
  /// their order across connections does not matter, with one exception:
  /// a key's calls are stored, and its invocations end, in the order they
  /// were submitted. Those writes (creations and ends of invocations) wait
  /// in the queue while another connection commits earlier ones of their
  /// key.
  journal_writer(std::vector<std::unique_ptr<store>> connections,
                 options opts);

  /// Starts one writer thread on `db`.
  journal_writer(std::unique_ptr<store> db, options opts);
  explicit journal_writer(std::unique_ptr<store> db)
    : journal_writer(std::move(db), options{}) {
  }

  /// Commits what is queued, then stops the thread.
  ~journal_writer();

  journal_writer(const journal_writer&) = delete;
  journal_writer& operator=(const journal_writer&) = delete;

  /// Queues `w`: a run's creation (`committed` once inserted, `rejected`
  /// if its id was taken), a fenced journal append or a fenced run
  /// completion (`rejected` by the fence). `may_commit_here`: the calling
  /// thread may block for a commit (a step thread, never an actor's): if a
  /// writer connection is idle, the caller commits what is queued on it
  /// itself (its write included), saving the hand-off to a writer thread,
  /// and `done` runs on the caller's thread before this returns.
  void submit(write w, callback done, bool may_commit_here = false);

  void create(run_record run, callback done) {
    submit(std::move(run), std::move(done));
  }

  void append(append_write w, callback done, bool may_commit_here = false) {
    submit(std::move(w), std::move(done), may_commit_here);
  }

  void complete(completion_write w, callback done) {
    submit(std::move(w), std::move(done));
  }

  /// Returns how many connections (writer threads) it has.
  std::size_t connections() const noexcept {
    return connections_.size();
  }

  /// Returns how many transactions the writer has committed.
  std::uint64_t batches_committed() const;

private:
  struct request {
    persistence::write write;
    callback done;
    /// A hash of the object key whose order it keeps (0: none).
    std::uint64_t key = 0;
  };

  using slot = write_batch::slot;

  /// A connection and its thread. A caller may borrow an idle one (`lent`)
  /// to commit on its own thread; the lane's thread waits meanwhile.
  struct lane {
    store* db = nullptr;
    std::condition_variable cv;
    bool idle = false;
    bool lent = false;
    /// The keys (`request::key`) of the batch it commits.
    std::unordered_set<std::uint64_t> keys;
  };

  static std::vector<std::unique_ptr<store>> one(std::unique_ptr<store> db);
  /// Returns the key whose order `w` keeps (a key's creation or end, with
  /// several lanes), or 0.
  std::uint64_t key_of(const write& w) const;
  /// Under mtx_: whether a lane other than `l` commits a write of `key`.
  bool in_flight_elsewhere(const lane& l, std::uint64_t key) const;
  void run(lane& l);
  /// Under mtx_: moves up to `max_batch` queued requests into `taken`,
  /// leaving those whose key another lane commits.
  void take(lane& l, std::vector<request>& taken);
  /// Under mtx_: wakes one idle lane for queued writes, unless one was
  /// woken and has not taken them yet (one wake-up per burst of writes,
  /// not one per write).
  void wake_one();
  /// Commits `taken` on `db` and calls each request back.
  void process(store& db, std::vector<request>& taken);

  /// Commits `batch`; returns each slot's result, or nothing if it failed
  /// (setting `unavailable` if the database could not be reached, or had
  /// no room: then one write alone fails as well).
  std::optional<std::vector<write_result>>
  commit(store& db, const write_batch& batch, const std::vector<slot>& slots,
         bool& unavailable, errc& error);

  std::vector<std::unique_ptr<store>> connections_;
  options opts_;
  mutable std::mutex mtx_;
  std::vector<std::unique_ptr<lane>> lanes_;
  std::vector<request> queue_;
  bool stopping_ = false;
  /// Whether a lane was woken and has not taken the queue yet.
  bool wake_pending_ = false;
  std::uint64_t batches_ = 0;
  std::vector<std::thread> threads_;
};

} // namespace perdure::persistence
