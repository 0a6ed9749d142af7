#pragma once

// The one header users include.

#include "perdure/awakeable.hpp"
#include "perdure/child_handle.hpp"
#include "perdure/client.hpp"
#include "perdure/clock.hpp"
#include "perdure/config.hpp"
#include "perdure/error.hpp"
#include "perdure/object_context.hpp"
#include "perdure/retry_policy.hpp"
#include "perdure/run_status.hpp"
#include "perdure/run_listing.hpp"
#include "perdure/runtime.hpp"
#include "perdure/sql_session.hpp"
#include "perdure/step_failed.hpp"
#include "perdure/task.hpp"
#include "perdure/terminal_error.hpp"
#include "perdure/version.hpp"
#include "perdure/wait_on.hpp"
#include "perdure/workflow_context.hpp"
#include "perdure/workflow_handle.hpp"
