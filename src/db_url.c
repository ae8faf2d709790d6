#include "db_url.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "secret_file.h"

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
    if (cfg->password) /* do not leave it lying around in freed memory (never elided) */
        explicit_bzero(cfg->password, strlen(cfg->password));
    free(cfg->user);
    free(cfg->password);
    free(cfg->host);
    free(cfg->database);
    free(cfg->socket);
    free(cfg->ssl_ca);
    free(cfg->ssl_cert);
    free(cfg->ssl_key);
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
    dst->ssl_ca = xstrdup(src->ssl_ca);
    dst->ssl_cert = xstrdup(src->ssl_cert);
    dst->ssl_key = xstrdup(src->ssl_key);
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

/* A path option's value: absolute, at most 1024 bytes, no control
 * character (a percent-encoded one included). */
#define PATH_OPTION_MAX 1024

static bool plain_path(const char *v)
{
    size_t n = strnlen(v, PATH_OPTION_MAX + 1);
    if (v[0] != '/' || n > PATH_OPTION_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f)
            return false;
    return true;
}

const char *db_ssl_mode_name(db_ssl_mode m)
{
    switch (m) {
    case DB_SSL_DISABLED: return "DISABLED";
    case DB_SSL_REQUIRED: return "REQUIRED";
    case DB_SSL_VERIFY_CA: return "VERIFY_CA";
    case DB_SSL_VERIFY_IDENTITY: return "VERIFY_IDENTITY";
    default: return "";
    }
}

enum {
    OPT_SOCKET,
    OPT_CONNECT_TIMEOUT,
    OPT_SSL_MODE,
    OPT_SSL_CA,
    OPT_SSL_CERT,
    OPT_SSL_KEY,
    OPT_READ_TIMEOUT,
    NOPT
};
static const char *const option_names[NOPT] = {
    "socket", "connect_timeout", "ssl-mode", "ssl-ca", "ssl-cert", "ssl-key", "read_timeout"};

/* One ?option, its value validated whole. Messages quote at most the
 * option's name (never its value, never anything from the userinfo). */
static int parse_option(db_config *cfg, const char *key, size_t kn, const char *val, unsigned *seen,
                        char *err, size_t errlen)
{
    int which = -1;
    for (int i = 0; i < NOPT; i++)
        if (kn == strlen(option_names[i]) && !strncmp(key, option_names[i], kn))
            which = i;
    if (which < 0) {
        snprintf(err, errlen,
                 "database URL: unknown option \"%.*s\" (known: socket, connect_timeout, "
                 "read_timeout, ssl-mode, ssl-ca, ssl-cert, ssl-key)",
                 (int)(kn > 32 ? 32 : kn), key);
        return -1;
    }
    if (*seen & (1u << which)) {
        snprintf(err, errlen, "database URL: option %s is given twice", option_names[which]);
        return -1;
    }
    *seen |= 1u << which;
    switch (which) {
    case OPT_SOCKET:
        if (!plain_path(val)) {
            snprintf(err, errlen,
                     "database URL: option socket must be an absolute path, like "
                     "socket=/run/mysqld/mysqld.sock");
            return -1;
        }
        free(cfg->socket);
        cfg->socket = strdup(val);
        return cfg->socket ? 0 : -1;
    case OPT_SSL_MODE:
        for (db_ssl_mode m = DB_SSL_DISABLED; m <= DB_SSL_VERIFY_IDENTITY; m++)
            if (!strcasecmp(val, db_ssl_mode_name(m)))
                cfg->ssl_mode = m;
        if (cfg->ssl_mode == DB_SSL_DEFAULT) {
            snprintf(err, errlen,
                     "database URL: option ssl-mode must be DISABLED, REQUIRED, VERIFY_CA or "
                     "VERIFY_IDENTITY");
            return -1;
        }
        return 0;
    case OPT_SSL_CA:
    case OPT_SSL_CERT:
    case OPT_SSL_KEY: {
        if (!plain_path(val)) {
            snprintf(err, errlen,
                     "database URL: option %s must be an absolute path (at most %d bytes), like "
                     "%s=/etc/oopsd/tls/%s.pem",
                     option_names[which], PATH_OPTION_MAX, option_names[which],
                     option_names[which] + 4);
            return -1;
        }
        char **slot = which == OPT_SSL_CA     ? &cfg->ssl_ca
                      : which == OPT_SSL_CERT ? &cfg->ssl_cert
                                              : &cfg->ssl_key;
        free(*slot);
        *slot = strdup(val);
        return *slot ? 0 : -1;
    }
    default: break;
    }
    char *end;
    errno = 0;
    unsigned long v = strtoul(val, &end, 10);
    if (!isdigit((unsigned char)val[0]) || *end || errno || v < 1 || v > 3600) {
        snprintf(err, errlen,
                 "database URL: option %s must be a whole number of seconds from 1 to 3600",
                 option_names[which]);
        return -1;
    }
    if (which == OPT_READ_TIMEOUT)
        cfg->read_timeout_s = cfg->write_timeout_s = (unsigned)v;
    else
        cfg->connect_timeout_s = (unsigned)v;
    return 0;
}

/* The ssl- options together: each combination means one thing or is refused. */
static int check_tls(const db_config *cfg, char *err, size_t errlen)
{
    const char *given = cfg->ssl_ca     ? "ssl-ca"
                        : cfg->ssl_cert ? "ssl-cert"
                        : cfg->ssl_key  ? "ssl-key"
                                        : NULL;
    if (given && cfg->ssl_mode == DB_SSL_DEFAULT)
        snprintf(err, errlen,
                 "database URL: option %s needs ssl-mode (REQUIRED, VERIFY_CA or VERIFY_IDENTITY)",
                 given);
    else if (given && cfg->ssl_mode == DB_SSL_DISABLED)
        snprintf(err, errlen, "database URL: option %s contradicts ssl-mode=DISABLED", given);
    else if (cfg->ssl_ca && cfg->ssl_mode == DB_SSL_REQUIRED)
        snprintf(err, errlen,
                 "database URL: option ssl-ca is for verifying the server: say ssl-mode=VERIFY_CA "
                 "or VERIFY_IDENTITY (REQUIRED verifies nothing)");
    else if (!cfg->ssl_ca && cfg->ssl_mode >= DB_SSL_VERIFY_CA)
        snprintf(err, errlen,
                 "database URL: option ssl-mode=%s needs ssl-ca (the CA certificate the server's "
                 "certificate must chain to)",
                 db_ssl_mode_name(cfg->ssl_mode));
    else if (!cfg->ssl_cert != !cfg->ssl_key)
        snprintf(err, errlen,
                 "database URL: option %s needs %s too (a client certificate and its key)",
                 cfg->ssl_cert ? "ssl-cert" : "ssl-key", cfg->ssl_cert ? "ssl-key" : "ssl-cert");
    else
        return 0;
    return -1;
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
            snprintf(err, errlen, "database URL: option \"%.*s\" is not NAME=VALUE",
                     (int)(n > 32 ? 32 : n), q);
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
            snprintf(err, errlen,
                     "database URL: an IPv6 host needs its closing \"]\" (like "
                     "mysql://user@[::1]:3306/db)");
            return -1;
        }
        hs = s + 1;
        he = close;
        if (close + 1 < s + n) {
            if (close[1] != ':') {
                snprintf(err, errlen,
                         "database URL: only \":PORT\" may follow \"]\" of an IPv6 host");
                return -1;
            }
            ps = close + 2;
        }
        char tmp[INET6_ADDRSTRLEN + 1];
        struct in6_addr a6;
        size_t hl = (size_t)(he - hs);
        if (hl == 0 || hl >= sizeof tmp ||
            (memcpy(tmp, hs, hl), tmp[hl] = '\0', inet_pton(AF_INET6, tmp, &a6) != 1)) {
            snprintf(err, errlen, "database URL: the host in [...] is not an IPv6 address");
            return -1;
        }
    } else {
        const char *colon = memchr(s, ':', n);
        he = colon ? colon : s + n;
        ps = colon ? colon + 1 : NULL;
        if (he == hs) {
            snprintf(
                err, errlen,
                "database URL has no host (form: mysql://user[:password]@host[:port]/database)");
            return -1;
        }
        if (!plain_host(hs, (size_t)(he - hs))) {
            snprintf(
                err, errlen,
                "database URL: the host is not a host name, an IPv4 address or an [IPv6] address "
                "(an unencoded character in the password? %s)",
                ENCODE_HINT);
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
            snprintf(err, errlen,
                     "database URL: the port after the host must be a number from 1 to 65535");
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
            snprintf(err, errlen,
                     "database URL holds a control character (byte %zu); percent-encode it", i + 1);
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
        snprintf(err, errlen, "database URL: bad percent-escape in the user or password (%s)",
                 ENCODE_HINT);
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
        snprintf(err, errlen,
                 "database URL: the database name after the host must be 1 to 64 characters, "
                 "without \"/\"");
        goto fail;
    }
    if (query && parse_query(cfg, query + 1, err, errlen) != 0)
        goto fail;
    if (check_tls(cfg, err, errlen) != 0)
        goto fail;
    if (!cfg->password && env_password && *env_password)
        cfg->password = strdup(env_password);
    return 0;
fail:
    db_config_free(cfg);
    return -1;
}

#define DB_PASSWORD_FILE_MAX 4096
#define DB_PASSWORD_FILE_MAX_TEXT "4096"
#define DB_PASSWORD_CREDENTIAL "db-password"

/*
 * Read a password file (a systemd credential, OOPS_DB_PASSWORD_FILE): a
 * regular file (opened O_NONBLOCK, so a FIFO cannot block us; checked on the
 * opened fd) of at most DB_PASSWORD_FILE_MAX bytes, without NUL bytes; one
 * trailing newline is stripped; refused when others may read it
 * (secret_file_private). *out gets a new string, or NULL when the file
 * is empty. Returns 0; 1 when absent_ok and the file does not exist; or -1
 * with a one-line message naming the file (never its content). Every copy of
 * the text but *out is wiped.
 */
static int read_password_file(const char *path, const char *what, bool absent_ok, char **out,
                              char *err, size_t errlen)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && absent_ok && errno == ENOENT)
        return 1;
    struct stat st;
    const char *why = NULL;
    if (fd < 0 || fstat(fd, &st) != 0)
        why = strerror(errno);
    else if (!S_ISREG(st.st_mode))
        why = "not a regular file";
    char open_to[300];
    if (!why && secret_file_private(fd, &st, open_to, sizeof open_to) != 0) {
        close(fd);
        snprintf(err, errlen, "refusing the database password %s %.512s: it is %s", what, path,
                 open_to);
        return -1;
    }
    char text[DB_PASSWORD_FILE_MAX + 1];
    size_t len = 0;
    while (!why && len < sizeof text) {
        ssize_t n = read(fd, text + len, sizeof text - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            why = strerror(errno);
        else if (n == 0)
            break;
        else
            len += (size_t)n;
    }
    if (fd >= 0)
        close(fd);
    if (!why && len > DB_PASSWORD_FILE_MAX)
        why = "larger than " DB_PASSWORD_FILE_MAX_TEXT " bytes";
    if (!why && memchr(text, '\0', len))
        why = "holds a NUL byte";
    if (!why && len > 0 && text[len - 1] == '\n')
        len--;
    if (!why && len > 0) {
        *out = dup_range(text, len);
        if (!*out)
            why = "out of memory";
    }
    explicit_bzero(text, sizeof text);
    if (!why)
        return 0;
    snprintf(err, errlen, "cannot read the database password %s %.512s: %s", what, path, why);
    return -1;
}

int db_config_resolve(db_config *cfg, const char *url_flag, char *err, size_t errlen)
{
    const char *url = url_flag ? url_flag : getenv("OOPS_DB");
    if (db_config_parse(cfg, url, NULL, err, errlen) != 0)
        return -1;
    if (cfg->password) /* the URL's own wins */
        return 0;
    /* A systemd credential (LoadCredential=db-password:...), when the unit gives one. */
    const char *cred_dir = getenv("CREDENTIALS_DIRECTORY");
    int rc = 1;
    if (cred_dir && *cred_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/" DB_PASSWORD_CREDENTIAL, cred_dir);
        rc = read_password_file(path, "credential", true, &cfg->password, err, errlen);
    }
    const char *file = getenv("OOPS_DB_PASSWORD_FILE");
    if (rc == 1 && file && *file)
        rc = read_password_file(file, "file (OOPS_DB_PASSWORD_FILE)", false, &cfg->password, err,
                                errlen);
    if (rc < 0) {
        db_config_free(cfg);
        return -1;
    }
    const char *env = getenv("OOPS_DB_PASSWORD");
    if (rc == 1 && env && *env && !(cfg->password = strdup(env))) {
        snprintf(err, errlen, "out of memory");
        db_config_free(cfg);
        return -1;
    }
    return 0;
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
