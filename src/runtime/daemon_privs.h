/*
 * daemon_privs — what the daemon's children inherit: the user they run as
 * (--run-as) and an environment without the database settings.
 */
#ifndef OOPS_DAEMON_PRIVS_H
#define OOPS_DAEMON_PRIVS_H

/* The settings are parsed: every OOPS_DB* variable leaves the process
 * environment, its value overwritten in the initial environment block. */
void daemon_scrub_db_environment(void);

/* --run-as USER (NULL: none): the inheritable and ambient capabilities
 * cleared, USER resolved and the capabilities it needs checked, every child
 * (proc_set_run_as) then runs as USER. OOPSD_OK, or OOPSD_BAD_INPUT after
 * saying why on stderr. */
int daemon_setup_run_as(const char *user);

#endif
