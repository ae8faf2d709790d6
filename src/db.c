#include "db.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <mysql.h>
#include <errmsg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "db_fiber.h"
#include "error_names.h"

#define STMT_CACHE_SIZE 48

typedef struct cached_stmt {
    char *sql;
    uint64_t hash; /* of sql: a lookup compares 48 numbers, then one text */
    MYSQL_STMT *st;
    uint64_t used;
} cached_stmt;

static uint64_t sql_hash(const char *s)
{
    uint64_t h = 14695981039346656037ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

struct db_conn {
    MYSQL *m;
    db_config cfg;
    uint64_t connection_id;
    bool alive;
    unsigned last_error; /* db_last_error */
    uint64_t statements;
    uint64_t prepares;
    uint64_t clock;     /* for LRU */
    uint64_t used_ms;   /* monotonic time of the last statement answered (or of the connect) */
    uint64_t opened_ms; /* monotonic time the session was opened, 0 before */
    int fd;             /* the socket whose watcher is kept (db_fiber_wait_kept), -1 when none */
    cached_stmt cache[STMT_CACHE_SIZE];
};

/*
 * Every call that may wait for the server goes through Connector/C's
 * non-blocking API: START(&ret, ...) and, while it returns what it waits for,
 * CONT(&ret, obj, ready) after db_fiber_wait() — which yields to the loop in
 * a fiber and poll()s elsewhere (db_fiber.h).
 */
static int nb_wait(MYSQL *m, int status)
{
    unsigned t = (status & MYSQL_WAIT_TIMEOUT) ? mysql_get_timeout_value_ms(m) : 0;
    return db_fiber_wait((int)mysql_get_socket(m), status, t);
}

/* The loop of a non-blocking call, wait(who, status) answering each wait. */
#define NB_LOOP(wait, who, ret, start_call, cont_fn, obj)                                          \
    do {                                                                                           \
        int nb_status_ = (start_call);                                                             \
        while (nb_status_)                                                                         \
            nb_status_ = cont_fn(&(ret), (obj), wait((who), nb_status_));                          \
    } while (0)
#define NB(m, ...) NB_LOOP(nb_wait, m, __VA_ARGS__)

/* A statement on an established session waits on the socket's kept watcher
 * (no system call to arm it); the connect above does not. c->fd records the
 * socket whose watcher the connection keeps. */
static int nb_wait_kept(db_conn *c, int status)
{
    unsigned t = (status & MYSQL_WAIT_TIMEOUT) ? mysql_get_timeout_value_ms(c->m) : 0;
    c->fd = (int)mysql_get_socket(c->m);
    return db_fiber_wait_kept(c->fd, status, t);
}

#define NBK(c, ...) NB_LOOP(nb_wait_kept, c, __VA_ARGS__)

/*
 * Before the session's socket may close (an error, a close), and as soon as
 * the library has closed it: its kept watcher goes, and so does the number.
 * Once closed, the number may be handed to another connection's socket (or
 * the lock session's): forgetting it later would break that one's watcher.
 */
static void forget_socket(db_conn *c)
{
    db_fiber_forget(c->fd);
    c->fd = -1;
}

/* The library closes the socket by itself when it finds the session lost
 * (also while closing a statement, which reports nothing): noted at once,
 * before the number can be reused. */
static bool socket_closed(db_conn *c)
{
    if (!c->m || c->m->net.pvio)
        return false;
    forget_socket(c);
    c->alive = false;
    return true;
}

static void stmt_close(db_conn *c, MYSQL_STMT *st)
{
    mysql_stmt_close(st);
    socket_closed(c);
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- values ------------------------------------------------------------ */

db_value db_int(long long v) { return (db_value){.type = DB_INT, .i = v}; }
db_value db_double(double v) { return (db_value){.type = DB_DOUBLE, .d = v}; }
db_value db_null(void) { return (db_value){.type = DB_NULL}; }
db_value db_text(const char *s)
{
    if (!s)
        return db_null();
    return (db_value){.type = DB_TEXT, .s = s, .len = strlen(s)};
}

/* ---- connections ------------------------------------------------------- */

bool db_errno_is_connection(unsigned code)
{
    return code == CR_SERVER_GONE_ERROR || code == CR_SERVER_LOST || code == CR_CONNECTION_ERROR ||
           code == CR_CONN_HOST_ERROR || code == CR_UNKNOWN_HOST ||
#ifdef CR_SERVER_LOST_EXTENDED
           code == CR_SERVER_LOST_EXTENDED ||
#endif
           code == 1927 /* ER_CONNECTION_KILLED */ || code == 1053 /* ER_SERVER_SHUTDOWN */ ||
           code == 4031 /* ER_CLIENT_INTERACTION_TIMEOUT */;
}

bool db_errno_is_busy(unsigned code)
{
    return code == DB_ER_CON_COUNT || code == DB_ER_TOO_MANY_USER_CONNECTIONS ||
           code == DB_ER_USER_LIMIT_REACHED;
}

bool db_errno_is_denied(unsigned code)
{
    return code == 1044 /* ER_DBACCESS_DENIED_ERROR */ ||
           code == 1142 /* ER_TABLEACCESS_DENIED_ERROR */ ||
           code == 1143 /* ER_COLUMNACCESS_DENIED_ERROR */ ||
           code == 1227 /* ER_SPECIFIC_ACCESS_DENIED_ERROR */;
}

const char *db_error_name(unsigned code)
{
    switch (code) {
    case DB_ER_DUP_ENTRY:
    case DB_ER_DUP_KEY:
    case DB_ER_DUP_ENTRY_WITH_KEY_NAME: return OOPS_E_EXISTS;
    case DB_ER_NO_SUCH_TABLE:
    case DB_ER_NO_SUCH_THREAD: return OOPS_E_NOT_FOUND;
    case DB_ER_LOCK_DEADLOCK: return OOPS_E_DEADLOCK;
    case DB_ER_LOCK_WAIT_TIMEOUT: return OOPS_E_LOCK_WAIT;
    case DB_CR_CONNECTION_ERROR:
    case DB_CR_CONN_HOST_ERROR:
    case DB_CR_UNKNOWN_HOST:
    case DB_ER_CON_COUNT:
    case DB_ER_TOO_MANY_USER_CONNECTIONS:
    case DB_ER_USER_LIMIT_REACHED: /* at connect; a statement past MAX_QUERIES_PER_HOUR too, rare */
        return OOPS_E_UNREACHABLE;
    default: return db_errno_is_connection(code) ? OOPS_E_GONE : OOPS_E_DB;
    }
}

unsigned db_jitter_ms(unsigned ms)
{
    static uint64_t x; /* xorshift64*, seeded once: spreading retries needs no strong randomness */
    if (!x && (getrandom(&x, sizeof x, GRND_NONBLOCK) != (ssize_t)sizeof x || !x))
        x = (mono_ms() << 20) ^ (uint64_t)getpid() ^ 0x9e3779b97f4a7c15ull;
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    uint64_t r = (x * 2685821657736338717ull) >> 11;          /* 53 random bits */
    double f = 0.75 + 0.5 * ((double)r / 9007199254740992.0); /* [0.75, 1.25) */
    return (unsigned)((double)ms * f);
}

static void cache_clear(db_conn *c)
{
    for (int i = 0; i < STMT_CACHE_SIZE; i++) {
        if (c->cache[i].st)
            stmt_close(c, c->cache[i].st);
        free(c->cache[i].sql);
        c->cache[i] = (cached_stmt){0};
    }
}

/*
 * TLS as ssl-mode says (db_url.h). Connector/C verifies the chain whenever a
 * CA is given and, with MYSQL_OPT_SSL_VERIFY_SERVER_CERT, also the host name;
 * ENFORCE refuses a server without TLS. 0, or -1 with why in err: a
 * certificate file that cannot be read is named before connecting (the
 * library's own message would be an OpenSSL error code).
 */
static int apply_tls(MYSQL *m, const db_config *cfg, char *err, size_t errlen)
{
    if (cfg->ssl_mode == DB_SSL_DEFAULT)
        return 0; /* the library's own default (Connector/C 3.3: no TLS) */
    const char *opt[] = {"ssl-ca", "ssl-cert", "ssl-key"};
    const char *path[] = {cfg->ssl_ca, cfg->ssl_cert, cfg->ssl_key};
    for (int i = 0; i < 3; i++) {
        if (path[i] && access(path[i], R_OK) != 0) {
            snprintf(err, errlen, "%s %s: %s", opt[i], path[i], strerror(errno));
            return -1;
        }
    }
    my_bool enforce = cfg->ssl_mode != DB_SSL_DISABLED;
    my_bool identity = cfg->ssl_mode == DB_SSL_VERIFY_IDENTITY;
    if (mysql_optionsv(m, MYSQL_OPT_SSL_ENFORCE, &enforce) ||
        mysql_optionsv(m, MYSQL_OPT_SSL_VERIFY_SERVER_CERT, &identity) ||
        (cfg->ssl_ca && mysql_optionsv(m, MYSQL_OPT_SSL_CA, cfg->ssl_ca)) ||
        (cfg->ssl_cert && mysql_optionsv(m, MYSQL_OPT_SSL_CERT, cfg->ssl_cert)) ||
        (cfg->ssl_key && mysql_optionsv(m, MYSQL_OPT_SSL_KEY, cfg->ssl_key))) {
        snprintf(err, errlen, "the client library refused a TLS option: %s", mysql_error(m));
        return -1;
    }
    return 0;
}

/* What the TLS settings add to a refused connection's message. */
static const char *tls_hint(const db_config *cfg, unsigned code, char *buf, size_t n)
{
    buf[0] = '\0';
    if (code == 2026 /* CR_SSL_CONNECTION_ERROR */ && cfg->ssl_mode == DB_SSL_VERIFY_CA)
        snprintf(buf, n, " (ssl-mode=VERIFY_CA: the server's certificate must chain to ssl-ca %s)",
                 cfg->ssl_ca);
    else if (code == 2026 && cfg->ssl_mode == DB_SSL_VERIFY_IDENTITY)
        snprintf(buf, n,
                 " (ssl-mode=VERIFY_IDENTITY: the server's certificate must chain to ssl-ca %s and "
                 "name the host %s)",
                 cfg->ssl_ca, cfg->host ? cfg->host : "?");
    else if (code == 2026)
        snprintf(buf, n, " (ssl-mode=%s)", db_ssl_mode_name(cfg->ssl_mode));
    else if (code == 1045 /* ER_ACCESS_DENIED_ERROR */ && cfg->ssl_mode == DB_SSL_DISABLED)
        snprintf(buf, n,
                 " (ssl-mode=DISABLED: an account that requires TLS is refused without it)");
    return buf;
}

/* A new handle with every option a session gets. */
static MYSQL *session_init(const db_config *cfg, char *why, size_t n)
{
    MYSQL *m = mysql_init(NULL);
    if (!m) {
        snprintf(why, n, "out of memory");
        return NULL;
    }
    unsigned ct = cfg->connect_timeout_s ? cfg->connect_timeout_s : 5;
    unsigned rt = cfg->read_timeout_s ? cfg->read_timeout_s : 30;
    unsigned wt = cfg->write_timeout_s ? cfg->write_timeout_s : 30;
    my_bool no = 0;
    mysql_options(m, MYSQL_OPT_CONNECT_TIMEOUT, &ct);
    mysql_options(m, MYSQL_OPT_READ_TIMEOUT, &rt);
    mysql_options(m, MYSQL_OPT_WRITE_TIMEOUT, &wt);
    /* Never reconnect behind our back: a silent reconnect drops every lock. */
    mysql_options(m, MYSQL_OPT_RECONNECT, &no);
    mysql_options(m, MYSQL_SET_CHARSET_NAME, "utf8mb4");
    /* The non-blocking API (NB above); 0 = the library's default stack size. */
    mysql_options(m, MYSQL_OPT_NONBLOCK, 0);
    if (cfg->socket) {
        unsigned proto = MYSQL_PROTOCOL_SOCKET;
        mysql_options(m, MYSQL_OPT_PROTOCOL, &proto);
    }
    if (apply_tls(m, cfg, why, n) != 0) {
        mysql_close(m);
        return NULL;
    }
    return m;
}

/* A refused connection's message (the library's, with what TLS adds; a busy
 * database said in words) and its error number in *code. */
static MYSQL *connect_failed(MYSQL *m, const db_config *cfg, char *why, size_t n, unsigned *code)
{
    char hint[1200];
    *code = mysql_errno(m);
    if (*code == DB_ER_CON_COUNT)
        snprintf(why, n, "the database refuses new connections (too many connections)");
    else if (*code == DB_ER_TOO_MANY_USER_CONNECTIONS || *code == DB_ER_USER_LIMIT_REACHED)
        snprintf(why, n,
                 "the database refuses new connections (too many connections for this account: "
                 "%s)",
                 mysql_error(m));
    else
        snprintf(why, n, "%s%s", mysql_error(m), tls_hint(cfg, *code, hint, sizeof hint));
    if (!*code)
        *code = DB_CR_CONN_HOST_ERROR;
    mysql_close(m);
    return NULL;
}

/* Through the non-blocking API: every wait is the fiber's (or a poll()). */
static MYSQL *connect_nb(const db_config *cfg, char *why, size_t n, unsigned *code)
{
    MYSQL *m = session_init(cfg, why, n);
    if (!m)
        return NULL;
    MYSQL *connected = NULL;
    NB(m, connected,
       mysql_real_connect_start(&connected, m, cfg->host, cfg->user,
                                cfg->password ? cfg->password : "", cfg->database, cfg->port,
                                cfg->socket, 0),
       mysql_real_connect_cont, m);
    return connected ? m : connect_failed(m, cfg, why, n, code);
}

/*
 * Two waits of Connector/C 3.3 sit inside its "non-blocking" connect, where
 * the loop would stand still: a host name is resolved with a blocking
 * getaddrinfo (retried with sleeps on EAI_AGAIN), for as long as the resolver
 * takes; and the TLS handshake runs on a blocking socket, for as long as the
 * server takes to answer (up to read_timeout). A name cannot be resolved here
 * and its address given instead: ssl-mode=VERIFY_IDENTITY checks the server
 * certificate against the very host the library connects to (X509_check_host
 * on mysql->host, within that blocking handshake, with no wait to step in
 * at), and a check of our own after connecting would come after the password
 * exchange. So such a connect runs whole as it always did (the library
 * resolves, tries every address in order, each within connect_timeout, and
 * checks the certificate against the name), but on libuv's thread pool
 * (db_fiber_offload): the fiber waits for it as for a socket. The worker has
 * copies of the settings: the connection that asked may be gone when an
 * abandoned connect ends.
 */
typedef struct off_connect {
    MYSQL *m;
    db_config cfg;
    bool connected;
} off_connect;

static void off_connect_run(void *arg) /* on a thread of the pool */
{
    off_connect *oc = arg;
    const db_config *c = &oc->cfg;
    oc->connected = mysql_real_connect(oc->m, c->host, c->user, c->password ? c->password : "",
                                       c->database, c->port, c->socket, 0) != NULL;
}

static void off_connect_free(void *arg)
{
    off_connect *oc = arg;
    mysql_close(oc->m);
    db_config_free(&oc->cfg);
    free(oc);
}

static MYSQL *connect_off_loop(const db_config *cfg, char *why, size_t n, unsigned *code)
{
    off_connect *oc = calloc(1, sizeof *oc);
    if (!oc || db_config_copy(&oc->cfg, cfg) != 0) {
        free(oc);
        snprintf(why, n, "out of memory");
        return NULL;
    }
    if (!(oc->m = session_init(cfg, why, n))) {
        db_config_free(&oc->cfg);
        free(oc);
        return NULL;
    }
    if (db_fiber_offload(off_connect_run, off_connect_free, oc, 0) != 0) {
        snprintf(why, n, "connecting was abandoned (the process is stopping)");
        return NULL;
    }
    MYSQL *m = oc->m;
    bool connected = oc->connected;
    db_config_free(&oc->cfg);
    free(oc);
    return connected ? m : connect_failed(m, cfg, why, n, code); /* the worker has ended */
}

/* Whether the library would wait inside its connect (above): a host name
 * (not a socket, an IP literal or "localhost", which Connector/C takes for
 * its default socket), or TLS. */
static bool connect_blocks(const db_config *cfg)
{
    unsigned char buf[sizeof(struct in6_addr)];
    const char *h = cfg->host;
    bool name = !cfg->socket && h && *h && strcmp(h, "localhost") != 0 &&
                inet_pton(AF_INET, h, buf) != 1 && inet_pton(AF_INET6, h, buf) != 1;
    return name || cfg->ssl_mode >= DB_SSL_REQUIRED;
}

/* A new session, or NULL with the reason in err and its error number in
 * *code (the server's own when it refused: 1040, 1203, 1045...; else a
 * client error, DB_CR_CONN_HOST_ERROR when nothing more precise is known). */
static MYSQL *open_session(const db_config *cfg, char *err, size_t errlen, unsigned *code)
{
    char where[300], why[1500];
    *code = DB_CR_CONN_HOST_ERROR; /* out of memory, abandoned, no TLS offered */
    MYSQL *m = connect_blocks(cfg) ? connect_off_loop(cfg, why, sizeof why, code)
                                   : connect_nb(cfg, why, sizeof why, code);
    if (!m) {
        snprintf(err, errlen, "cannot connect to database at %s: %s",
                 db_config_where(cfg, where, sizeof where), why);
        return NULL;
    }
    /* Connector/C 3.3 makes TLS a condition before authenticating only with
     * VERIFY_SERVER_CERT (VERIFY_IDENTITY); with ENFORCE alone a server that
     * offers no TLS gets a session in the clear. Such a session is never used. */
    if (cfg->ssl_mode >= DB_SSL_REQUIRED && !mysql_get_ssl_cipher(m)) {
        snprintf(err, errlen,
                 "cannot connect to database at %s: the server offers no TLS, and ssl-mode=%s "
                 "requires it",
                 db_config_where(cfg, where, sizeof where), db_ssl_mode_name(cfg->ssl_mode));
        mysql_close(m);
        return NULL;
    }
    /* Child processes (the exec gateway's commands) must not inherit the
     * session: a build outliving a SIGKILLed oopsd would keep its lock
     * session, hence its locks, open. */
    int fd = (int)mysql_get_socket(m);
    if (fd >= 0)
        fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC);
    return m;
}

static unsigned session_setup(db_conn *c, char *err, size_t errlen)
{
    /* Every server stores and compares DATETIME(6) in UTC, so NOW(6) means
     * the same instant whoever wrote it. */
    unsigned rc = db_exec(c, "SET time_zone = '+00:00'", NULL, 0, NULL, err, errlen);
    if (rc)
        return rc;
    if (c->cfg.session_wait_timeout_s) {
        db_value p[] = {db_int(c->cfg.session_wait_timeout_s)};
        if ((rc = db_exec(c, "SET SESSION wait_timeout = ?", p, 1, NULL, err, errlen)))
            return rc;
    }
    if (c->cfg.row_lock_wait_s) {
        db_value p[] = {db_int(c->cfg.row_lock_wait_s)};
        if ((rc = db_exec(c, "SET SESSION innodb_lock_wait_timeout = ?", p, 1, NULL, err, errlen)))
            return rc;
    }
    db_result *r = NULL;
    rc = db_exec(c, "SELECT CONNECTION_ID()", NULL, 0, &r, err, errlen);
    if (rc)
        return rc;
    c->connection_id = (uint64_t)db_get_int(r, 0, 0, 0);
    db_result_free(r);
    return 0;
}

db_conn *db_open(const db_config *cfg, char *err, size_t errlen)
{
    unsigned code;
    return db_open_code(cfg, err, errlen, &code);
}

db_conn *db_open_code(const db_config *cfg, char *err, size_t errlen, unsigned *code)
{
    *code = DB_CR_CONN_HOST_ERROR;
    db_conn *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "cannot connect to database: out of memory");
        return NULL;
    }
    db_config_copy(&c->cfg, cfg);
    c->fd = -1;
    c->m = open_session(cfg, err, errlen, code);
    if (!c->m) {
        db_config_free(&c->cfg);
        free(c);
        return NULL;
    }
    c->alive = true;
    c->used_ms = c->opened_ms = mono_ms();
    char e2[256];
    if ((*code = session_setup(c, e2, sizeof e2)) != 0) {
        char where[300];
        snprintf(err, errlen, "cannot connect to database at %s: %s",
                 db_config_where(cfg, where, sizeof where), e2);
        db_close(c);
        return NULL;
    }
    return c;
}

db_conn *db_conn_new(const db_config *cfg)
{
    db_conn *c = calloc(1, sizeof *c);
    if (c) {
        c->fd = -1;
        db_config_copy(&c->cfg, cfg);
    }
    return c;
}

/* The session closed (statement cache, kept watcher, socket), the settings kept. */
static void end_session(db_conn *c)
{
    cache_clear(c);
    forget_socket(c);
    if (c->m)
        mysql_close(c->m);
    c->m = NULL;
    c->alive = false;
}

void db_close(db_conn *c)
{
    if (!c)
        return;
    end_session(c);
    db_config_free(&c->cfg);
    free(c);
}

void db_conn_disconnect(db_conn *c)
{
    if (c)
        end_session(c);
}

uint64_t db_connection_id(const db_conn *c) { return c ? c->connection_id : 0; }
bool db_is_alive(const db_conn *c) { return c && c->alive; }
uint64_t db_statement_count(const db_conn *c) { return c ? c->statements : 0; }
uint64_t db_round_trips(const db_conn *c) { return c ? c->statements + c->prepares : 0; }
unsigned db_last_error(const db_conn *c) { return c ? c->last_error : 0; }
uint64_t db_conn_opened_ms(const db_conn *c) { return c ? c->opened_ms : 0; }

unsigned db_conn_ensure(db_conn *c, char *err, size_t errlen)
{
    /* A pool's connection can sit idle past its session wait_timeout (the
     * server then closes it, and the next statement would fail "gone away"):
     * open a fresh session instead when it is that old, 5 s to spare. */
    if (c->alive && c->cfg.session_wait_timeout_s &&
        mono_ms() - c->used_ms + 5000 > (uint64_t)c->cfg.session_wait_timeout_s * 1000u)
        c->alive = false;
    if (c->alive)
        return 0;
    end_session(c);
    unsigned code;
    c->m = open_session(&c->cfg, err, errlen, &code);
    if (!c->m)
        return c->last_error = code;
    c->alive = true;
    c->used_ms = c->opened_ms = mono_ms();
    unsigned rc = session_setup(c, err, errlen);
    if (rc)
        c->alive = false;
    return rc;
}

/* ---- statements -------------------------------------------------------- */

static unsigned stmt_fail(db_conn *c, MYSQL_STMT *st, const char *what, char *err, size_t errlen)
{
    unsigned code = st ? mysql_stmt_errno(st) : mysql_errno(c->m);
    const char *msg = st ? mysql_stmt_error(st) : mysql_error(c->m);
    if (code == 0) {
        code = CR_UNKNOWN_ERROR;
        msg = "unknown error";
    }
    snprintf(err, errlen, "%s: %s", what, msg);
    /* The library may have closed the socket (a lost session): its watcher
     * must not outlive it. Any error will do: they are rare. */
    forget_socket(c);
    if (db_errno_is_connection(code))
        c->alive = false;
    socket_closed(c);
    return code;
}

static MYSQL_STMT *cache_get(db_conn *c, const char *sql, char *err, size_t errlen, unsigned *code)
{
    int free_slot = -1, lru = 0;
    uint64_t hash = sql_hash(sql);
    for (int i = 0; i < STMT_CACHE_SIZE; i++) {
        if (c->cache[i].sql && c->cache[i].hash == hash && strcmp(c->cache[i].sql, sql) == 0) {
            c->cache[i].used = ++c->clock;
            return c->cache[i].st;
        }
        if (!c->cache[i].sql && free_slot < 0)
            free_slot = i;
        if (c->cache[i].used < c->cache[lru].used)
            lru = i;
    }
    int slot = free_slot >= 0 ? free_slot : lru;
    if (c->cache[slot].st) {
        stmt_close(c, c->cache[slot].st);
        free(c->cache[slot].sql);
        c->cache[slot] = (cached_stmt){0};
    }
    MYSQL_STMT *st = mysql_stmt_init(c->m);
    if (!st) {
        *code = stmt_fail(c, NULL, "prepare", err, errlen);
        return NULL;
    }
    my_bool on = 1;
    mysql_stmt_attr_set(st, STMT_ATTR_UPDATE_MAX_LENGTH, &on);
    c->prepares++;
    int prc = 0;
    NBK(c, prc, mysql_stmt_prepare_start(&prc, st, sql, strlen(sql)), mysql_stmt_prepare_cont, st);
    if (prc != 0) {
        *code = stmt_fail(c, st, "prepare", err, errlen);
        stmt_close(c, st);
        return NULL;
    }
    c->cache[slot].sql = strdup(sql);
    c->cache[slot].hash = hash;
    c->cache[slot].st = st;
    c->cache[slot].used = ++c->clock;
    return st;
}

static void cache_drop(db_conn *c, MYSQL_STMT *st)
{
    for (int i = 0; i < STMT_CACHE_SIZE; i++) {
        if (c->cache[i].st == st) {
            stmt_close(c, st);
            free(c->cache[i].sql);
            c->cache[i] = (cached_stmt){0};
            return;
        }
    }
}

static db_type column_type(enum enum_field_types t)
{
    switch (t) {
    case MYSQL_TYPE_TINY:
    case MYSQL_TYPE_SHORT:
    case MYSQL_TYPE_LONG:
    case MYSQL_TYPE_LONGLONG:
    case MYSQL_TYPE_INT24:
    case MYSQL_TYPE_YEAR: return DB_INT;
    case MYSQL_TYPE_FLOAT:
    case MYSQL_TYPE_DOUBLE:
    case MYSQL_TYPE_DECIMAL:
    case MYSQL_TYPE_NEWDECIMAL: return DB_DOUBLE;
    default: return DB_TEXT;
    }
}

void db_result_free(db_result *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->ncols; i++)
        free(r->names[i]);
    for (size_t i = 0; i < r->nrows * r->ncols; i++)
        free(r->cells[i].s);
    free(r->names);
    free(r->types);
    free(r->cells);
    free(r);
}

db_result *db_result_rows_keyed(const db_result *r, const char *key)
{
    db_result *o = calloc(1, sizeof *o);
    size_t nc = r->ncols, n = 0;
    for (size_t i = 0; i < r->nrows; i++)
        n += r->cells[i * nc].s && strcmp(r->cells[i * nc].s, key) == 0;
    if (!o || !(o->names = calloc(nc ? nc : 1, sizeof *o->names)) ||
        !(o->types = calloc(nc ? nc : 1, sizeof *o->types)) ||
        !(o->cells = calloc(n * nc > 0 ? n * nc : 1, sizeof *o->cells)))
        abort();
    o->ncols = nc;
    for (size_t j = 0; j < nc; j++) {
        if (!(o->names[j] = strdup(r->names[j])))
            abort();
        o->types[j] = r->types[j];
    }
    for (size_t i = 0; i < r->nrows; i++) {
        const db_cell *row = &r->cells[i * nc];
        if (!row[0].s || strcmp(row[0].s, key) != 0)
            continue;
        for (size_t j = 0; j < nc; j++) {
            db_cell *c = &o->cells[o->nrows * nc + j];
            c->len = row[j].len;
            if (row[j].s) {
                if (!(c->s = malloc(row[j].len + 1)))
                    abort();
                memcpy(c->s, row[j].s, row[j].len + 1);
            }
        }
        o->nrows++;
    }
    return o;
}

const char *db_get(const db_result *r, size_t row, size_t col)
{
    if (!r || row >= r->nrows || col >= r->ncols)
        return NULL;
    return r->cells[row * r->ncols + col].s;
}

long long db_get_int(const db_result *r, size_t row, size_t col, long long dflt)
{
    const char *s = db_get(r, row, col);
    return s ? strtoll(s, NULL, 10) : dflt;
}

static int bind_params(MYSQL_STMT *st, const db_value *params, size_t n, MYSQL_BIND *b,
                       my_bool *nulls)
{
    memset(b, 0, n * sizeof *b);
    for (size_t i = 0; i < n; i++) {
        const db_value *v = &params[i];
        switch (v->type) {
        case DB_NULL:
            b[i].buffer_type = MYSQL_TYPE_NULL;
            nulls[i] = 1;
            b[i].is_null = &nulls[i];
            break;
        case DB_INT:
            b[i].buffer_type = MYSQL_TYPE_LONGLONG;
            b[i].buffer = (void *)&v->i;
            break;
        case DB_DOUBLE:
            b[i].buffer_type = MYSQL_TYPE_DOUBLE;
            b[i].buffer = (void *)&v->d;
            break;
        case DB_TEXT:
            b[i].buffer_type = MYSQL_TYPE_STRING;
            b[i].buffer = (void *)v->s;
            b[i].buffer_length = (unsigned long)v->len;
            break;
        }
    }
    return n ? (mysql_stmt_bind_param(st, b) ? -1 : 0) : 0;
}

static int fetch_all(MYSQL_STMT *st, MYSQL_RES *meta, db_result *r)
{
    size_t nc = mysql_num_fields(meta);
    MYSQL_FIELD *f = mysql_fetch_fields(meta);
    r->ncols = nc;
    r->names = calloc(nc ? nc : 1, sizeof *r->names);
    r->types = calloc(nc ? nc : 1, sizeof *r->types);
    MYSQL_BIND *b = calloc(nc ? nc : 1, sizeof *b);
    unsigned long *lens = calloc(nc ? nc : 1, sizeof *lens);
    my_bool *nulls = calloc(nc ? nc : 1, sizeof *nulls);
    char **bufs = calloc(nc ? nc : 1, sizeof *bufs);
    int rc = -1;
    if (!r->names || !r->types || !b || !lens || !nulls || !bufs)
        goto out;
    for (size_t i = 0; i < nc; i++) {
        r->names[i] = strdup(f[i].name);
        r->types[i] = column_type(f[i].type);
        size_t cap = f[i].max_length;
        if (cap < 64)
            cap = 64;
        bufs[i] = malloc(cap + 1);
        b[i].buffer_type = MYSQL_TYPE_STRING;
        b[i].buffer = bufs[i];
        b[i].buffer_length = (unsigned long)cap;
        b[i].length = &lens[i];
        b[i].is_null = &nulls[i];
    }
    if (nc && mysql_stmt_bind_result(st, b))
        goto out;
    size_t nr = (size_t)mysql_stmt_num_rows(st);
    r->cells = calloc(nr * nc > 0 ? nr * nc : 1, sizeof *r->cells);
    if (!r->cells)
        goto out;
    for (;;) {
        int fr = mysql_stmt_fetch(st);
        if (fr == MYSQL_NO_DATA)
            break;
        if (fr == 1)
            goto out;
        if (r->nrows >= nr)
            break;
        for (size_t i = 0; i < nc; i++) {
            db_cell *cell = &r->cells[r->nrows * nc + i];
            if (nulls[i])
                continue;
            cell->len = lens[i];
            cell->s = malloc(lens[i] + 1);
            if (lens[i] > b[i].buffer_length) {
                /* Truncated (max_length was not known for this type): fetch it whole. */
                MYSQL_BIND one = {0};
                unsigned long l2 = 0;
                one.buffer_type = MYSQL_TYPE_STRING;
                one.buffer = cell->s;
                one.buffer_length = lens[i] + 1;
                one.length = &l2;
                mysql_stmt_fetch_column(st, &one, (unsigned)i, 0);
            } else {
                memcpy(cell->s, bufs[i], lens[i]);
            }
            cell->s[lens[i]] = '\0';
        }
        r->nrows++;
    }
    rc = 0;
out:
    for (size_t i = 0; i < nc; i++)
        free(bufs[i]);
    free(bufs);
    free(b);
    free(lens);
    free(nulls);
    return rc;
}

/* Bind params and execute st: 0, or the error number (the statement cache
 * cleared when the session is gone, st dropped when it must be prepared again). */
static unsigned execute(db_conn *c, MYSQL_STMT *st, const db_value *params, size_t nparams,
                        char *err, size_t errlen)
{
    /* On the heap: a fiber's stack is small, and a GET_LOCK batch may bind
     * tens of thousands of names (112 bytes of MYSQL_BIND each). Needed
     * until the statement is sent. */
    MYSQL_BIND *pb = calloc(nparams ? nparams : 1, sizeof *pb);
    my_bool *pn = calloc(nparams ? nparams : 1, sizeof *pn);
    if (!pb || !pn) {
        free(pb);
        free(pn);
        snprintf(err, errlen, "bind: out of memory");
        return CR_OUT_OF_MEMORY;
    }
    if (bind_params(st, params, nparams, pb, pn) != 0) {
        free(pb);
        free(pn);
        return stmt_fail(c, st, "bind", err, errlen);
    }
    c->statements++;
    int erc = 0;
    NBK(c, erc, mysql_stmt_execute_start(&erc, st), mysql_stmt_execute_cont, st);
    free(pb);
    free(pn);
    c->used_ms = mono_ms();
    if (erc == 0)
        return 0;
    unsigned code = stmt_fail(c, st, "execute", err, errlen);
    if (!c->alive)
        cache_clear(c);
    else if (code == 1615 /* ER_NEED_REPREPARE */)
        cache_drop(c, st);
    return code;
}

/* The result set st stands at, read (into r when keep) and freed: 0 or the error number. */
static unsigned store_rows(db_conn *c, MYSQL_STMT *st, db_result *r, bool keep, char *err,
                           size_t errlen)
{
    MYSQL_RES *meta = mysql_stmt_result_metadata(st);
    int src = 0;
    NBK(c, src, mysql_stmt_store_result_start(&src, st), mysql_stmt_store_result_cont, st);
    unsigned code = 0;
    if (src != 0 || (keep && meta && fetch_all(st, meta, r) != 0))
        code = stmt_fail(c, st, "fetch", err, errlen);
    if (meta)
        mysql_free_result(meta);
    mysql_stmt_free_result(st);
    return code;
}

/* An executed statement's answer into r: its first result set (or what it
 * changed), then every further one read and let go — a CALL answers with its
 * result sets and then a status — so the connection is free for the next
 * statement. 0 or the error number. */
static unsigned read_results(db_conn *c, MYSQL_STMT *st, db_result *r, char *err, size_t errlen)
{
    if (mysql_stmt_field_count(st) > 0) {
        unsigned code = store_rows(c, st, r, true, err, errlen);
        if (code)
            return code;
    } else {
        r->affected = (uint64_t)mysql_stmt_affected_rows(st);
        r->insert_id = (uint64_t)mysql_stmt_insert_id(st);
    }
    while (mysql_stmt_more_results(st)) {
        int nrc = 0;
        NBK(c, nrc, mysql_stmt_next_result_start(&nrc, st), mysql_stmt_next_result_cont, st);
        if (nrc > 0)
            return stmt_fail(c, st, "execute", err, errlen);
        if (nrc < 0)
            break;
        if (mysql_stmt_field_count(st) > 0) {
            unsigned code = store_rows(c, st, r, r->ncols == 0, err, errlen);
            if (code)
                return code;
        } else if (r->ncols == 0) {
            r->affected = (uint64_t)mysql_stmt_affected_rows(st);
        }
    }
    return 0;
}

static unsigned exec(db_conn *c, const char *sql, const db_value *params, size_t nparams,
                     db_result **out, char *err, size_t errlen)
{
    unsigned code = 0;
    if (out)
        *out = NULL;
    if (!c->alive) {
        snprintf(err, errlen, "database connection lost");
        return CR_SERVER_LOST;
    }
    MYSQL_STMT *st = cache_get(c, sql, err, errlen, &code);
    if (!st)
        return code;
    if (mysql_stmt_param_count(st) != nparams) {
        snprintf(err, errlen, "statement expects %lu parameters, got %zu",
                 mysql_stmt_param_count(st), nparams);
        return CR_UNKNOWN_ERROR;
    }
    if ((code = execute(c, st, params, nparams, err, errlen)))
        return code;
    db_result *r = calloc(1, sizeof *r);
    if (!r)
        abort(); /* out of memory */
    if ((code = read_results(c, st, r, err, errlen))) {
        db_result_free(r);
        /* Rows that failed after the columns came (a deadlock while a
         * SELECT ... FOR UPDATE reads them) leave Connector/C's handle
         * waiting for them: executed again, it would first read for the rest
         * of a result the server has ended, until the read timeout (30 s,
         * "gone away"). So the statement goes; the next run prepares it anew. */
        if (!c->alive)
            cache_clear(c);
        else
            cache_drop(c, st);
        return code;
    }
    if (out)
        *out = r;
    else
        db_result_free(r);
    return 0;
}

unsigned db_exec(db_conn *c, const char *sql, const db_value *params, size_t nparams,
                 db_result **out, char *err, size_t errlen)
{
    unsigned code = exec(c, sql, params, nparams, out, err, errlen);
    if (code)
        c->last_error = code;
    return code;
}

unsigned db_begin(db_conn *c, char *err, size_t errlen)
{
    return db_exec(c, "START TRANSACTION", NULL, 0, NULL, err, errlen);
}

unsigned db_commit(db_conn *c, char *err, size_t errlen)
{
    return db_exec(c, "COMMIT", NULL, 0, NULL, err, errlen);
}

void db_rollback(db_conn *c)
{
    char err[128];
    if (c->alive)
        db_exec(c, "ROLLBACK", NULL, 0, NULL, err, sizeof err);
}
