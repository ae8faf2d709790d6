/*
 * ctl_args — the pure parts of the command lines (oopsctl, oopsd): flags,
 * statuses, numbers, application names, pipeline ids, and text made safe to
 * print on a terminal. No I/O, no global state (unlike getopt): a fuzz
 * harness may call any of them with any bytes.
 *
 * Every parser returns 0, or -1 with a one-line message in err that names
 * the flag and the bad value, the value quoted and escaped
 * (pipeline_quote), e.g. `--limit "-5": must be a whole number from 1 to
 * 10000`.
 *
 * Status names are case-insensitive (ASCII) wherever one is read — `list
 * --status`, `stop --expect` — and always printed in upper case, as stored.
 */
#ifndef OOPS_CTL_ARGS_H
#define OOPS_CTL_ARGS_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "pipeline_state.h"

/* One flag a command accepts: "--env" (takes a value) or "--manual". */
typedef struct ctl_flag {
    const char *name;  /* with its dashes: "--env" */
    bool has_value;    /* "--env X" or "--env=X"; else "--manual" alone */
    bool given;        /* out: seen */
    const char *value; /* out: the value (points into argv), NULL for a flag without one */
} ctl_flag;

/*
 * Parse words against flags (whose `given`/`value` may already be set by an
 * earlier call: a flag is still refused the second time). Every word that
 * does not start with "-" is a positional, collected in order into pos (at
 * most maxpos; one more is `unexpected argument "X"`); "--" makes every
 * later word positional. Refused: an unknown flag (exact names only, no
 * abbreviations), a flag given twice (a name listed N times in flags may be
 * given N times: each use fills the first of its entries not given yet, in
 * order; the N+1st is refused), a missing or empty value, a value
 * given to a flag that takes none. With stop_at_positional the parse ends at
 * the first positional, which is not consumed: *used is its index (argc when
 * there is none) — for the global flags before a command.
 */
int ctl_parse_flags(int argc, char *const *argv, ctl_flag *flags, size_t nflags,
                    bool stop_at_positional, const char **pos, size_t maxpos, size_t *npos,
                    int *used, char *err, size_t errlen);

/* One status name, ASCII case-insensitive: "running" is RUNNING. */
int ctl_parse_status(const char *flag, const char *s, pipeline_status *out, char *err,
                     size_t errlen);
/* A comma-separated list of statuses (each as ctl_parse_status, a repeat is
 * harmless) into a mask, bit (1u << status). The empty list and an empty
 * element ("RUNNING,", ",ERROR", "A,,B") are refused; any length is read. */
int ctl_parse_statuses(const char *flag, const char *s, unsigned *mask, char *err, size_t errlen);

/* A whole number in decimal digits only (no sign, space, or suffix) from min
 * to max; `unit` (may be NULL) is named in the message ("milliseconds"). */
int ctl_parse_number(const char *flag, const char *s, unsigned long long min,
                     unsigned long long max, const char *unit, unsigned long long *out, char *err,
                     size_t errlen);

#define CTL_LIMIT_MAX 10000ULL   /* oopsctl list/history --limit: 1 .. this */
#define CTL_DRAIN_MAX 3600000ULL /* oopsd --drain: 1 .. this milliseconds (an hour) */

/*
 * A duration as oops.duration (lua/oops/duration.lua) reads one: one or more
 * <whole number><unit> parts, units from largest to smallest, each at most
 * once: d, h, m, s, ms ("7d", "1h30m", "500ms"). A bare number is refused
 * ("5" could be seconds or minutes); so are 0 and anything past max_ms.
 * *out_ms receives milliseconds.
 */
int ctl_parse_duration(const char *flag, const char *s, unsigned long long max_ms,
                       unsigned long long *out_ms, char *err, size_t errlen);
#define CTL_SINCE_MAX_MS (36600ULL * 86400000ULL) /* oopsctl list --since: 100 years */

/* "NS/APP", each a lowercase DNS label (pipeline_label_valid): ns and app
 * receive the parts (each at least PIPELINE_LABEL_MAX + 1 bytes). */
int ctl_parse_app(const char *flag, const char *s, char *ns, char *app, char *err, size_t errlen);

/* A pipeline id (pipeline_id_valid), else `malformed pipeline id "X" (...)`. */
int ctl_check_id(const char *s, char *err, size_t errlen);

/* oopsctl logs --step: build, deploy or health (exactly). */
int ctl_parse_step(const char *flag, const char *s, char *err, size_t errlen);

/* A server name (oopsd --name): 1 to 40 printable ASCII characters, no space. */
#define CTL_SERVER_NAME_MAX 40
int ctl_parse_server_name(const char *flag, const char *s, char *err, size_t errlen);

/*
 * Append s (len bytes, NULs included) to b so that it cannot change the
 * terminal it is printed on: control characters are shown escaped — C0 as
 * \xNN (newline, carriage return and tab as \n, \r, \t), DEL as \x7f, C1 (U+0080 to
 * U+009F) and the invisible bidirectional and line-separator controls
 * (U+061C, U+200E, U+200F, U+2028 to U+202E, U+2066 to U+2069) as \uNNNN —
 * and every byte that is not part of valid UTF-8 (overlong forms,
 * surrogates, above U+10FFFF, cut sequences) as \xNN. In CTL_TEXT_LINES mode
 * \n and \t are kept, for output meant to span lines. Everything else,
 * backslashes included, is copied as is: the text output is for reading,
 * --json is the exact form.
 */
enum { CTL_TEXT_LINE = 0, CTL_TEXT_LINES = 1 };
void ctl_escape(buf *b, const char *s, size_t len, int mode);

#endif
