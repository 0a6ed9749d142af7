#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "perdure/persistence/records.hpp"

namespace perdure::persistence {

/// Virtual objects: who holds a key, its state, its inbox. An invocation is
/// a run (see `run_record::object_type`): created like any run, ended by an
/// `invocation_commit` through the writer. One role of `store`.
class object_store {
public:
  virtual ~object_store() = default;

  /// Takes key (`type`, `key`) for `executor` if nobody holds it, `executor`
  /// holds it already, or its holder's lease is not live (stopped, lapsed),
  /// and its oldest unended invocation is one `can` admits (or it has
  /// none): the key's epoch goes up by one, and its unended invocations
  /// come under `executor` at that epoch (ENQUEUED ones become PENDING; the
  /// oldest, if PENDING, counts a recovery: it may have begun). Returns the
  /// object and those invocations, oldest first; nothing if another live
  /// executor holds the key, `executor` lost its lease, or the oldest
  /// invocation is not for it; in that last case a key `executor` holds is
  /// given up as by `release_object`.
  virtual std::optional<claimed_object>
  claim_object(std::string_view type, std::string_view key,
               std::string_view executor, const object_claim_filter& can)
    = 0;

  /// Gives the key up if `owner` holds it: any live process whose code can
  /// run its oldest invocation may claim it (it is announced). The
  /// invocations `owner` held go back to ENQUEUED (none of them began).
  virtual void release_object(std::string_view type, std::string_view key,
                              const fence& owner)
    = 0;

  /// Takes the key's ENQUEUED invocations (stored by other processes since
  /// the claim) under `owner`, the key's holder, oldest first. Returns
  /// nothing if `owner` no longer holds the key.
  virtual std::optional<std::vector<run_record>>
  take_inbox(std::string_view type, std::string_view key, const fence& owner)
    = 0;

  /// Returns the object's row, if it has one.
  virtual std::optional<object_record> get_object(std::string_view type,
                                                  std::string_view key)
    = 0;

  /// Returns up to `limit` keys of the types `can` registers with unended
  /// invocations that need `executor`: keys nobody live holds whose oldest
  /// invocation `can` admits (see `claim_object`), and its own keys whose
  /// invocations wait unseen (ENQUEUED, or PENDING under another epoch),
  /// or, `all_ours` (a start: nothing runs here yet), every own key with
  /// unended invocations; as (type, key).
  virtual std::vector<std::pair<std::string, std::string>>
  claimable_objects(std::string_view executor, const object_claim_filter& can,
                    std::int64_t limit, bool all_ours)
    = 0;

  /// Returns up to `limit` keys of `type` after `after`, in key order.
  virtual std::vector<std::string> list_object_keys(std::string_view type,
                                                    std::string_view after,
                                                    std::int64_t limit)
    = 0;
};

} // namespace perdure::persistence
