#include "db.h"

#include <ctype.h>
#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <mysql.h>
#include <errmsg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STMT_CACHE_SIZE 48

typedef struct cached_stmt {
    char *sql;
    MYSQL_STMT *st;
    uint64_t used;
} cached_stmt;

struct db_conn {
    MYSQL *m;
    db_config cfg;
    uint64_t connection_id;
    bool alive;
    uint64_t statements;
    uint64_t prepares;
    uint64_t clock; /* for LRU */
    cached_stmt cache[STMT_CACHE_SIZE];
};

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

/* ---- configuration ----------------------------------------------------- */

static char *dup_range(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d)
        return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Percent-decode s[0..n) into a new string; NULL on a malformed escape. */
static char *pct_decode(const char *s, size_t n)
{
    char *d = malloc(n + 1), *o = d;
    if (!d)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%') {
            int hi = i + 1 < n ? hexval(s[i + 1]) : -1;
            int lo = i + 2 < n ? hexval(s[i + 2]) : -1;
            if (hi < 0 || lo < 0) {
                free(d);
                return NULL;
            }
            *o++ = (char)(hi * 16 + lo);
            i += 2;
        } else {
            *o++ = s[i];
        }
    }
    *o = '\0';
    return d;
}

void db_config_free(db_config *cfg)
{
    if (!cfg)
        return;
    if (cfg->password) /* do not leave it lying around in freed memory */
        memset(cfg->password, 0, strlen(cfg->password));
    free(cfg->user);
    free(cfg->password);
    free(cfg->host);
    free(cfg->database);
    free(cfg->socket);
    memset(cfg, 0, sizeof *cfg);
}

static char *xstrdup(const char *s) { return s ? strdup(s) : NULL; }

int db_config_copy(db_config *dst, const db_config *src)
{
    *dst = *src;
    dst->user = xstrdup(src->user);
    dst->password = xstrdup(src->password);
    dst->host = xstrdup(src->host);
    dst->database = xstrdup(src->database);
    dst->socket = xstrdup(src->socket);
    return 0;
}

/* Longest database URL accepted: anything longer is a mistake or an attack. */
#define URL_MAX 4096

#define ENCODE_HINT "percent-encode @ : / % in a user or password as %40 %3A %2F %25"

/* Percent-decode s[0..n) refusing %00 (it would silently cut the value). */
static char *pct_decode_text(const char *s, size_t n)
{
    char *d = pct_decode(s, n);
    size_t escapes = 0;
    for (size_t i = 0; d && i < n; i++)
        escapes += s[i] == '%';
    if (d && strlen(d) != n - 2 * escapes) { /* a %00 ended it early */
        free(d);
        return NULL;
    }
    return d;
}

/* One ?option, its value validated whole. Messages quote at most the
 * option's name (never its value, never anything from the userinfo). */
static int parse_option(db_config *cfg, const char *key, size_t kn, const char *val, unsigned *seen,
                        char *err, size_t errlen)
{
    static const char *const names[] = {"socket", "connect_timeout"};
    int which = -1;
    for (int i = 0; i < 2; i++)
        if (kn == strlen(names[i]) && !strncmp(key, names[i], kn))
            which = i;
    if (which < 0) {
        snprintf(err, errlen, "database URL: unknown option \"%.*s\" (known: socket, connect_timeout)",
                 (int)(kn > 32 ? 32 : kn), key);
        return -1;
    }
    if (*seen & (1u << which)) {
        snprintf(err, errlen, "database URL: option %s is given twice", names[which]);
        return -1;
    }
    *seen |= 1u << which;
    if (which == 0) {
        if (val[0] != '/') {
            snprintf(err, errlen, "database URL: option socket must be an absolute path, like socket=/run/mysqld/mysqld.sock");
            return -1;
        }
        free(cfg->socket);
        cfg->socket = strdup(val);
        return cfg->socket ? 0 : -1;
    }
    char *end;
    errno = 0;
    unsigned long v = strtoul(val, &end, 10);
    if (!isdigit((unsigned char)val[0]) || *end || errno || v < 1 || v > 3600) {
        snprintf(err, errlen, "database URL: option connect_timeout must be a whole number of seconds from 1 to 3600");
        return -1;
    }
    cfg->connect_timeout_s = (unsigned)v;
    return 0;
}

static int parse_query(db_config *cfg, const char *q, char *err, size_t errlen)
{
    unsigned seen = 0;
    if (!*q)
        return 0; /* "db?" with nothing after */
    for (;;) {
        const char *amp = strchr(q, '&');
        size_t n = amp ? (size_t)(amp - q) : strlen(q);
        const char *eq = memchr(q, '=', n);
        if (n == 0) {
            snprintf(err, errlen, "database URL: an empty option (\"&&\", or \"&\" at the end)");
            return -1;
        }
        if (!eq || eq == q) {
            snprintf(err, errlen, "database URL: option \"%.*s\" is not NAME=VALUE", (int)(n > 32 ? 32 : n), q);
            return -1;
        }
        size_t kn = (size_t)(eq - q);
        char *val = pct_decode_text(eq + 1, n - kn - 1);
        if (!val || !*val) {
            snprintf(err, errlen, "database URL: option %.*s has %s", (int)(kn > 32 ? 32 : kn), q,
                     val ? "an empty value" : "a bad percent-escape");
            free(val);
            return -1;
        }
        int rc = parse_option(cfg, q, kn, val, &seen, err, errlen);
        free(val);
        if (rc)
            return -1;
        if (!amp)
            return 0;
        q = amp + 1;
    }
}

/* A host name or IPv4 literal: letters, digits, '.', '-', '_'. */
static bool plain_host(const char *s, size_t n)
{
    if (n == 0 || n > 255)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '.' && s[i] != '-' && s[i] != '_')
            return false;
    return true;
}

/* host[:port] or [IPv6][:port] in s[0..n) into cfg. */
static int parse_hostport(db_config *cfg, const char *s, size_t n, char *err, size_t errlen)
{
    const char *hs = s, *he, *ps = NULL;
    if (n && s[0] == '[') {
        const char *close = memchr(s, ']', n);
        if (!close) {
            snprintf(err, errlen, "database URL: an IPv6 host needs its closing \"]\" (like mysql://user@[::1]:3306/db)");
            return -1;
        }
        hs = s + 1;
        he = close;
        if (close + 1 < s + n) {
            if (close[1] != ':') {
                snprintf(err, errlen, "database URL: only \":PORT\" may follow \"]\" of an IPv6 host");
                return -1;
            }
            ps = close + 2;
        }
        char tmp[INET6_ADDRSTRLEN + 1];
        struct in6_addr a6;
        size_t hl = (size_t)(he - hs);
        if (hl == 0 || hl >= sizeof tmp || (memcpy(tmp, hs, hl), tmp[hl] = '\0', inet_pton(AF_INET6, tmp, &a6) != 1)) {
            snprintf(err, errlen, "database URL: the host in [...] is not an IPv6 address");
            return -1;
        }
    } else {
        const char *colon = memchr(s, ':', n);
        he = colon ? colon : s + n;
        ps = colon ? colon + 1 : NULL;
        if (he == hs) {
            snprintf(err, errlen, "database URL has no host (form: mysql://user[:password]@host[:port]/database)");
            return -1;
        }
        if (!plain_host(hs, (size_t)(he - hs))) {
            snprintf(err, errlen, "database URL: the host is not a host name, an IPv4 address or an [IPv6] address "
                                  "(an unencoded character in the password? %s)", ENCODE_HINT);
            return -1;
        }
    }
    cfg->host = dup_range(hs, (size_t)(he - hs));
    if (!cfg->host)
        return -1;
    if (ps) {
        const char *pe = s + n;
        unsigned long port = 0;
        bool ok = ps < pe && pe - ps <= 5;
        for (const char *q = ps; ok && q < pe; q++) {
            ok = *q >= '0' && *q <= '9';
            port = port * 10 + (unsigned long)(*q - '0');
        }
        if (!ok || port < 1 || port > 65535) {
            snprintf(err, errlen, "database URL: the port after the host must be a number from 1 to 65535");
            return -1;
        }
        cfg->port = (unsigned)port;
    }
    return 0;
}

/*
 * mysql://user[:password]@host[:port]/database[?options]. The userinfo ends
 * at the LAST '@' of the URL, so a password may hold '@', ':', '/', '?', '#'
 * unencoded (a '%' must be written %25; a database name or option value that
 * holds '@' must encode it as %40). Nothing from the userinfo is ever put in
 * a message: every error names the part that is wrong, not its text.
 */
int db_config_parse(db_config *cfg, const char *url, const char *env_password, char *err,
                    size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->connect_timeout_s = 5;
    cfg->read_timeout_s = 30;
    cfg->write_timeout_s = 30;
    static const char scheme[] = "mysql://";
    static const char form[] = "(form: mysql://user[:password]@host[:port]/database)";
    if (!url || !*url) {
        snprintf(err, errlen, "no database URL: pass --db mysql://user@host/db or set OOPS_DB");
        return -1;
    }
    size_t len = strnlen(url, URL_MAX + 1);
    if (len > URL_MAX) {
        snprintf(err, errlen, "database URL is longer than %d bytes", URL_MAX);
        return -1;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)url[i];
        if (ch < 0x20 || ch == 0x7f) {
            snprintf(err, errlen, "database URL holds a control character (byte %zu); percent-encode it", i + 1);
            return -1;
        }
    }
    if (strncmp(url, scheme, sizeof scheme - 1) != 0) {
        snprintf(err, errlen, "database URL must start with mysql:// %s", form);
        return -1;
    }
    const char *p = url + sizeof scheme - 1;
    const char *at = strrchr(p, '@');
    if (!at) {
        snprintf(err, errlen, "database URL has no user %s", form);
        return -1;
    }
    /* The userinfo: user[:password], both percent-decoded. */
    const char *colon = memchr(p, ':', (size_t)(at - p));
    cfg->user = pct_decode_text(p, (size_t)((colon ? colon : at) - p));
    if (colon)
        cfg->password = pct_decode_text(colon + 1, (size_t)(at - colon - 1));
    if (!cfg->user || (colon && !cfg->password)) {
        snprintf(err, errlen, "database URL: bad percent-escape in the user or password (%s)", ENCODE_HINT);
        goto fail;
    }
    if (!*cfg->user) {
        snprintf(err, errlen, "database URL has no user before the password %s", form);
        goto fail;
    }
    const char *hs = at + 1;
    const char *slash = strchr(hs, '/');
    const char *query = strchr(hs, '?');
    if (!slash || (query && query < slash)) {
        snprintf(err, errlen, "database URL has no /database part after the host %s", form);
        goto fail;
    }
    if (parse_hostport(cfg, hs, (size_t)(slash - hs), err, errlen) != 0)
        goto fail;
    const char *dend = query ? query : slash + strlen(slash);
    cfg->database = pct_decode_text(slash + 1, (size_t)(dend - slash - 1));
    if (!cfg->database) {
        snprintf(err, errlen, "database URL: bad percent-escape in the database name");
        goto fail;
    }
    if (!*cfg->database || strlen(cfg->database) > 64 || strchr(cfg->database, '/')) {
        snprintf(err, errlen, "database URL: the database name after the host must be 1 to 64 characters, without \"/\"");
        goto fail;
    }
    if (query && parse_query(cfg, query + 1, err, errlen) != 0)
        goto fail;
    if (!cfg->password && env_password && *env_password)
        cfg->password = strdup(env_password);
    return 0;
fail:
    db_config_free(cfg);
    return -1;
}

int db_config_resolve(db_config *cfg, const char *url_flag, char *err, size_t errlen)
{
    const char *url = url_flag ? url_flag : getenv("OOPS_DB");
    return db_config_parse(cfg, url, getenv("OOPS_DB_PASSWORD"), err, errlen);
}

const char *db_config_where(const db_config *cfg, char *buf, size_t n)
{
    if (cfg->socket)
        snprintf(buf, n, "socket %s", cfg->socket);
    else
        snprintf(buf, n, strchr(cfg->host ? cfg->host : "", ':') ? "[%s]:%u" : "%s:%u",
                 cfg->host ? cfg->host : "?", cfg->port ? cfg->port : 3306);
    return buf;
}

void db_mask_url_password(char *url)
{
    if (!url || strncmp(url, "mysql://", 8) != 0)
        return;
    /* The same rule as the parser: the userinfo ends at the last '@', so a
     * password holding '/' or '@' is masked whole too. */
    char *p = url + 8;
    char *at = strrchr(p, '@');
    if (!at)
        return;
    char *colon = memchr(p, ':', (size_t)(at - p));
    if (!colon)
        return;
    for (char *q = colon + 1; q < at; q++)
        *q = 'x';
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

static void cache_clear(db_conn *c)
{
    for (int i = 0; i < STMT_CACHE_SIZE; i++) {
        if (c->cache[i].st)
            mysql_stmt_close(c->cache[i].st);
        free(c->cache[i].sql);
        c->cache[i] = (cached_stmt){0};
    }
}

static MYSQL *open_session(const db_config *cfg, char *err, size_t errlen)
{
    char where[300];
    MYSQL *m = mysql_init(NULL);
    if (!m) {
        snprintf(err, errlen, "cannot connect to database: out of memory");
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
    if (cfg->socket) {
        unsigned proto = MYSQL_PROTOCOL_SOCKET;
        mysql_options(m, MYSQL_OPT_PROTOCOL, &proto);
    }
    if (!mysql_real_connect(m, cfg->host, cfg->user, cfg->password ? cfg->password : "",
                            cfg->database, cfg->port, cfg->socket, 0)) {
        snprintf(err, errlen, "cannot connect to database at %s: %s",
                 db_config_where(cfg, where, sizeof where), mysql_error(m));
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
    db_conn *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "cannot connect to database: out of memory");
        return NULL;
    }
    db_config_copy(&c->cfg, cfg);
    c->m = open_session(cfg, err, errlen);
    if (!c->m) {
        db_config_free(&c->cfg);
        free(c);
        return NULL;
    }
    c->alive = true;
    char e2[256];
    if (session_setup(c, e2, sizeof e2) != 0) {
        char where[300];
        snprintf(err, errlen, "cannot connect to database at %s: %s",
                 db_config_where(cfg, where, sizeof where), e2);
        db_close(c);
        return NULL;
    }
    return c;
}

void db_close(db_conn *c)
{
    if (!c)
        return;
    cache_clear(c);
    if (c->m)
        mysql_close(c->m);
    db_config_free(&c->cfg);
    free(c);
}

uint64_t db_connection_id(const db_conn *c) { return c ? c->connection_id : 0; }
bool db_is_alive(const db_conn *c) { return c && c->alive; }
uint64_t db_statement_count(const db_conn *c) { return c ? c->statements : 0; }
uint64_t db_round_trips(const db_conn *c) { return c ? c->statements + c->prepares : 0; }

unsigned db_conn_ensure(db_conn *c, char *err, size_t errlen)
{
    if (c->alive)
        return 0;
    cache_clear(c);
    if (c->m)
        mysql_close(c->m);
    c->m = open_session(&c->cfg, err, errlen);
    if (!c->m)
        return DB_CR_CONN_HOST_ERROR;
    c->alive = true;
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
    if (db_errno_is_connection(code))
        c->alive = false;
    return code;
}

static MYSQL_STMT *cache_get(db_conn *c, const char *sql, char *err, size_t errlen, unsigned *code)
{
    int free_slot = -1, lru = 0;
    for (int i = 0; i < STMT_CACHE_SIZE; i++) {
        if (c->cache[i].sql && strcmp(c->cache[i].sql, sql) == 0) {
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
        mysql_stmt_close(c->cache[slot].st);
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
    if (mysql_stmt_prepare(st, sql, strlen(sql)) != 0) {
        *code = stmt_fail(c, st, "prepare", err, errlen);
        mysql_stmt_close(st);
        return NULL;
    }
    c->cache[slot].sql = strdup(sql);
    c->cache[slot].st = st;
    c->cache[slot].used = ++c->clock;
    return st;
}

static void cache_drop(db_conn *c, MYSQL_STMT *st)
{
    for (int i = 0; i < STMT_CACHE_SIZE; i++) {
        if (c->cache[i].st == st) {
            mysql_stmt_close(st);
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
    case MYSQL_TYPE_YEAR:
        return DB_INT;
    case MYSQL_TYPE_FLOAT:
    case MYSQL_TYPE_DOUBLE:
    case MYSQL_TYPE_DECIMAL:
    case MYSQL_TYPE_NEWDECIMAL:
        return DB_DOUBLE;
    default:
        return DB_TEXT;
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

unsigned db_exec(db_conn *c, const char *sql, const db_value *params, size_t nparams,
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
    MYSQL_BIND pb[nparams ? nparams : 1];
    my_bool pn[nparams ? nparams : 1];
    if (bind_params(st, params, nparams, pb, pn) != 0)
        return stmt_fail(c, st, "bind", err, errlen);
    c->statements++;
    if (mysql_stmt_execute(st) != 0) {
        code = stmt_fail(c, st, "execute", err, errlen);
        if (!c->alive)
            cache_clear(c);
        else if (code == 1615 /* ER_NEED_REPREPARE */)
            cache_drop(c, st);
        return code;
    }
    db_result *r = calloc(1, sizeof *r);
    MYSQL_RES *meta = mysql_stmt_result_metadata(st);
    if (meta) {
        if (mysql_stmt_store_result(st) != 0 || fetch_all(st, meta, r) != 0) {
            code = stmt_fail(c, st, "fetch", err, errlen);
            mysql_free_result(meta);
            mysql_stmt_free_result(st);
            db_result_free(r);
            if (!c->alive)
                cache_clear(c);
            return code;
        }
        mysql_free_result(meta);
        mysql_stmt_free_result(st);
    } else {
        r->affected = (uint64_t)mysql_stmt_affected_rows(st);
        r->insert_id = (uint64_t)mysql_stmt_insert_id(st);
    }
    if (out)
        *out = r;
    else
        db_result_free(r);
    return 0;
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
