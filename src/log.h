/*
 * log — one line per event on stderr as key=value pairs:
 *   ts=2026-11-30T12:00:00.123Z level=info server=s1 scan=build pipeline=ab12 msg="..."
 * Values with spaces, quotes, '=' or control characters (C0, DEL, and C1 as
 * UTF-8) are quoted with backslash escapes (\" \\ \n \t \r, else \xNN per
 * byte), so every event stays on one line (tracebacks included).
 */
#ifndef OOPS_LOG_H
#define OOPS_LOG_H

#include <stddef.h>

typedef enum { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR } log_level;

/* The server name put on every line (copied); NULL leaves it out. */
void log_set_server(const char *name);
void log_set_min_level(log_level l);
/* "debug" ... "error" → level; -1 when unknown. */
int log_level_parse(const char *s);
const char *log_level_name(log_level l);

/*
 * Write one event. kv is a NULL-terminated list of key, value pairs (values
 * may be NULL: the pair is skipped); msg goes last.
 */
void log_event(log_level l, const char *msg, const char *const *kv);
/* printf-style message without extra fields. */
void log_msg(log_level l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
