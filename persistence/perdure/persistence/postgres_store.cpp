#include "perdure/persistence/postgres_store.hpp"
#include "perdure/persistence/detail/postgres/postgres_internal.hpp"

#include <pqxx/pqxx>

#include <map>
#include <set>
#include <thread>
#include <unordered_set>

#include "perdure/pqxx_session.hpp"
#include "perdure/persistence/detail/channel.hpp"
#include "perdure/persistence/detail/migrations.hpp"
#include "perdure/persistence/detail/pg_array.hpp"
#include "perdure/persistence/detail/sql/pg_sql.hpp"
#include "perdure/persistence/detail/sql/pg_text.hpp"
#include "perdure/persistence/detail/shared_sql.hpp"
#include "perdure/persistence/detail/retry.hpp"
#include "perdure/persistence/detail/sql/rows.hpp"

namespace perdure::persistence {

using namespace detail::pg;






postgres_store::postgres_store(const store_options& opts)
  : url_(opts.url), schema_(opts.schema), retry_budget_(opts.retry_budget),
    lease_epoch_(opts.lease_epoch),
    idle_transaction_timeout_(opts.idle_transaction_timeout) {
  // A server starting up or shutting down refuses connections for a
  // while: retried within the budget like any lost connection.
  try {
    with_retry([] { return 0; }); // connects (see with_retry)
  } catch (const perdure::error& ex) {
    throw perdure::error(ex.code() == errc::store_error
                           ? errc::store_unavailable
                           : ex.code(),
                         std::string{"cannot connect to PostgreSQL: "}
                           + ex.what());
  }
}

postgres_store::~postgres_store() = default;

void postgres_store::migrate() {
  with_retry([&] {
    auto schema = conn_->quote_name(schema_);
    pqxx::work w{*conn_};
    // Serialise concurrent start-ups of several processes.
    w.exec("SELECT pg_advisory_xact_lock(7302198253)");
    w.exec("CREATE SCHEMA IF NOT EXISTS " + schema);
    w.exec("CREATE TABLE IF NOT EXISTS " + schema
           + ".schema_migrations (version INT PRIMARY KEY, description TEXT "
             "NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())");
    std::set<int> applied;
    for (const auto& row :
         w.exec("SELECT version FROM " + schema + ".schema_migrations"))
      applied.insert(row[0].as<int>());
    for (auto& m : detail::postgres_migrations(schema)) {
      if (applied.count(m.version))
        continue;
      for (auto& sql : m.statements)
        w.exec(sql);
      w.exec_params("INSERT INTO " + schema
                      + ".schema_migrations (version, description) VALUES "
                        "($1, $2)",
                    m.version, m.description);
    }
    w.commit();
    return 0;
  });
  // Prepared statements refer to tables that may only exist now.
  with_retry([&] {
    connect();
    return 0;
  });
}

void postgres_store::notify(std::string_view payload) {
  with_retry([&] {
    pqxx::nontransaction w{*conn_};
    w.exec_prepared("notify", detail::delivery_channel(schema_),
                    std::string{payload});
  });
}


} // namespace perdure::persistence

// -- executors and listing --------------------------------------------------------

namespace perdure::persistence {


// -- objects ------------------------------------------------------------------------


} // namespace perdure::persistence

namespace perdure::persistence {

template <class Transaction>
void postgres_store::in_sql(
  const std::function<void(detail::sql_tx&)>& body) {
  with_retry([&] {
    Transaction t{*conn_};
    detail::pg_tx tx{t, prepared_, schema_, schema_prefix_};
    body(tx);
    t.commit(); // a no-op without a transaction
    return 0;
  });
}

void postgres_store::in_work(
  const std::function<void(pqxx::transaction_base&)>& body) {
  with_retry([&] {
    pqxx::work w{*conn_};
    body(w);
    w.commit();
    return 0;
  });
}

void postgres_store::in_autocommit(
  const std::function<void(pqxx::transaction_base&)>& body) {
  with_retry([&] {
    pqxx::nontransaction n{*conn_};
    body(n);
    return 0;
  });
}

} // namespace perdure::persistence

namespace perdure::persistence {

void postgres_store::read(const std::function<void(detail::sql_tx&)>& body) {
  in_sql<pqxx::read_transaction>(body);
}

void postgres_store::write(const std::function<void(detail::sql_tx&)>& body) {
  in_sql<pqxx::work>(body);
}

void postgres_store::autocommit(
  const std::function<void(detail::sql_tx&)>& body) {
  in_sql<pqxx::nontransaction>(body);
}

} // namespace perdure::persistence
