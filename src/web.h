/* web: what the fleet page (issue 16) needs from C, pure — no Lua, no loop.
 *
 *   - the page's assets (web/ in the source tree), compiled into the binary
 *     by cmake/web.cmake: an installed or moved oopsd serves them with
 *     nothing to find on disk, and never anything from elsewhere (no CDN);
 *   - the bearer token: read once at start from --http-token-file, compared
 *     in constant time with a request's Authorization header;
 *   - whether a --listen address is loopback (the token is required when it
 *     is not).
 * The data the page shows comes from the Lua engine (lua/oops/web.lua);
 * daemon.c routes the requests.
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
 * web_token_free, which wipes it). 0, or -1 with a one-line message in err
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

/* Is `listen` (a --listen value) a loopback address: "localhost:PORT",
 * 127.0.0.0/8 or [::1]? "off" is loopback too (nothing listens). */
bool web_listen_is_loopback(const char *listen);

#endif
