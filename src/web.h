/* web: what the fleet page (issue 16) needs from C, pure — no Lua, no loop.
 *
 *   - the page's assets (web/ in the source tree), compiled into the binary
 *     by cmake/web.cmake: an installed or moved oopsd serves them with
 *     nothing to find on disk, and never anything from elsewhere (no CDN);
 *   - the bearer token: read once at start from --http-token-file, compared
 *     in constant time with a request's Authorization header;
 *   - the users file (--http-users): named users, each with a role and a
 *     token, the one a request's token belongs to found in constant time;
 *   - whether a --listen address is loopback (the token is required when it
 *     is not).
 * The data the page shows comes from the Lua engine (lua/oops/web.lua);
 * daemon_http.c routes the requests (daemon_actions.c the page's actions).
 */
#ifndef OOPS_WEB_H
#define OOPS_WEB_H

#include <stdbool.h>
#include <stddef.h>

typedef struct web_asset {
    const char *path; /* "/" (index.html), "/fleet.js", ... */
    const char *content_type;
    const unsigned char *data;
    size_t len;
} web_asset;

/* The asset served at `path`, or NULL. Static data: never freed. */
const web_asset *web_asset_find(const char *path);

/* The total size of every asset, in bytes (the page's weight). */
size_t web_assets_bytes(void);

/* Token files: a regular file (checked on the opened fd, opened
 * O_NONBLOCK, so a FIFO cannot hang the start), at most WEB_TOKEN_MAX
 * bytes, one trailing newline (and \r) stripped, at least WEB_TOKEN_MIN
 * characters left, every one printable ASCII without space (what fits in
 * an Authorization header as it is). */
#define WEB_TOKEN_MAX 4096
#define WEB_TOKEN_MIN 16

/* Reads the token of `path` into a malloc'd string (*out; free it with
 * web_token_free, which wipes it); a file others may read is refused
 * (secret_file_private). 0, or -1 with a one-line message in err
 * naming the file and what is wrong with it — never its content. */
int web_token_read(const char *path, char **out, char *err, size_t errlen);

/* Zeroes then frees a token web_token_read gave (NULL is fine): the whole
 * buffer it allocated, not only up to a terminator. Nothing else may be
 * passed to it. */
void web_token_free(char *token);

/* Does the Authorization header value `header` (may be NULL) carry
 * "Bearer TOKEN" with exactly `token`? The comparison takes the same time
 * whatever bytes differ (it depends on the lengths only). The scheme is
 * matched case-insensitively, as RFC 7235 says. */
bool web_bearer_ok(const char *header, const char *token);

/* ---- users: --http-users FILE ------------------------------------------
 *
 * One user a line, `NAME ROLE TOKEN`, the fields separated by spaces or
 * tabs (one or more); blank lines and lines whose first non-blank character
 * is '#' are ignored; LF or CR LF line endings. NAME: 1 to WEB_USER_NAME_MAX
 * characters of [a-z0-9._-], the first a letter or a digit (the actor
 * `NAME@page` of the pipeline history). ROLE: `viewer` or `operator`.
 * TOKEN: what a --http-token-file holds (WEB_TOKEN_MIN to WEB_TOKEN_MAX
 * characters of printable ASCII without space). Two users never share a
 * name or a token. The file is checked as a token file is (regular, opened
 * O_NONBLOCK, kept from other users: secret_file_private), and bounded. */
#define WEB_USERS_MAX 256              /* users in a file, at most */
#define WEB_USERS_FILE_MAX (64 * 1024) /* bytes of a file, at most */
#define WEB_USERS_LINE_MAX 8192        /* bytes of a line (without its LF), at most */
#define WEB_USER_NAME_MAX 32

typedef enum web_role { WEB_ROLE_VIEWER = 1, WEB_ROLE_OPERATOR = 2 } web_role;

/* What a caller may keep of a user: never its token. */
typedef struct web_user {
    char name[WEB_USER_NAME_MAX + 1];
    web_role role;
} web_user;

/* The users and their tokens (opaque); web_users_free wipes the tokens. */
typedef struct web_users web_users;

/* Reads the users file `path` into *out (free it with web_users_free).
 * 0, or -1 (*out NULL) with a one-line message in err naming the file,
 * and the line (`line N:`) when one is wrong, and what is wrong with it:
 * never a field's content (a token written in the name's place must not
 * reach a log either). A file with no user is refused. */
int web_users_read(const char *path, web_users **out, char *err, size_t errlen);

/* The same on the text of a users file already read (len bytes, not
 * NUL-terminated; at most WEB_USERS_FILE_MAX), `path` only naming it in
 * messages. What web_users_read calls; the fuzz harness's entry. */
int web_users_parse(const char *text, size_t len, const char *path, web_users **out, char *err,
                    size_t errlen);

/* A set of one user, a viewer named "token", whose token is `token` (what
 * --http-token-file gives: it keeps meaning "one viewer"). 0, or -1 (*out
 * NULL) when the token breaks the token rules (NULL, too short or long,
 * a character that is not printable ASCII or is a space) or memory runs
 * out. */
int web_users_single(const char *token, web_users **out);

/* Whose token does the Authorization header value `authorization` (may be
 * NULL) carry, as "Bearer TOKEN" (the scheme in any case, as
 * web_bearer_ok)? true and the user copied into *who (who may be NULL);
 * false (*who zeroed) for no header, another scheme, or a token nobody
 * has. Every user's token is compared with the whole of it, whatever
 * matched or differed before: the time depends on the number of users and
 * the lengths only, never on the tokens' bytes. */
bool web_users_check(const web_users *u, const char *authorization, web_user *who);

/* The number of users (0 for NULL). */
size_t web_users_count(const web_users *u);

/* "viewer" / "operator" ("unknown" for anything else). */
const char *web_role_name(web_role r);

/* Wipes every token (and the names), then frees. NULL is fine. */
void web_users_free(web_users *u);

/* Is `listen` (a --listen value) a loopback address: "localhost:PORT",
 * 127.0.0.0/8 or [::1]? "off" is loopback too (nothing listens). */
bool web_listen_is_loopback(const char *listen);

/* ---- the Host header: DNS rebinding -----------------------------------
 *
 * A web page the operator visits could otherwise read the fleet's JSON (and
 * commands' output) from a loopback oopsd by pointing a name it controls at
 * 127.0.0.1: the browser then calls that the page's own origin. Its requests
 * carry that name in Host, so every request's Host must be one this server
 * answers for:
 *   - localhost, any 127.0.0.0/8 address, [::1];
 *   - the --listen address (an IP literal or localhost; a wildcard 0.0.0.0
 *     or [::] is none);
 *   - the address the client connected to (the connection's local address:
 *     a probe of a server listening on a wildcard names the address it
 *     dialled);
 *   - a name given with --http-host (a DNS name or an IP literal).
 * Any port (a proxy or a port mapping may change it). Names are compared in
 * ASCII lower case, byte for byte otherwise (no trailing-dot folding); IP
 * literals by their value ([::0:1] is [::1]). A request without a Host
 * header (header NULL) is accepted here: a browser always sends one, which
 * a script cannot change or remove, so a request without one never comes
 * from a rebinding page. (The daemon answers such an HTTP/1.1 request 400,
 * as RFC 9112 says; an HTTP/1.0 one, a minimal probe's, is answered.)
 * Everything else is refused: a malformed or over-long value, an IPv6 zone,
 * a name nobody listed. */

#define WEB_HOSTS_MAX 16        /* --http-host names, at most */
#define WEB_HOST_NAME_MAX 253   /* characters of a DNS name */
#define WEB_HOST_HEADER_MAX 300 /* a longer Host header is refused unread */

typedef struct web_hosts {
    size_t n;
    bool listen_added; /* name[] holds the --listen host too (one slot kept for it) */
    /* canonical: names in lower case, IP literals as inet_ntop writes them
     * (IPv6 without brackets); the --listen host and the --http-host names */
    char name[WEB_HOSTS_MAX + 1][WEB_HOST_NAME_MAX + 1];
} web_hosts;

typedef enum web_host_kind {
    WEB_HOST_BAD = -1, /* none of these: refused */
    WEB_HOST_NAME,     /* a DNS name: labels of letters, digits, '-' (not first or last),
                          1 to 63 characters each, 253 in all, the last not all digits */
    WEB_HOST_IPV4,     /* dotted quad */
    WEB_HOST_IPV6,     /* in brackets */
} web_host_kind;

/* Splits a Host header value "host[:port]" (port: 1 to 5 digits, at most
 * 65535) and writes the host's canonical form into out (at least
 * WEB_HOST_NAME_MAX + 1 bytes). Returns its kind; WEB_HOST_BAD (out "")
 * for anything else, or for a value over WEB_HOST_HEADER_MAX bytes. */
web_host_kind web_host_parse(const char *value, char *out, size_t outlen);

/* Adds a --http-host value (a DNS name, a dotted quad or an [IPv6] literal,
 * no port) to h. 0, or -1 with a one-line message in err naming the flag
 * and the value (quoted, escaped): malformed, or more than WEB_HOSTS_MAX. */
int web_hosts_add(web_hosts *h, const char *name, char *err, size_t errlen);

/* Adds the host of a --listen value ("IPV4:PORT", "[IPV6]:PORT",
 * "localhost:PORT"; already checked by http_listen_check) unless it is a
 * wildcard (0.0.0.0, [::]) or "off". Never fails: h has a slot kept for it. */
void web_hosts_listen(web_hosts *h, const char *listen);

/* May a request whose Host header is `header` (NULL: it sent none), on a
 * connection whose local address is `local` (inet_ntop text, IPv6 without
 * brackets; NULL when unknown), be answered? See above. */
bool web_host_allowed(const web_hosts *h, const char *header, const char *local);

#endif
