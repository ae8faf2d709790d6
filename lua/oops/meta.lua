---@meta oops
-- The `oops` module as data: LuaCATS stubs for every function the C core
-- registers (src/runtime/oops_*.c), for the language server and for review. Loading
-- this file runs nothing: it builds tables of empty functions and returns
-- them. tests/spec/meta_spec.lua compares it with what the binary registers,
-- both ways, so a binding added or removed without its stub fails the specs.
--
-- Two kinds of failure, everywhere (AGENTS.md, "Error reporting"):
--   * a caller's mistake (wrong type, unknown status, call outside a task)
--     RAISES a Lua error;
--   * a runtime failure (database, process, network) RETURNS nil, msg, name,
--     name one of the stable strings of oops.ErrorName below (never a MariaDB
--     error number).
-- Functions marked ---@async WAIT: they yield the calling task and must be
-- called from one (oops.task, oops.wait or a scan); elsewhere they raise
-- "oops.X waits, so it must be called from a task (oops.task or a scan)".
-- The database calls do not yield: each blocks for at most one round trip,
-- bounded by the connection's timeouts.

---@alias oops.LogLevel "debug"|"info"|"warn"|"error"

---@alias oops.Status "INITIALIZED"|"RUNNING"|"BUILD_SUCCEEDED"|"DEPLOYING"|"ROLLING_OUT"|"SUCCEEDED"|"ERROR"|"STOPPED"

-- The names a runtime failure carries (src/error_names.h; db_error_name in
-- src/db.c maps MariaDB error numbers to them). oops.error_names lists them;
-- tests/spec/meta_spec.lua checks this list against it (one "---|" line
-- each). In oops.store, "exists" means an unfinished pipeline already exists
-- for that application/environment.
---@alias oops.ErrorName
---| "exists"      # a unique key already holds the value (ER_DUP_ENTRY): in oops.store, an unfinished pipeline
---| "not_found"   # what the statement names does not exist: a table, the session a KILL names
---| "deadlock"    # the transaction was a deadlock victim and was rolled back
---| "lock_wait"   # a row lock was not granted in time (innodb_lock_wait_timeout)
---| "gone"        # the session was lost (killed, timed out, server gone); oops.locks: the lock session is down
---| "unreachable" # no session could be opened (host, port, credentials, "too many connections"), or not connected
---| "db"          # any other error the database reported (syntax, constraint, ...): msg says which
---| "io"          # a process could not start, no HTTP response came, listening on an address or reading a file failed
---| "invalid"     # input read and refused: a pipeline field, a cron expression, an HTTP request refused before sending

---@class oops
local oops = {}

--- Every oops.ErrorName, in the order above.
---@type oops.ErrorName[]
oops.error_names = { "exists", "not_found", "deadlock", "lock_wait", "gone", "unreachable", "db", "io", "invalid" }

---------------------------------------------------------------- log (oops_log.c)

--- Write one event as a single key=value line on stderr:
--- `ts=... level=info [server=...] scan=... pipeline=... app=... env=... k=v ... msg="..."`.
--- Fields come in that order (scan, pipeline, app, env first, the rest by
--- name); values go through tostring and are quoted with backslash escapes
--- when they hold spaces, quotes, '=' or control characters, so an event never
--- spans two lines. At most 32 fields; keys that are not strings are ignored.
--- Nothing is written below the level set with oops.log_level (default info).
--- Raises on an unknown level or a msg that is not a string.
---@param level oops.LogLevel
---@param msg string
---@param fields? table<string, any>
function oops.log(level, msg, fields) end

--- Set the lowest level written by oops.log and the C core (process-wide).
--- Raises on an unknown level.
---@param level oops.LogLevel
function oops.log_level(level) end

---------------------------------------------------------- tasks (oops_timer.c)

--- Run fn(...) as a task (a coroutine the C side resumes when what it waits
--- for arrives). It starts right away and runs until its first wait, or, when
--- called from inside a running task, as soon as that task waits or ends. An
--- error inside fn is logged with a traceback naming `name` and never reaches
--- the caller. Returns nothing: use oops.wait to get results back.
---@param name string shown in the log when the task fails
---@param fn fun(...): any
---@param ... any arguments for fn
function oops.task(name, fn, ...) end

--- Wait ms milliseconds. Raises outside a task, or when ms is negative or not
--- an integer. Returns false instead of waiting (or when woken early) once the
--- daemon is shutting down.
---@async
---@param ms integer
---@return boolean slept true after ms, false when woken for shutdown
function oops.sleep(ms) end

--- A monotonic clock in milliseconds (for durations, not dates).
---@return integer
function oops.now_ms() end

--- The wall clock: seconds since the epoch, with microseconds.
---@return number
function oops.time() end

--- Suspend the running task until oops.wake(thread, ...) hands it values
--- (get the thread with oops.current before suspending). Raises outside a
--- task.
---@async
---@return any ... the values given to oops.wake
function oops.suspend() end

--- End a task's oops.sleep now: its sleep returns true, as if it had slept
--- (a scan's nap cut short by the watcher). Raises when thread is not a thread.
---@param thread thread
---@return boolean interrupted true when the task was sleeping, false otherwise (nothing happens)
function oops.interrupt(thread) end

--- Resume a task suspended in oops.suspend with the values `...`. It resumes
--- at once, or as soon as the running task waits or ends. Raises when thread
--- is not a thread.
---@param thread thread
---@param ... any
---@return boolean woken true when the thread was suspended, false otherwise (nothing happens)
function oops.wake(thread, ...) end

--- The running coroutine (a task's thread, for oops.wake), or nil on the main
--- thread.
---@return thread|nil
function oops.current() end

--- One turn of the event loop (scripts only; the daemon runs its own loop).
--- Waits for at least one event when something is pending.
---@return boolean pending true while anything (timer, process, request) is still pending
function oops.run_once() end

--- For scripts and specs: run fn(...) as a task, turn the loop until it ends
--- and return its results, or raise its error (with the task's traceback).
--- Raises "oops.wait: the task is waiting for something that will never come"
--- when the loop has nothing left but the task has not ended. Not from inside a
--- task or the daemon: the loop is not re-entrant.
---@param fn fun(...): ...
---@param ... any arguments for fn
---@return any ... what fn returned
function oops.wait(fn, ...) end

------------------------------------------------------- daemon (oops_daemon.c)

--- This server's name, as written in events and logs (`script` under `oopsd lua`
--- until oops.connect names it).
---@return string
function oops.server_name() end

--- Whether the daemon is shutting down (scans should stop starting work).
---@return boolean
function oops.stopping() end

--- The answer to an HTTP request the daemon deferred (an operator's action
--- from the fleet page, engine.http_post): false when it is gone (answered,
--- timed out with 504, its server closed) or outside the daemon.
---@param ticket integer the ticket engine.http_post was given
---@param status integer an HTTP status, 100 to 599
---@param body string the JSON text
---@return boolean answered
function oops.http_answer(ticket, status, body) end

---@class oops.ConnectOptions
---@field db? string mysql://user[:password]@host[:port]/database[?socket=PATH]; default $OOPS_DB
---@field name? string the server name for events (default: unchanged)
---@field locks? boolean open the lock session too (default true)
---@field validate_ms? integer lock session check interval (default 30000)

--- For scripts and specs run with `oopsd lua` (the daemon connects by
--- itself): open the work connection and, unless locks = false, the lock
--- session. Raises when already connected or when the URL is malformed or
--- missing. Returns nil, msg, "unreachable" when the database cannot be
--- reached, nil, msg, "db" when it cannot share locks (Galera, read-only).
---@param opts oops.ConnectOptions
---@return true|nil ok
---@return string? msg
---@return oops.ErrorName? name
function oops.connect(opts) end

--- Apply the schema migrations not yet applied (serialised across servers by
--- GET_LOCK('oops:migrate', 60)). Raises when not connected.
---@return integer|nil applied how many migrations this call applied (0 when up to date)
---@return string? msg
---@return oops.ErrorName? name "lock_wait" when another runner held the migrate lock for 60 s
function oops.migrate() end

-------------------------------------------------------------- db (oops_db.c)

---@class oops.db
oops.db = {}

---@class oops.ExecResult
---@field affected integer rows changed
---@field insert_id integer the AUTO_INCREMENT id generated, 0 when none

--- Run one prepared statement on the work connection with `...` bound to its
--- `?` placeholders (never pasted into the SQL). Parameters: nil (NULL),
--- booleans (1/0), integers, floats, strings (bytes as given). A query returns
--- its rows, each a table column name → value: integer columns as integers,
--- FLOAT/DOUBLE/DECIMAL as floats, everything else (text, dates, JSON) as
--- strings, NULL as an absent field. Any other statement returns
--- {affected=, insert_id=}. Raises on a parameter of another type. Returns
--- nil, msg, name on a database error ("exists" for a duplicate key, "db"
--- for a syntax error, "gone" when the connection was lost, "unreachable"
--- when not connected or it cannot be reopened); a lost connection is
--- reopened by the next call.
---@param sql string
---@param ... nil|boolean|integer|number|string
---@return (table<string, any>[])|oops.ExecResult|nil result
---@return string? msg
---@return oops.ErrorName? name
function oops.db.exec(sql, ...) end

--- Insert one row: `head VALUES row tail` with the row's parameters, e.g.
--- oops.db.insert("INSERT INTO t (a, b)", "(?, NOW(6))", "", a). Rows other
--- tasks insert meanwhile with the same head, row and tail go in the same
--- multi-row statement (tail may be ON DUPLICATE KEY UPDATE ... VALUES(col));
--- when it fails each row is inserted on its own and answered on its own.
--- Only the row may hold placeholders (raises otherwise, or on a count or
--- parameter type that does not fit).
---@param head string
---@param row string
---@param tail? string
---@param ... nil|boolean|integer|number|string
---@return true|nil ok
---@return string? msg
---@return oops.ErrorName? name
function oops.db.insert(head, row, tail, ...) end

--- A point read: sql holds one placeholder, in "IN (?)", and its first
--- column is the key. Lookups other tasks make meanwhile with the same sql go
--- in one statement (each key once); each caller gets the rows of its own
--- key, as oops.db.exec returns them. Only rows whose first column equals
--- the key byte for byte are returned, alone or batched (on a _ci or PAD
--- SPACE column the database also matches "ABC" or "abc " for "abc": those
--- are left out either way, so batching never changes an answer). A key
--- holding a NUL byte raises.
---@param sql string
---@param key string
---@return (table<string, any>[])|nil rows
---@return string? msg
---@return oops.ErrorName? name
function oops.db.lookup(sql, key) end

--- One statement, as oops.db.exec, on the server's own connection (the one
--- the watcher parks in a GET_LOCK wait between ticks) instead of the pool:
--- one at a time, after the daemon's heartbeat. An idle server thereby needs
--- no other work connection (issue 24). Outside the daemon, as oops.db.exec.
---@param sql string
---@param ... nil|boolean|number|string
---@return (table<string, any>[])|{affected: integer, insert_id: integer}|nil result
---@return string? msg
---@return oops.ErrorName? name
function oops.db.own(sql, ...) end

--- As oops.db.own, for a statement that waits up to ms on purpose (the
--- watcher's GET_LOCK): meanwhile other calls take a pool connection rather
--- than queue behind it, except in its last 50 ms or once it is late.
---@param ms integer the longest the statement waits
---@param sql string
---@param ... nil|boolean|number|string
---@return (table<string, any>[])|nil rows
---@return string? msg
---@return oops.ErrorName? name
function oops.db.park(ms, sql, ...) end

--- Milliseconds since the server's own connection (oops.db.own) was last
--- given back; 0 while it is in use, and outside the daemon.
---@return integer
function oops.db.own_idle_ms() end

--- True while the database refuses the pool new connections (too many
--- connections: a busy period, logged and in /healthz db_busy); false
--- otherwise, and without a pool.
---@return boolean
function oops.db.busy() end

--- START TRANSACTION on the work connection. From a task with a pool (the
--- daemon; oops.db.pool in scripts) the task keeps that connection until
--- commit/rollback, and it is rolled back if the task ends first; a second
--- begin in the same task raises.
---@return true|nil ok
---@return string? msg
---@return oops.ErrorName? name
function oops.db.begin() end

--- COMMIT on the work connection.
---@return true|nil ok
---@return string? msg
---@return oops.ErrorName? name
function oops.db.commit() end

--- ROLLBACK on the work connection, best effort: errors are ignored (a lost
--- connection has rolled back already).
---@return nil
function oops.db.rollback() end

--- The database's clock (every age and timeout is computed on it). On
--- success the third value is this server's clock (epoch seconds) at the
--- middle of the statement's own round trip (a wait for a free connection
--- excluded); on failure the error's name.
---@return number|nil epoch seconds with microseconds
---@return string? utc_or_msg "YYYY-MM-DD HH:MM:SS.ffffff" (UTC); the error message on failure
---@return oops.ErrorName|number|nil name_or_local
function oops.db.now() end

--- How many statements the work connections have executed (for benches and
--- tests); 0 when not connected.
---@return integer
function oops.db.statements() end

--- Scripts and specs: from now on a database call made from a task borrows
--- one of n work connections and yields the task until it is done (as in the
--- daemon, which has its own pool: --db-connections); 0 goes back to blocking
--- calls on the one connection. Raises while a call is out on the pool.
---@param n integer 0..64
---@return true
function oops.db.pool(n) end

--------------------------------------------------------- store (oops_store.c)

---@class oops.store
oops.store = {}

---@class oops.PipelineNew
---@field namespace string
---@field application string
---@field environment string
---@field manual? boolean deploy only when asked (default false: auto)
---@field artifact? string
---@field source? string JSON text
---@field trigger? "release"|"rollback" default "release"

---@class oops.Pipeline
---@field id string 12 characters from [a-z0-9]
---@field namespace string
---@field application string
---@field environment string
---@field app string "namespace/application"
---@field status oops.Status
---@field manual boolean
---@field deploy_mode "manual"|"auto"
---@field artifact? string
---@field source? string JSON text
---@field message? string
---@field trigger string "release", "rollback" or "promotion"
---@field deploy_requested_at? string UTC, set once a manual deploy was requested
---@field created_at string "YYYY-MM-DD HH:MM:SS.ffffff" UTC
---@field status_changed_at string UTC
---@field driven_by? string server that made the last transition
---@field status_age number seconds in this status, on the database's clock
---@field lock_owner? integer with list{lock_owner = true}: connection id holding oops:pipeline:ID, absent when free
---@field hold? "approval"|"window"|"freeze"|"slot" why it waits to deploy (while INITIALIZED or BUILD_SUCCEEDED)
---@field override_at? string UTC, set by `oopsctl deploy --override`: windows and freezes hold it no more
---@field rollback_of? string an automatic rollback: the release whose failure made it
---@field promoted_from? string a promotion: the release whose artifact and source it releases
---@field step integer a canary's step being run (1-based; 0 before the first, and for any other rollout)
---@field step_at? string when that step began (UTC, the database's clock)
---@field step_age? number seconds since step_at, on the database's clock
---@field weight? integer the canary weight last confirmed set by the gateway (0-100)
---@field weight_step? integer the step that weight was set for
---@field paused? string why the step waits: "operator" or "inconclusive"
---@field canary_request? string an operator's pending request: "promote", "promote_full" or "abort"
---@field approvals? integer how many distinct persons approved it (issue 39; oopsctl approve); nil: none
---@field approved_by? string their names, comma-separated, in the order they approved

---@class oops.TransitionExtra
---@field slot? {environment: string, count: integer} to DEPLOYING: claim one of count deploy slots first
---@field rollback? string to ERROR: make the automatic rollback with this message

---@class oops.TransitionDone
---@field no_slot boolean no slot was free (or others wait ahead): nothing changed
---@field slots_in_use integer
---@field slots_ahead integer pipelines waiting ahead of this one
---@field slot integer the slot claimed (0 none)
---@field rollback? string the id of the automatic rollback made

---@class oops.PipelineEvent
---@field id integer
---@field type string CREATED, BUILDING, BUILD_SUCCEEDED, DEPLOYING, ROLLING_OUT, SUCCEEDED, FAILED or STOPPED
---@field from? oops.Status absent for CREATED
---@field to oops.Status
---@field message? string
---@field server string
---@field created_at string UTC

---@class oops.ListOptions
---@field statuses? oops.Status[] only these statuses (default all)
---@field min_age? number only pipelines in their status for at least this many seconds
---@field limit? integer at most this many, oldest first (default no limit)
---@field lock_owner? boolean fill lock_owner: the connection id holding the pipeline's lock, absent when free
---@field after? {created_at: string, id: string} only those after this one (the last row of the previous page)
---@field ids? string[] only these pipelines (1 to 1000 ids, read by primary key)

--- Insert an INITIALIZED pipeline and its CREATED event (server = this
--- server's name), in one transaction. Raises when opts is not a table or a
--- field has the wrong type. Returns nil, msg, name when it could not:
--- "exists" (an unfinished pipeline exists for that application and
--- environment), "invalid" (empty or too long field, a name that is not a DNS
--- label, source not JSON), or the database error's name.
---@param opts oops.PipelineNew
---@return string|nil id
---@return string? msg
---@return oops.ErrorName? name
function oops.store.create(opts) end

--- The conditional transition: move pipeline id from `from` to `to` and write
--- the event, only if it is still in `from`. Raises on an unknown status and
--- on a transition not in the table ("illegal transition INITIALIZED ->
--- SUCCEEDED"). false means the pipeline was not in `from` any more (another
--- server won the claim, or it does not exist): nothing changed. On a server
--- with a lock session the update is fenced: it also returns false unless
--- this session holds oops:pipeline:ID right now (the event records the
--- session). nil, msg, "exists" when `to` would make a second unfinished
--- pipeline. With `extra` (a deploy slot, an automatic rollback) it is made
--- in one transaction with them, never batched, and a table says what
--- happened beside it.
---@param id string
---@param from oops.Status
---@param to oops.Status
---@param message? string stored on the pipeline and the event
---@param extra? oops.TransitionExtra
---@return boolean|nil made true when this call made the transition
---@return string|oops.TransitionDone|nil msg_or_done
---@return oops.ErrorName? name
function oops.store.transition(id, from, to, message, extra) end

---@class oops.ActArgs
---@field actor string the person: NAME@page
---@field reason? string checked by the caller (1 to 500 bytes, no control character)
---@field id? string stop, deploy, abort, promote, approve, reject: the pipeline
---@field expect? oops.Status stop: the status the operator saw
---@field override? boolean deploy: release one a window or freeze holds (needs a reason)
---@field full? boolean promote: weight 100 and finish (oopsctl promote --full)
---@field namespace? string rollback: the application's namespace
---@field application? string rollback
---@field environment? string rollback
---@field to? string rollback: the release to redeploy (default the one before the live one); promote_now: the
--- environment it goes to

--- An operator's action (src/operator.c: oopsctl's rules and messages), this
--- server as the event's server, recorded with actor and reason on its event
--- and in the audit log (refusals too). code "ok" with the answer's JSON
--- (what oopsctl --json prints), else "input", "notfound", "stale" or "db"
--- with the one-line message.
---@param action "stop"|"deploy"|"rollback"|"abort"|"promote"|"approve"|"reject"|"promote_now"
---@param args oops.ActArgs
---@return string|nil code
---@return string text JSON or message
---@return oops.ErrorName? name
function oops.store.act(action, args) end

--- Promotion (issue 39): release the artifact and source of release `from`
--- to environment `to` of its application, as one INSERT whose row names
--- `from` in promoted_from (unique: once, whoever tries, at once or later),
--- with its CREATED event. Only while `from` is a SUCCEEDED release or
--- promotion (never a rollback) with no newer pipeline of its target.
--- id, "made" (this call made it) | id, "promoted" (made before) | false,
--- why, "stale" (not a release to promote now) | false, why, "exists" (an
--- unfinished pipeline in `to`: try later) | nil, msg, name.
---@param opts { from: string, to: string, message?: string }
---@return string|false|nil id
---@return string? outcome "made" | "promoted", or why
---@return string? name "stale" | "exists" | an oops.ErrorName
function oops.store.promote(opts) end

--- One pipeline, or false when there is no such id.
---@param id string
---@return oops.Pipeline|false|nil pipeline
---@return string? msg
---@return oops.ErrorName? name
function oops.store.get(id) end

--- Pipelines, oldest first. Raises on an unknown status in opts.statuses.
---@param opts? oops.ListOptions
---@return oops.Pipeline[]|nil pipelines
---@return string? msg
---@return oops.ErrorName? name
function oops.store.list(opts) end

--- Ids of the oldest pipelines in these statuses whose lock no session holds,
--- oldest first, at most opts.limit (1..65535); one statement that stops
--- there. deploy_requested: BUILD_SUCCEEDED ones only with a deploy request, or automatic
--- (held by a window, freeze or slot).
--- Raises on an unknown or missing status or a bad limit.
---@param opts {statuses: oops.Status[], limit: integer, deploy_requested?: boolean}
--- Returns the ids and, in the same order, each one's status.
---@return string[]|nil ids
---@return oops.Status[]|string statuses or, on failure, msg
---@return oops.ErrorName? name
function oops.store.free(opts) end

--- The event trail of one pipeline, oldest first (empty for an unknown id).
---@param id string
---@return oops.PipelineEvent[]|nil events
---@return string? msg
---@return oops.ErrorName? name
function oops.store.events(id) end

---------------------------------------------------------- locks (oops_locks.c)

---@class oops.locks
oops.locks = {}

---@class oops.LockNames
---@field pipeline_prefix string "oops:pipeline:" (+ id): held by the server driving that pipeline
---@field server_prefix string "oops:server:" (+ name): held by that server for the life of its lock session
---@field leader_prefix string "oops:leader:" (+ scan)
---@field migrate string "oops:migrate": serialises migrations
--- scan → its leader lock, for every scan of OOPS_LEADER_SCANS (restart, alert,
--- notify); `oopsctl locks` shows each
---@field leaders table<string, string>

--- The lock names, defined once in src/lock_names.h for C (oopsctl, the
--- daemon) and Lua (the scans, lua/oops/pipelines.lua, the scenarios).
---@type oops.LockNames
oops.locks.names = {
  pipeline_prefix = "oops:pipeline:", server_prefix = "oops:server:", leader_prefix = "oops:leader:",
  migrate = "oops:migrate",
  leaders = { restart = "oops:leader:restart", alert = "oops:leader:alert", notify = "oops:leader:notify",
    retention = "oops:leader:retention", promote = "oops:leader:promote" },
}

--- Take the named lock on this server's lock session (GET_LOCK(name, 0), no
--- waiting). A lock lives as long as the session. Names over 64 characters
--- are shortened the same way on every server. Returns nil, "lock session
--- down", "gone" when the session is down or not connected (fail closed).
---@param name string
---@return boolean|nil held true when held now (also when already held here), false when held elsewhere
---@return string? msg
---@return oops.ErrorName? err_name "gone"
function oops.locks.acquire(name) end

--- oops.locks.acquire for many names in one statement (split only above
--- 65,535 names, MariaDB's placeholder limit).
---@param names string[]
---@return table<string, boolean>|nil held name → held now
---@return integer|string|nil statements the statements sent; on failure the message "lock session down"
---@return oops.ErrorName? name "gone"
function oops.locks.acquire_many(names) end

--- RELEASE_LOCK(name).
---@param name string
---@return boolean|nil released true when it was held here, false when it was not
---@return string? msg "lock session down"
---@return oops.ErrorName? err_name "gone"
function oops.locks.release(name) end

--- RELEASE_LOCK of many names in one statement (per 1,000); names not held
--- here are skipped. Raises when a name is not a string.
---@param names string[]
---@return integer|nil released how many were held here and released
---@return string? msg "lock session down"
---@return oops.ErrorName? err_name "gone"
function oops.locks.release_many(names) end

--- Release every lock held; the session stays open.
---@return nil
function oops.locks.release_all() end

--- Whether this server holds the lock (from the held set, no SQL).
---@param name string
---@return boolean
function oops.locks.holds(name) end

--- A snapshot of the names held, as given to acquire.
---@return string[]
function oops.locks.held() end

--- Whether the lock session is up (false while reconnecting: drive nothing).
---@return boolean
function oops.locks.is_up() end

--- CONNECTION_ID() of the lock session, 0 when down.
---@return integer
function oops.locks.connection_id() end

--- Statements sent on the lock session (for benches and tests).
---@return integer
function oops.locks.statements() end

--- How often the idle lock session is checked (the policy's
--- locks { validate_every }), and the session's wait_timeout (its
--- locks { session_timeout }): seconds, "server" to leave the database
--- server's own, or nil for 3 intervals (at least 3 s). Applied to the open
--- session at once. Raises below 100 ms, or on another session_timeout.
---@param ms integer
---@param session_timeout? integer|"server"
function oops.locks.set_validate_interval(ms, session_timeout) end

------------------------------------------------------------ cron (oops_cron.c)

---@class oops.cron
oops.cron = {}

--- A parsed cron expression (plain data). tostring(handle) is its text.
---@class oops.CronHandle
local CronHandle = {}

--- Parse "minute hour day-of-month month day-of-week", with an optional
--- seconds field first, or a macro (@daily, @hourly, ...). Returns nil and a
--- message naming the field and value ("minute 61 out of range 0-59"), and
--- "invalid", when the text is not a valid expression.
---@param text string
---@return oops.CronHandle|nil handle
---@return string? msg
---@return oops.ErrorName? name "invalid"
function oops.cron.parse(text) end

--- Whether name is a time zone of the system's database (like Europe/Paris or
--- UTC).
---@param name string
---@return boolean ok
---@return string? msg why not, e.g. "unknown time zone (no /usr/share/zoneinfo/Mars/Olympus)"
function oops.cron.valid_timezone(name) end

--- A local time, as oops.cron.civil gives it (1 = Monday .. 7 = Sunday).
---@class oops.CivilTime
---@field year integer
---@field month integer 1..12
---@field day integer 1..31
---@field hour integer 0..23
---@field min integer 0..59
---@field sec integer 0..60
---@field wday integer 1 = Monday .. 7 = Sunday
---@field isdst boolean daylight saving time in effect
---@field zone string the zone's abbreviation then, like "CET" ("" when unknown)

--- The wall clock at epoch in time zone tz (nil or "" = the server's), as
--- localtime_r gives it. An unknown zone counts as UTC, so check it with
--- oops.cron.valid_timezone first. Raises for an epoch the C library cannot
--- convert.
---@param epoch integer seconds since the epoch
---@param tz? string e.g. "Europe/Paris"
---@return oops.CivilTime
function oops.cron.civil(epoch, tz) end

--- The epochs at which the wall-clock minute t ({ year, month, day, hour,
--- min }) starts in time zone tz (nil or "" = the server's). Normally one:
--- earliest == latest. In a fall-back overlap the minute occurs twice:
--- earliest before the clocks go back, latest after. In a spring-forward gap
--- it never occurs: both are the first instant after the gap (02:30 on a day
--- whose clocks jump 02:00 -> 03:00 gives 03:00). Raises for a field out of
--- range or a date that does not exist (2026-02-29); nil, nil when the C
--- library cannot place it.
---@param t { year: integer, month: integer, day: integer, hour: integer, min: integer }
---@param tz? string
---@return integer|nil earliest
---@return integer|nil latest
function oops.cron.epoch(t, tz) end

--- Does the expression fire at this second, in time zone tz? A 5-field
--- expression fires only at second 0. tz defaults to the server's; an unknown
--- zone counts as UTC, so check it with oops.cron.valid_timezone first.
---@param epoch integer seconds since the epoch
---@param tz? string e.g. "Europe/Paris"
---@return boolean
function CronHandle:matches(epoch, tz) end

--- The first firing strictly after epoch in time zone tz (default the
--- server's), or nil when there is none within 5 years ("0 0 30 2 *").
--- Across DST changes, wall-clock times that do not exist are skipped and
--- repeated ones fire once.
---@param epoch integer
---@param tz? string
---@return integer|nil epoch
function CronHandle:next(epoch, tz) end

--- Whether the expression was written with a seconds field (6 fields).
---@return boolean
function CronHandle:has_seconds() end

--- The text the handle was parsed from.
---@return string
function CronHandle:text() end

------------------------------------------------------ sandbox (oops_sandbox.c)

---@class oops.sandbox
oops.sandbox = {}

---@class oops.SandboxLimits
---@field memory? integer bytes the state may grow by while fn runs (allocations past it fail)
---@field time_ms? integer wall-clock deadline, also inside string.find/match/gmatch/gsub
---@field instructions? integer VM instructions fn may run

--- Run policy code under limits. A limit passed stops the code for good (a
--- pcall inside cannot catch its way past). While it runs, the pattern
--- functions refuse a pattern whose worst-case backtracking on the subject
--- is too long. Returns true and fn's results, or false, message, kind
--- ("memory" | "time" | "instructions" | "error" | "yield"), traceback.
---@param fn function
---@param limits oops.SandboxLimits
---@param ... any passed to fn
---@return boolean ok
---@return any ...
function oops.sandbox.run(fn, limits, ...) end

--- The text of a regular file (after symlinks) of at most max_bytes, opened
--- without blocking; else nil, "path: why" (a FIFO, a device, too large), "io".
---@param path string
---@param max_bytes integer
---@return string|nil text
---@return string? err
---@return oops.ErrorName? name "io"
function oops.sandbox.read(path, max_bytes) end

------------------------------------------------------------ fs (oops_fs.c)

---@class oops.fs
oops.fs = {}

--- A new directory, 0700 whatever the umask (the tools' work directories).
---@param path string
---@return true|nil ok
---@return string? err "PATH: why"
function oops.fs.mkdir_private(path) end

--- The bearer token a file holds (a canary analysis' `token`), read as
--- --http-token-file is: a regular file only its owner may read, at least
--- 16 bytes, bounded; one trailing newline stripped. The error names the
--- file and what is wrong, never its content.
---@param path string
---@return string|nil token
---@return string? err
function oops.fs.read_token(path) end

------------------------------------------------------------ proc (oops_proc.c)

---@class oops.proc
oops.proc = {}

---@class oops.ProcOptions
---@field argv string[] the command, executed directly (never through a shell); argv[1] is looked up in PATH
---@field env? table<string, string> added on top of the base environment; in the daemon, an OOPS_DB* name raises
--- base: all of this process's environment (tools); default: the allow-list of
--- AGENTS.md, "The environment a child process gets"
---@field inherit_env? boolean
---@field clear_env? boolean base: nothing. Whatever the base, OOPS_DB* is never inherited
---@field cwd? string
---@field stdin? string written to the child's stdin, then closed (default /dev/null)
---@field timeout_ms? integer on expiry SIGTERM to the process group, SIGKILL 2 s later (default none)
---@field max_output? integer bytes kept per stream, the last ones (default 1 MiB)

---@class oops.ProcStartOptions: oops.ProcOptions
---@field on_exit? fun(result: oops.ProcResult) runs as a task of its own when the process ended
---@field on_output? fun(stream: integer, data: string) every chunk read; stream 1 stdout, 2 stderr

---@class oops.ProcResult
---@field ok boolean exited with status 0, no signal, no timeout
---@field status integer exit status (0 when a signal ended it)
---@field signal integer the signal that ended it, 0 if none
---@field timed_out boolean timeout_ms elapsed and the process was killed
---@field stdout string
---@field stderr string

--- Run a child process in its own process group and wait for it to end (and
--- for its output to be read). Raises outside a task and when argv is not a
--- non-empty list of strings (`argv must be a list of strings like {"make",
--- "image"} (never a shell string)`) or another option has the wrong type.
--- Returns nil, msg, "io" when it cannot start (`cannot run "nosuchcmd": no
--- such file or directory`). A failing command is not an error: see result.ok.
---@async
---@param opts oops.ProcOptions
---@return oops.ProcResult|nil result
---@return string? msg
---@return oops.ErrorName? name "io"
function oops.proc.run(opts) end

--- Start a child process and return at once; on_exit receives the result.
--- Needs no task. Same raises and failures as oops.proc.run.
---@param opts oops.ProcStartOptions
---@return oops.ProcHandle|nil handle
---@return string? msg
---@return oops.ErrorName? name "io"
function oops.proc.start(opts) end

--- A process started by oops.proc.start. Dropping the handle does not stop the
--- process.
---@class oops.ProcHandle
local ProcHandle = {}

--- Send a signal to the process group (ignored once it has exited).
---@param sig? integer default 15 (SIGTERM)
function ProcHandle:kill(sig) end

--- The process id (also its process group id); kept after it exited.
---@return integer
function ProcHandle:pid() end

--- Whether the process has not been seen to exit yet (false from on_exit on).
---@return boolean
function ProcHandle:running() end

------------------------------------------------------------ http (oops_http.c)

---@class oops.http
oops.http = {}

---@class oops.HttpRequest
---@field url string absolute http:// or https:// URL, without user:password@ unless allow_userinfo
---@field method? "GET"|"POST" default "GET"
---@field headers? table<string, string>|string[] {["Name"] = "value"} or {"Name: value", ...}, at most 32
---@field body? string POST body
--- the whole exchange (default 10000): a receiver that accepts and stays
--- silent, or trickles its body, is cut there
---@field timeout_ms? integer
---@field max_body? integer response body bound in bytes, 1 to 64 MiB (default 4 MiB)
--- past max_body, keep its first max_body bytes, stop reading and return the
--- response with truncated = true (default false: nil, "response body exceeds
--- N bytes", "io")
---@field truncate? boolean
--- path of a PEM bundle of the CAs trusted for https:// instead of the system
--- store (a private receiver's CA); peer and host name are verified either way
---@field ca? string
--- send a URL's user:password@ as Basic authentication (default false: refused, "invalid")
---@field allow_userinfo? boolean

---@class oops.HttpResponse
---@field status integer any status: a 404 or 500 is a response, not an error
---@field body string
---@field truncated boolean the body went past max_body and holds its first max_body bytes (with truncate)

--- Send one request and wait for the response (redirects are not followed;
--- TLS always verified; a kept connection to the same host is reused).
--- Raises outside a task and when opts, url or another option has the wrong
--- type (max_body out of range). Returns nil, msg, "io" when no response came
--- ("connect to 127.0.0.1:9 failed: Connection refused", "timed out after
--- 2000 ms", "TLS certificate of hooks.example:443 refused (system CA store):
--- SSL certificate problem: unable to get local issuer certificate"), nil,
--- msg, "invalid" when the request was refused before sending (unsupported
--- scheme or method; userinfo in the URL, never shown: "URL with userinfo
--- refused (https://***@hooks.example:443): ..."; a ca that cannot be read:
--- "cannot read CA file /etc/x.pem: No such file or directory").
---@async
---@param opts oops.HttpRequest
---@return oops.HttpResponse|nil response
---@return string? msg
---@return oops.ErrorName? name "io" | "invalid"
function oops.http.request(opts) end

---@class oops.HttpServeOptions
--- "HOST:PORT" (HOST an IPv4 literal, [IPv6] or localhost; PORT 0 = any free
--- port), default "127.0.0.1:0"
---@field listen? string
--- answers one request: status [, body [, content_type]]
---@field handler fun(req: oops.HttpServerRequest): integer, string?, string?
--- request body limit in bytes (default 1 MiB); a longer body is answered 413
--- without the handler
---@field max_body? integer

---@class oops.HttpServerRequest
---@field method string "GET", "POST", "PUT", ... as sent
---@field path string percent-decoded, without the query string
---@field body string the whole request body ("" when none)
---@field headers table<string, string> by lower-case name; a repeated header's values joined with ", "

--- Serve HTTP on the loop: handler(req) answers every request (any method)
--- and returns status (integer 200-599) [, body [, content_type]] (default
--- content type "text/plain; charset=utf-8"). The handler runs on the loop
--- thread, outside any task: it must not wait (oops.sleep, oops.http.request,
--- oops.proc.run raise there; coroutine.yield fails) nor run the loop, and
--- should be quick. An error in it, or a result of the wrong type, is logged
--- ("HTTP handler for POST /hook failed: ...") and answered 500.
--- The server is closed by :close(), when it is garbage collected (keep a
--- reference while it should serve) and when the state closes. An open server
--- does not by itself keep `oopsd lua` or oops.wait running: it answers
--- while something else is pending (a task's sleep, a request, a process).
--- Raises when opts, listen, handler or max_body has the wrong type; returns
--- nil, msg, "io" when it cannot listen ("cannot listen on 127.0.0.1:7070:
--- Address already in use"). Needs no task.
---@param opts oops.HttpServeOptions
---@return oops.HttpServer|nil server
---@return string? msg
---@return oops.ErrorName? name "io"
function oops.http.serve(opts) end

--- A server started by oops.http.serve. Also a to-be-closed value:
--- `local srv <close> = oops.http.serve{...}`.
---@class oops.HttpServer
local HttpServer = {}

--- The port actually bound (the free port chosen for PORT 0); kept after close.
---@return integer
function HttpServer:port() end

--- "http://HOST:PORT" without a trailing slash: HOST as in listen, 127.0.0.1
--- for localhost or 0.0.0.0.
---@return string
function HttpServer:url() end

--- Stop listening and drop open connections; the handler is not called any
--- more. Idempotent; allowed from inside the handler (that request's
--- response may then not be sent).
---@return nil
function HttpServer:close() end

------------------------------------------------------ metrics (oops_metrics.c)

---@class oops.metrics
oops.metrics = {}

--- Add v (default 1) to a counter. Series are kept in C: they survive a
--- policy reload. Labels are sorted by name; at most 16.
---@param name string a Prometheus metric name
---@param labels? table<string, any>
---@param v? number
function oops.metrics.inc(name, labels, v) end

--- Set a gauge to v (default 0).
---@param name string
---@param labels? table<string, any>
---@param v? number
function oops.metrics.set(name, labels, v) end

--- Add one observation v (default 0) to a summary or histogram (_sum += v,
--- _count += 1). A histogram's buckets are the caller's counters NAME_bucket
--- with an `le` label.
---@param name string
---@param labels? table<string, any>
---@param v? number
function oops.metrics.observe(name, labels, v) end

--- The value of a series: a counter's or gauge's value, a summary's or
--- histogram's count;
--- 0 for a series never updated.
---@param name string
---@param labels? table<string, any>
---@return number
function oops.metrics.get(name, labels) end

--- Declare a metric's kind and its HELP line (kept across reloads; the last
--- declaration wins). For metrics only Lua updates; the C core declares its own.
---@param name string
---@param kind "counter"|"gauge"|"summary"|"histogram"
---@param help string one line
function oops.metrics.describe(name, kind, help) end

--- Milliseconds since the daemon last served /metrics; nil when it never did;
--- 0 outside the serving daemon (tools and specs).
---@return integer|nil
function oops.metrics.read_ago_ms() end

-- The userdata types, by the metatable name the binary registers them under,
-- so the specs can compare their methods too. Not part of the API.
return oops, { ["oops.cron"] = CronHandle, ["oops.proc"] = ProcHandle, ["oops.http.server"] = HttpServer }
