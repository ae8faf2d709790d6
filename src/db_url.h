/*
 * db_url — database connection settings: the mysql:// URL (percent-encoding,
 * IPv6 literals, ?options), the environment (OOPS_DB, OOPS_DB_PASSWORD, password
 * files: OOPS_DB_PASSWORD_FILE, a systemd credential), and
 * the password kept out of messages and argv. Pure: nothing here connects
 * (db.h opens connections from a db_config).
 */
#ifndef OOPS_DB_URL_H
#define OOPS_DB_URL_H

#include <stddef.h>

/*
 * ssl-mode: DEFAULT (not given: the client library's own default; Debian 12's
 * Connector/C 3.3 then uses no TLS), DISABLED (never TLS), REQUIRED (TLS, the
 * server's certificate not verified), VERIFY_CA (TLS, the certificate chains
 * to ssl-ca), VERIFY_IDENTITY (VERIFY_CA, and the certificate names the host
 * of the URL). VERIFY_* need ssl-ca; DISABLED takes no other ssl- option.
 */
typedef enum {
    DB_SSL_DEFAULT = 0,
    DB_SSL_DISABLED,
    DB_SSL_REQUIRED,
    DB_SSL_VERIFY_CA,
    DB_SSL_VERIFY_IDENTITY,
} db_ssl_mode;

/* The option's spelling, upper case ("VERIFY_CA"); "" for DB_SSL_DEFAULT. */
const char *db_ssl_mode_name(db_ssl_mode m);

/* Connection settings. Strings are owned by the struct (db_config_free). */
typedef struct db_config {
    char *user;
    char *password; /* never printed; db_config_where() leaves it out */
    char *host;
    char *database;
    char *socket;  /* unix socket path, or NULL */
    unsigned port; /* 0 = 3306 */
    unsigned connect_timeout_s;
    unsigned read_timeout_s;
    unsigned write_timeout_s;
    /* Session settings, 0 = the server's default: how long an idle session
     * lives (a vanished host's session, and the row locks of a transaction
     * it left open, are freed within it), and how long a statement waits for
     * a row lock before failing (instead of blocking the caller). */
    unsigned session_wait_timeout_s;
    unsigned row_lock_wait_s;
    /* TLS (?ssl-mode=...&ssl-ca=...&ssl-cert=...&ssl-key=..., absolute paths). */
    db_ssl_mode ssl_mode;
    char *ssl_ca;   /* the CA certificate(s) the server's certificate must chain to */
    char *ssl_cert; /* this client's certificate and key (an account that REQUIREs X509) */
    char *ssl_key;
} db_config;

/*
 * Parse mysql://user[:password]@host[:port]/database[?OPTIONS], options
 * socket=PATH, connect_timeout=S, read_timeout=S (also the write timeout: how
 * long a statement may wait for the server; default 30), ssl-mode=MODE,
 * ssl-ca=PATH, ssl-cert=PATH, ssl-key=PATH (each at most once; paths absolute).
 * User and password may be percent-encoded. When the URL carries no password
 * and env_password is non-NULL, it is used (OOPS_DB_PASSWORD). Returns 0, or
 * -1 with a one-line message in err that never contains the password.
 */
int db_config_parse(db_config *cfg, const char *url, const char *env_password, char *err,
                    size_t errlen);
/*
 * The URL from --db when given, else $OOPS_DB. The password, first found of:
 * the URL's; the systemd credential $CREDENTIALS_DIRECTORY/db-password (when
 * that file exists); the file named by $OOPS_DB_PASSWORD_FILE; $OOPS_DB_PASSWORD.
 * A password file is a regular file of at most 4096 bytes without NUL bytes,
 * one trailing newline stripped (empty: no password); one that cannot be read
 * is an error naming the file, never quoting it. The copies read are wiped.
 * Same return as db_config_parse.
 */
int db_config_resolve(db_config *cfg, const char *url_flag, char *err, size_t errlen);
int db_config_copy(db_config *dst, const db_config *src);
void db_config_free(db_config *cfg);
/* "host:port" or "socket PATH" for messages; writes into buf and returns it. */
const char *db_config_where(const db_config *cfg, char *buf, size_t n);

/*
 * Mask the password of a mysql:// URL in place (each character becomes 'x'),
 * so that `ps` does not show it once the process has parsed its arguments.
 */
void db_mask_url_password(char *url);

#endif
